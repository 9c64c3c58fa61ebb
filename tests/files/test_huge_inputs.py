"""Huge inputs take bounded memory: files are streamed, a line or value over
``DDCLI_MAX_LINE_BYTES`` is one line (exit 2) within seconds, and the updates one ingest
holds are capped by ``DDCLI_INGEST_MEMORY``; local files and S3 objects, plain and
compressed. The store is byte-identical afterwards.

Sparse files cost no disk; each huge case runs in a real process with a timeout and a
limit on its heap (``RLIMIT_DATA``; mapping a file does not count, allocating does), so
reading a file whole fails the test instead of the machine.
"""

from __future__ import annotations

import gzip
import itertools
import os
import resource
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import tree_digest
from tests.helpers.operations import REPO, ddcli_env
from tests.helpers.s3 import BUCKET, aws_env
from tests.cli.test_cli import WORDS, ddcli, ok, one_line_error
from tests.helpers.cli import jsonl

GB = 1 << 30
MEMORY_CAP = 3 * GB  # heap a huge-file ingest may take (a 20 GB read would not fit)


def _capped():
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_CAP, MEMORY_CAP))


def ingest_process(store: str, *sources: str, env: dict | None = None, timeout: float = 60):
    """``ddcli ingest h SOURCES`` in a process capped in memory; returns (result, seconds)."""
    start = time.time()
    res = subprocess.run([sys.executable, "-m", "ddcli", "ingest", "h", *sources, "--store", store],
                         env=ddcli_env(env), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                         preexec_fn=_capped)
    return res, time.time() - start


def assert_refused(res, *needles) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr[-2000:]
    for n in needles:
        assert n in res.stderr, res.stderr


@pytest.fixture
def words(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    return store


def sparse(path, head: bytes, size: int = 20 * GB) -> str:
    """A file of ``size`` bytes: ``head``, then zeros that take no disk."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return str(path)


@pytest.mark.parametrize("name, head, where", [("s.csv", b"word,time\na,1\n", "row 2: "),
                                               ("h.csv", b"word,time\n", "row 1: "),
                                               ("s.jsonl", b'{"word": "a", "time": 1}\n', "line 2: ")])
def test_a_20_gb_sparse_file_is_refused_within_seconds(words, tmp_path, name, head, where):
    path = sparse(tmp_path / name, head)
    before = tree_digest(words)
    for _ in range(2):  # pyarrow's read-ahead thread once outlived the error and aborted the exit (134), at random
        res, took = ingest_process(words, path)
        assert_refused(res, f"{path}: {where}")
        assert took < 30 and tree_digest(words) == before


def test_a_20_gb_sparse_parquet_file_is_refused_unread(words, tmp_path):
    """A Parquet file is read whole: one bigger than DDCLI_INGEST_MEMORY is refused before
    it is hashed or its footer read (a footer may claim 4 GB); compressed, its copy stops there."""
    plain = sparse(tmp_path / "s.parquet", b"PAR1")
    bomb = sparse(tmp_path / "f.parquet", b"PAR1")
    with open(bomb, "r+b") as fh:
        fh.seek(20 * GB - 8)
        fh.write((0xFFFFFF00).to_bytes(4, "little") + b"PAR1")
    zipped = tmp_path / "z.parquet.gz"
    with gzip.open(zipped, "wb", compresslevel=1) as fh:
        fh.write(b"PAR1" + bytes(64 << 20))
    before = tree_digest(words)
    for path, env in ((plain, None), (bomb, None), (str(zipped), {"DDCLI_INGEST_MEMORY": "16m"})):
        res, took = ingest_process(words, path, env=env)
        assert_refused(res, f"{path}: the Parquet file is at least", "DDCLI_INGEST_MEMORY")
        assert took < 30 and tree_digest(words) == before


def test_a_50_mb_value_under_a_raised_limit_takes_bounded_memory_and_stays_out_of_the_log(words, tmp_path):
    path = tmp_path / "value.csv"
    value = "v" * 50_000_000
    path.write_text(f"word,time\n{value},1\nshort,1\n")
    res, took = ingest_process(words, str(path), env={"DDCLI_MAX_LINE_BYTES": "64m"})
    assert res.returncode == 0, res.stderr
    from storage.store import Store
    log = Store(words).log
    assert os.path.getsize(log.path(log.latest()[0])) < 16 << 10  # the value is in the layer, not the log
    rows = jsonl(ok(ddcli(words, "query", "h", "--json")).stdout)
    assert sorted((len(r["word"]), r["count"]) for r in rows) == [(5, 1), (50_000_000, 1)]


def test_a_gzip_bomb_of_zeros_is_refused_within_seconds(words, tmp_path):
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b"word,time\na,1\n")
        zeros = bytes(1 << 20)
        for _ in range(512):  # 512 MiB of zeros in about 2 MB
            fh.write(zeros)
    before = tree_digest(words)
    res, took = ingest_process(words, str(path))
    assert_refused(res, str(path), "row 2")
    assert took < 30 and tree_digest(words) == before


def test_a_line_or_value_over_the_limit_is_refused_and_under_it_read(words, tmp_path):
    env = {"DDCLI_MAX_LINE_BYTES": "1m"}
    long = "x" * (3 << 20)
    cases = {
        "long.csv": ("word,time\nshort,1\n" + long + ",2\n").encode(),
        "long.jsonl": ('{"word": "short", "time": 1}\n{"word": "' + long + '", "time": 2}\n').encode(),
        "long.csv.gz": gzip.compress(("word,time\nshort,1\n" + long + ",2\n").encode()),
        "quote.csv": ('word,time\nshort,1\n"' + long + ",2\n").encode(),
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        before = tree_digest(words)
        err = one_line_error(ddcli(words, "ingest", "h", str(path), env=env))
        assert str(path) in err and "1 MiB (DDCLI_MAX_LINE_BYTES)" in err, err
        assert "row 2" in err or "line 2" in err, err
        assert tree_digest(words) == before
    pq.write_table(pa.table({"word": ["short", long], "time": [1, 2]}), tmp_path / "long.parquet")
    err = one_line_error(ddcli(words, "ingest", "h", str(tmp_path / "long.parquet"), env=env))
    assert "row 2, column word: the value is longer than 1 MiB" in err
    ok(ddcli(words, "ingest", "h", str(tmp_path / "long.csv"), env={"DDCLI_MAX_LINE_BYTES": "4m"}))


def test_a_50_mb_value_is_refused_by_default(words, tmp_path):
    path = tmp_path / "value.csv"
    with open(path, "w") as fh:
        fh.write("word,time\n")
        fh.write("v" * 50_000_000)
        fh.write(",1\n")
    before = tree_digest(words)
    res, took = ingest_process(words, str(path))
    assert_refused(res, "16 MiB (DDCLI_MAX_LINE_BYTES)")
    assert took < 30 and tree_digest(words) == before


SLOW_READ_AHEAD = """
import sys, threading, time
from storage.errors import UpdateFileError
from storage.files import streams
from storage.files.read import read_update_file

real = streams.ByteStream.read

def slow(self, n=-1):
    data = real(self, n)
    if not data and threading.current_thread() is not threading.main_thread():
        time.sleep(0.3)  # pyarrow's read-ahead thread, slow to come back from the end of the stream
    return data

streams.ByteStream.read = slow
try:
    read_update_file(sys.argv[1])
except UpdateFileError as e:
    print(e, file=sys.stderr)
    sys.exit(2)
"""


def test_refusing_a_long_line_waits_for_the_read_ahead_thread_before_the_process_exits(tmp_path):
    """pyarrow's read-ahead thread goes on after the reader failed on the first block; a
    process that exits while it is still in Python aborts (exit -6, "terminate called
    without an active exception": 1 refusal in 7 did). Slowed down, it is waited for."""
    path = tmp_path / "value.csv"
    path.write_bytes(b"word,time\n" + b"v" * 50_000_000 + b",1\n")
    script = tmp_path / "slow_read_ahead.py"
    script.write_text(SLOW_READ_AHEAD)
    res = subprocess.run([sys.executable, str(script), str(path)], cwd=REPO, env=ddcli_env(None),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "16 MiB (DDCLI_MAX_LINE_BYTES)" in res.stderr


def _mixed_updates(rows: int, seed: int) -> pa.Table:
    """Updates of mixed types (decimals, dates, strings, doubles, nulls), with duplicates
    that consolidate and retractions, some cancelling rows exactly."""
    import datetime
    import decimal
    import random
    rnd = random.Random(seed)
    recs = [{"k": rnd.randint(0, rows // 6),
             "name": rnd.choice(["a", "bb", "c,d", "", None]),
             "price": None if rnd.random() < 0.1 else decimal.Decimal(rnd.randint(-10**6, 10**6)).scaleb(-2),
             "day": None if rnd.random() < 0.1 else datetime.date(2020, 1, 1) + datetime.timedelta(rnd.randint(0, 9)),
             "x": rnd.choice([0.5, -1.25, 3.0, None]),
             "time": rnd.randint(1, 4), "diff": rnd.choice([1, 1, 2, -1])} for _ in range(rows)]
    recs += recs[: rows // 5] + [dict(r, diff=-r["diff"]) for r in recs[rows // 3: rows // 2]]
    rnd.shuffle(recs)
    return pa.Table.from_pylist(recs, schema=pa.schema([("k", pa.int64()), ("name", pa.string()),
                                                        ("price", pa.decimal128(12, 2)), ("day", pa.date32()),
                                                        ("x", pa.float64()), ("time", pa.int64()), ("diff", pa.int64())]))


@pytest.fixture(scope="module")
def big_updates(tmp_path_factory):
    """The same updates (about 3 MB in memory) as Parquet and as CSV."""
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    folder = tmp_path_factory.mktemp("big")
    table = _mixed_updates(40_000, 7)
    pq.write_table(table, folder / "big.parquet", row_group_size=10_000)
    text = pa.table({c: pc.fill_null(pc.cast(table.column(c), pa.string()), "\\N") for c in table.column_names})
    pacsv.write_csv(text, folder / "big.csv")
    return folder


def _layer_files(store: str, trace: str) -> list:
    """The trace's layer files: their log entries (without their names) and bytes."""
    from storage.store import Store
    st = Store(store)
    files = [f for layer in st.trace(trace).all_layers() for f in layer.files]
    return [({**f.to_json(), "name": None}, open(os.path.join(st.trace_dir(trace), f.name), "rb").read())
            for f in files]


@pytest.mark.parametrize("name", ["big.parquet", "big.csv"])
def test_updates_beyond_the_memory_budget_are_ingested_out_of_core_as_in_memory(big_updates, tmp_path, name,
                                                                                 monkeypatch):
    """Past DDCLI_INGEST_MEMORY an ingest validates its files in chunks on disk and has
    DuckDB consolidate and sort them: the layer file and its log entry are byte for byte
    those of an ingest in memory, and the temporary files are gone."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    path = str(big_updates / name)
    ok(ddcli(str(tmp_path / "mem"), "ingest", "t", path))
    small = {"DDCLI_INGEST_MEMORY": "300k", "DDCLI_MAX_LINE_BYTES": "16k"}
    res = ok(ddcli(str(tmp_path / "disk"), "ingest", "t", path, env=small))
    assert "retractions match no live row" in res.stderr  # the negative-row check ran on disk too
    expect = _layer_files(str(tmp_path / "mem"), "t")
    assert _layer_files(str(tmp_path / "disk"), "t") == expect and expect[0][0]["rows"] > 32_768
    assert os.listdir(tmp_path / "tmp") == []
    q = ["query", "t", "--format", "csv"]
    assert ok(ddcli(str(tmp_path / "disk"), *q)).stdout == ok(ddcli(str(tmp_path / "mem"), *q)).stdout


def test_a_file_is_read_in_chunks_numbered_in_the_file(big_updates, monkeypatch):
    """Each chunk is validated alone, its rows numbered from where it starts in the file."""
    monkeypatch.setenv("DDCLI_MAX_LINE_BYTES", "16k")
    from storage.files.read import read_update_chunks, read_update_file
    whole = read_update_file(str(big_updates / "big.csv"))
    starts, parts = [], []
    sha = read_update_chunks(str(big_updates / "big.csv"), lambda b, first: (starts.append(first), parts.append(b)),
                             memory=300 << 10)
    assert sha == whole.sha256 and len(parts) > 3
    assert starts == [0] + list(itertools.accumulate(b.num_rows for b in parts[:-1]))
    assert pa.concat_tables([b.data for b in parts]).equals(whole.data)


def test_a_bad_row_out_of_core_is_the_same_one_line_and_writes_nothing(words, tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    path = tmp_path / "late.csv"
    path.write_text("word,time\n" + "".join(f"w{i},{i % 7}\n" for i in range(60_000)) + "late,soon\n")
    before = tree_digest(words)
    small = {"DDCLI_INGEST_MEMORY": "300k", "DDCLI_MAX_LINE_BYTES": "16k"}
    err = one_line_error(ddcli(words, "ingest", "h", str(path), env=small))
    assert err == one_line_error(ddcli(words, "ingest", "h", str(path)))
    assert "row 60001, column time: 'soon' is not an integer" in err
    assert tree_digest(words) == before and os.listdir(tmp_path / "tmp") == []


def test_an_upsert_beyond_the_memory_budget_is_still_refused(words, tmp_path):
    """An upsert needs its updates in memory (its retractions are computed from them)."""
    (tmp_path / "rows.csv").write_bytes(b"word,time\n" + b"a,1\n" * 200_000)
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", "h", str(tmp_path / "rows.csv"), "--upsert", "word",
                               env={"DDCLI_INGEST_MEMORY": "2m"}))
    assert "take more than 2 MiB of memory (DDCLI_INGEST_MEMORY)" in err
    assert tree_digest(words) == before


def test_a_parquet_file_that_decodes_to_more_than_the_budget_is_refused_before_decoding(words, tmp_path):
    """(In memory: an upsert; another ingest would read it in chunks, out of core.)"""
    path = tmp_path / "dense.parquet"  # 200 MB of text in a few hundred KB
    pq.write_table(pa.table({"word": ["w" * 1000] * 200_000, "time": [1] * 200_000}), path,
                   compression="zstd", use_dictionary=False)
    assert path.stat().st_size < 2 << 20
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", "h", str(path), "--upsert", "word",
                               env={"DDCLI_INGEST_MEMORY": "64m"}))
    assert f"{path}: the updates read so far take more than 64 MiB of memory (DDCLI_INGEST_MEMORY)" in err
    assert tree_digest(words) == before


def test_a_bad_row_in_a_late_block_writes_nothing(words, tmp_path):
    """Validation of every row before anything is written holds with streaming."""
    text = "word,time\n" + "".join(f"w{i},{i}\n" for i in range(200_000)) + "late,soon\n"
    path = tmp_path / "late.csv"
    path.write_text(text)
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", "h", str(path), env={"DDCLI_MAX_LINE_BYTES": "64k"}))
    assert "row 200001, column time: 'soon' is not an integer" in err
    assert tree_digest(words) == before


@pytest.mark.parametrize("value", ["lots", "0", "-3m"])
def test_a_bad_setting_is_one_line(words, tmp_path, value):
    err = one_line_error(ddcli(words, "ingest", "h", str(WORDS[1]), env={"DDCLI_MAX_LINE_BYTES": value}))
    assert f"DDCLI_MAX_LINE_BYTES={value!r} is not a size" in err


def test_huge_s3_objects_are_refused_within_seconds(s3_env, tmp_path):
    import boto3
    env = aws_env(s3_env)
    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1",
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    prefix = f"huge-{os.getpid()}-{time.time_ns()}"
    codec = pa.Codec("zstd")
    zeros = codec.compress(bytes(64 << 20), asbytes=True)
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/bomb.csv.zst",
                      Body=codec.compress(b"word,time\na,1\n", asbytes=True) + zeros * 8)  # 512 MiB
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/long.jsonl", Body=b'{"word": "' + b"y" * (3 << 20) + b'"}\n')
    store = str(tmp_path / "store")
    res, took = ingest_process(store, f"s3://{BUCKET}/{prefix}/bomb.csv.zst", env=env)
    assert_refused(res, "bomb.csv.zst", "row 2")
    assert took < 30 and not os.path.exists(store)
    res, took = ingest_process(store, f"s3://{BUCKET}/{prefix}/*.jsonl", env={**env, "DDCLI_MAX_LINE_BYTES": "1m"})
    assert_refused(res, "long.jsonl: line 1: the line is longer than 1 MiB")
    assert not os.path.exists(store)
