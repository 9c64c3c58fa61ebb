"""Ingest sources: local paths and globs, ``s3://`` objects and globs, gzip and zstd.

Objects are written to moto's S3 server (started by the tests) under ``day=N/`` prefixes,
as a data lake lands them; the store is a local folder or an S3 prefix. Every check of
what a trace holds compares ``ddcli query --as-of t`` with a fold of the rows the test
wrote, at every time. Exactly once: a glob run again, overlapping globs and new objects
must each bring every object's updates exactly once; a changed or bad object is refused
with the store unchanged.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
import random
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import tree_digest
from tests.helpers.s3 import BUCKET, aws_env
from tests.helpers.cli import ddcli, jsonl as parse_jsonl, ok, one_line_error

FORMATS = ["csv.gz", "csv.zst", "jsonl.gz", "jsonl.zst", "parquet"]


def encode(fmt: str, rows: list[tuple[str, int, int]]) -> bytes:
    """``rows`` of (word, time, diff) as the bytes of an update file of format ``fmt``."""
    if fmt.startswith("csv"):
        data = ("word,time,diff\n" + "".join(f"{w},{t},{d}\n" for w, t, d in rows)).encode()
    elif fmt.startswith("jsonl"):
        data = "".join(json.dumps({"word": w, "time": t, "diff": d}) + "\n" for w, t, d in rows).encode()
    else:
        buf = io.BytesIO()
        pq.write_table(pa.table({"word": [r[0] for r in rows], "time": [r[1] for r in rows],
                                 "diff": [r[2] for r in rows]}), buf)
        return buf.getvalue()
    if fmt.endswith(".gz"):
        return gzip.compress(data)
    if fmt.endswith(".zst"):
        return pa.Codec("zstd").compress(data, asbytes=True)
    return data


class Lake:
    """A prefix of the test bucket where update files land, and every row landed there."""

    def __init__(self, client):
        self.client = client
        self.prefix = f"{uuid.uuid4().hex[:12]}/raw"
        self.url = f"s3://{BUCKET}/{self.prefix}"
        self.rows: dict[str, list] = {}  # key -> rows
        self.bodies: dict[str, bytes] = {}  # key -> the bytes put
        self.rng = random.Random(7)

    def land(self, day: int, fmt: str, n: int = 6, name: str = "part") -> str:
        rows = [(self.rng.choice("abcdef"), day, self.rng.choice([1, 1, 2, -1])) for _ in range(n)]
        return self.put(f"day={day}/{name}.{fmt}", rows)

    def put(self, key: str, rows: list, data: bytes | None = None) -> str:
        body = data or encode(key.split(".", 1)[1], rows)
        self.client.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}", Body=body)
        self.rows[key] = rows
        self.bodies[key] = body
        return f"{self.url}/{key}"

    def updates(self, keys) -> list:
        return [((w,), (t,), d) for k in keys for w, t, d in self.rows[k]]


@pytest.fixture
def lake(s3_env):
    import boto3
    env = aws_env(s3_env)
    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1",
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    return Lake(client)


def check_trace(store: str, trace: str, updates: list, times) -> None:
    """``query --as-of t`` equals a fold of ``updates`` at every time ``t``."""
    for t in times:
        want = Counter()
        for (w,), (s,), d in updates:
            if s <= t:
                want[w] += d
        res = ok(ddcli(store, "query", trace, "--as-of", str(t), "--format", "jsonl"))
        got = {r["word"]: r["count"] for r in parse_jsonl(res.stdout)}
        assert got == {w: c for w, c in want.items() if c}, (t, got)


def ingest(store: str, *sources: str) -> dict:
    return json.loads(ok(ddcli(store, "ingest", "events", *sources, "--json")).stdout)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_glob_of_compressed_and_parquet_objects_is_ingested_whole(lake, store_location, fmt):
    keys = [f"day={d}/part.{fmt}" for d in range(1, 4)]
    for d in range(1, 4):
        lake.land(d, fmt)
    res = ingest(store_location, f"{lake.url}/day=*/*.{fmt}")
    assert res["files"] == [f"{lake.url}/{k}" for k in keys]
    check_trace(store_location, "events", lake.updates(keys), range(0, 5))


def test_a_week_of_mixed_formats_by_one_glob_and_again_is_exactly_once(lake, store_location):
    kinds = ["csv.gz", "parquet", "jsonl.gz"]
    keys = []
    for day in range(1, 8):
        for i, fmt in enumerate(kinds):
            lake.land(day, fmt, name=f"p{i}")
            keys.append(f"day={day}/p{i}.{fmt}")
    res = ingest(store_location, f"{lake.url}/day=*/*")
    assert len(res["files"]) == 21 and res["updates"] == sum(len(lake.rows[k]) for k in keys)
    check_trace(store_location, "events", lake.updates(keys), range(0, 9))
    before = tree_digest(store_location)
    again = ingest(store_location, f"{lake.url}/day=*/*", f"{lake.url}/**/*.csv.gz")
    assert again["noop"] and len(again["skipped"]) == 21 and tree_digest(store_location) == before


def test_overlapping_globs_and_new_objects_are_each_taken_once(lake, store_location):
    for day in (1, 2, 3):
        lake.land(day, "csv.gz")
    first = ingest(store_location, f"{lake.url}/day=[12]/*.csv.gz")
    assert len(first["files"]) == 2
    second = ingest(store_location, f"{lake.url}/day=*/*.csv.gz", f"{lake.url}/day=3/part.csv.gz")
    assert second["files"] == [f"{lake.url}/day=3/part.csv.gz"] and len(second["skipped"]) == 2
    lake.land(4, "csv.zst")
    lake.land(5, "csv.gz")
    third = ingest(store_location, f"{lake.url}/**")
    assert sorted(third["files"]) == [f"{lake.url}/day=4/part.csv.zst", f"{lake.url}/day=5/part.csv.gz"]
    check_trace(store_location, "events", lake.updates(lake.rows), range(0, 7))
    assert ingest(store_location, f"{lake.url}/**")["noop"]


def test_an_object_put_again_with_the_same_bytes_is_skipped_and_a_changed_one_refused(lake, store_location):
    url = lake.land(1, "csv.gz")
    lake.land(2, "csv.gz")
    ingest(store_location, f"{lake.url}/day=*/*.csv.gz")
    before = tree_digest(store_location)
    lake.put("day=1/part.csv.gz", lake.rows["day=1/part.csv.gz"], lake.bodies["day=1/part.csv.gz"])
    assert ingest(store_location, f"{lake.url}/day=*/*.csv.gz")["noop"]  # the same ETag: not read
    lake.client.copy_object(Bucket=BUCKET, Key=f"{lake.prefix}/day=9/copy.csv.gz",
                            CopySource=f"{BUCKET}/{lake.prefix}/day=1/part.csv.gz")
    again = ingest(store_location, f"{lake.url}/day=*/*.csv.gz")
    assert again["noop"] and len(again["skipped"]) == 3  # the copy: read, and known by its content
    assert tree_digest(store_location) == before
    lake.put("day=1/part.csv.gz", [("zzz", 1, 1)])
    err = one_line_error(ddcli(store_location, "ingest", "events", f"{lake.url}/day=*/*.csv.gz"))
    assert url in err and "time 1 is not beyond the upper" in err
    assert tree_digest(store_location) == before


def test_a_bad_object_among_good_ones_is_refused_naming_object_row_and_value(lake, store_location):
    lake.land(1, "csv.gz")
    lake.land(2, "jsonl.gz")
    bad = lake.put("day=3/part.jsonl.gz", [], gzip.compress(b'{"word":"a","time":3}\n{"word":"b","time":"soon"}\n'))
    before = tree_digest(store_location)
    err = one_line_error(ddcli(store_location, "ingest", "events", f"{lake.url}/day=*/*"))
    assert err.startswith(f"error: {bad}: ") and "row 2" in err and "'soon'" in err, err
    assert tree_digest(store_location) == before
    lake.put("day=3/part.csv.zst", [], b"not zstd at all")
    err = one_line_error(ddcli(store_location, "ingest", "events", f"{lake.url}/day=3/*.zst"))
    assert "is not valid zstd data" in err


def test_a_glob_matching_nothing_a_missing_object_or_bucket_is_one_line_and_writes_nothing(lake, tmp_path):
    store = str(tmp_path / "store")
    lake.land(1, "csv.gz")
    for source, expect in [(f"{lake.url}/day=*/*.parquet", "no object matches this glob"),
                           (f"{lake.url}/day=1/nothing.csv", "no such object"),
                           (f"{lake.url}/day=1/", "names a prefix, not an object"),
                           ("s3://no-such-bucket-here/raw/*.csv", "bucket 'no-such-bucket-here' does not exist")]:
        err = one_line_error(ddcli(store, "ingest", "events", source))
        assert expect in err, err
        assert not os.path.exists(store)


def test_refused_credentials_for_a_source_are_one_line(tmp_path):
    from tests.store.test_object_store import _free_port, _wait_for_port
    import subprocess
    import sys
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        from tests.helpers.operations import run_ddcli
        store = str(tmp_path / "store")
        res = run_ddcli(["ingest", "events", f"s3://{BUCKET}/raw/*.csv.gz"], store,
                        env=aws_env(f"http://127.0.0.1:{port}"), timeout=120)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "refused the credentials" in res.stderr and not os.path.exists(store)
    finally:
        server.terminate()
        server.wait(10)


def test_local_globs_and_compressed_local_files(tmp_path, store_dir):
    rows = {}
    for day in (1, 2, 3):
        folder = tmp_path / "lake" / f"day={day}"
        folder.mkdir(parents=True)
        for fmt in ("csv.gz", "jsonl.zst"):
            r = [(f"{fmt[0]}{day}", day, 1), ("x", day, 2)]
            (folder / f"p.{fmt}").write_bytes(encode(fmt, r))
            rows[f"day={day}/p.{fmt}"] = r
    first = ingest(store_dir, str(tmp_path / "lake" / "day=1" / "*"))
    assert len(first["files"]) == 2
    rest = ingest(store_dir, str(tmp_path / "lake" / "**" / "*.*"))
    assert len(rest["files"]) == 4 and len(rest["skipped"]) == 2
    updates = [((w,), (t,), d) for r in rows.values() for w, t, d in r]
    check_trace(store_dir, "events", updates, range(0, 5))
    err = one_line_error(ddcli(store_dir, "ingest", "events", str(tmp_path / "lake" / "*.csv")))
    assert "no file matches this glob" in err


def test_the_format_option_wins_over_the_inner_extension(tmp_path, store_dir):
    path = tmp_path / "updates.txt.gz"
    path.write_bytes(gzip.compress(b"word,time\nfig,1\n"))
    err = one_line_error(ddcli(store_dir, "ingest", "events", str(path)))
    assert "cannot tell the format from the extension '.txt'" in err
    ok(ddcli(store_dir, "ingest", "events", str(path), "--input-format", "csv"))
    check_trace(store_dir, "events", [(("fig",), (1,), 1)], [1])


KEYS = ["raw/day=1/a.csv.gz", "raw/day=1/b.parquet", "raw/day=2/a.csv.gz", "raw/day=12/a.csv.gz",
        "raw/day=2/x/deep.csv.gz", "raw/top.csv.gz", "raw/a[1].csv", "other/day=1/a.csv.gz"]


@pytest.mark.parametrize("pattern", ["raw/day=*/*.csv.gz", "raw/**/*.csv.gz", "raw/day=?/*", "raw/day=[12]/*",
                                     "raw/day=[!1]/*", "raw/**", "*/day=1/*.csv.gz", "raw/a[[]1].csv",
                                     "raw/**/deep.csv.gz", "**/a.csv.gz", "raw/a[^]1].csv", "raw/day=[^1]/*"])
def test_s3_globs_match_the_keys_python_glob_matches_as_files(tmp_path, pattern):
    from storage.files.locations import glob_pattern
    for key in KEYS:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_text("")
    found = glob.glob(str(tmp_path / pattern), recursive=True)
    want = sorted(os.path.relpath(p, tmp_path) for p in found if os.path.isfile(p))
    assert sorted(k for k in KEYS if glob_pattern(pattern).fullmatch(k)) == want


def test_a_glob_never_matches_the_stores_own_layer_files(lake, tmp_path, monkeypatch):
    """Layers are Parquet files with data columns, time and diff: a glob over a folder or a
    bucket holding the store would otherwise ingest the store into itself."""
    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.table({"word": ["a"], "time": [1]}), tmp_path / "updates.parquet")
    ok(ddcli("ddstore", "ingest", "events", "updates.parquet"))
    res = json.loads(ok(ddcli("ddstore", "ingest", "more", "**/*.parquet", "--json")).stdout)
    assert res["files"] == ["updates.parquet"]
    store = f"{lake.url}/store"
    lake.put("day=1/part.parquet", [("b", 1, 1)])
    ok(ddcli(store, "ingest", "events", f"{lake.url}/day=1/part.parquet"))
    res = json.loads(ok(ddcli(store, "ingest", "more", f"{lake.url}/**/*.parquet", "--json")).stdout)
    assert res["files"] == [f"{lake.url}/day=1/part.parquet"]


def test_an_object_failing_its_checksum_on_the_way_is_one_line_or_read_whole(lake, store_dir):
    """An object uploaded in one part of a multipart upload comes back from moto with a
    checksum of the whole-object kind that botocore cannot match; with real S3 it reads.
    Either way: never an internal error, and nothing half-written."""
    from boto3.s3.transfer import TransferConfig
    body = encode("csv.gz", [("a", 1, 1)])
    lake.client.upload_fileobj(io.BytesIO(body), BUCKET, f"{lake.prefix}/day=1/part.csv.gz",
                               Config=TransferConfig(multipart_threshold=1))
    res = ddcli(store_dir, "ingest", "events", f"{lake.url}/day=1/part.csv.gz")
    if res.exit_code == 0:
        check_trace(store_dir, "events", [(("a",), (1,), 1)], [1])
    else:
        assert "do not match the checksum" in one_line_error(res)
        assert not os.path.exists(store_dir)
