"""``ddcli ingest TRACE delta:PATH``: a Delta table written by delta-rs (appends, overwrites,
deletes, updates, merges, compactions, property changes), with and without its change data
feed, ingested in several steps, equals the writer's own table at every version.

The reference is delta-rs reading the table at each version (``DeltaTable(path,
version=v)``); ddcli's side is ``ddcli query --as-of v``. Both are compared as multisets.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

import pyarrow as pa
import pytest

from tests.helpers import REPO
from tests.helpers.cli import jsonl, ok, one_line_error
from tests.sources.lake_writers import ddcli, ddcli_at, rows


def write_history(path: str, rng: random.Random, steps: int, *, cdf: bool, partition: bool, first: bool = True):
    """Versions of a Delta table made by delta-rs, each step one kind of change."""
    from deltalake import DeltaTable, write_deltalake
    if first:
        write_deltalake(path, rows(rng, 25), configuration={"delta.enableChangeDataFeed": "true"} if cdf else None,
                        partition_by=["flag"] if partition else None)
    for _ in range(steps):
        kind = rng.choice(["append", "append", "delete", "update", "merge", "merge", "overwrite", "optimize",
                           "property", "duplicate"])
        table = DeltaTable(path)
        if kind == "append":
            write_deltalake(path, rows(rng, rng.randrange(1, 12)), mode="append")
        elif kind == "duplicate":  # rows already there again: multiplicities above one
            write_deltalake(path, table.to_pyarrow_table().slice(0, 3), mode="append")
        elif kind == "delete":
            table.delete(rng.choice(["id % 4 = 1", "x < 0", "grp = 'a'", "amount > 0", "day IS NULL"]))
        elif kind == "update":
            table.update(updates={"x": "x * 2", "grp": "'u'"}, predicate=f"id % 3 = {rng.randrange(3)}")
        elif kind == "merge":
            src = rows(rng, 6, ids=rng.sample(range(50), 6))
            (table.merge(src, "t.id = s.id", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
        elif kind == "overwrite":
            write_deltalake(path, rows(rng, rng.randrange(0, 10)), mode="overwrite")
        elif kind == "optimize":  # the same rows in new files: no data change
            table.optimize.compact()
        else:  # metadata only
            table.alter.set_table_properties({"delta.checkpointInterval": str(rng.randrange(5, 50))})


def writer_at(path: str, version: int, **options) -> Counter:
    from deltalake import DeltaTable
    return Counter(tuple(r.values()) for r in DeltaTable(path, version=version, **options).to_pyarrow_table().to_pylist())


def latest(path: str, **options) -> int:
    from deltalake import DeltaTable
    return DeltaTable(path, **options).version()


def check_every_version(store: str, trace: str, path: str, tmp, times=None, **options) -> None:
    for v in range(latest(path, **options) + 1):
        t = v if times is None else times[v]
        assert ddcli_at(store, trace, t, tmp) == writer_at(path, v, **options), f"version {v}"


@pytest.mark.parametrize("cdf, partition, seed", [(False, False, 1), (False, True, 2), (True, False, 3),
                                                  (True, True, 4)])
def test_a_written_table_ingested_in_steps_equals_the_writer_at_every_version(tmp_path, cdf, partition, seed):
    rng = random.Random(seed)
    path, store = str(tmp_path / "lake"), str(tmp_path / "store")
    write_history(path, rng, 4, cdf=cdf, partition=partition)
    first = jsonl(ok(ddcli(store, "ingest", "orders", f"delta:{path}", "--max-versions", "2", "--json")).stdout)[0]
    assert first["created"] and first["versions"] == [0, 1]
    ok(ddcli(store, "ingest", "orders", f"delta:{path}"))
    for _ in range(2):
        write_history(path, rng, 5, cdf=cdf, partition=partition, first=False)
        ok(ddcli(store, "ingest", "orders", f"delta:{path}", "--max-versions", "3"))
        ok(ddcli(store, "ingest", "orders", f"delta:{path}"))
        ok(ddcli(store, "compact", "orders"))
    again = jsonl(ok(ddcli(store, "ingest", "orders", f"delta:{path}", "--json")).stdout)[0]
    assert again["noop"] and again["position"]["version"] == latest(path)
    check_every_version(store, "orders", path, tmp_path)


def test_commit_times_as_times(tmp_path):
    """--time-from timestamp: each version at its commit time in microseconds, kept increasing."""
    from deltalake import DeltaTable
    rng = random.Random(7)
    path, store = str(tmp_path / "lake"), str(tmp_path / "store")
    write_history(path, rng, 3, cdf=False, partition=False)
    ok(ddcli(store, "ingest", "t", f"delta:{path}", "--time-from", "timestamp"))
    write_history(path, rng, 3, cdf=True, partition=False, first=False)
    ok(ddcli(store, "ingest", "t", f"delta:{path}", "--time-from", "timestamp"))
    stamps = {h["version"]: h["timestamp"] * 1000 for h in DeltaTable(path).history()}
    times = []
    for v in range(latest(path) + 1):
        times.append(max(stamps[v], times[-1] + 1) if times else stamps[v])
    check_every_version(store, "t", path, tmp_path, times)


def _ingest_process(store: str, trace: str, source: str, fault: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), DDCLI_SERVICE="0")
    env.pop("DDCLI_FAULT", None)
    if fault:
        env["DDCLI_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "ddcli", "ingest", trace, source, "--store", store, "--json"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("fault", ["ingest.before_commit", "ingest.after_commit"])
def test_a_kill_around_the_commit_leaves_the_store_consistent_and_the_next_ingest_completes_it(tmp_path, fault):
    from storage.store import Store
    rng = random.Random(11)
    path, store = str(tmp_path / "lake"), str(tmp_path / "store")
    write_history(path, rng, 3, cdf=False, partition=False)
    ok(ddcli(store, "ingest", "t", f"delta:{path}"))
    before = Store(store).trace("t")
    write_history(path, rng, 4, cdf=False, partition=False, first=False)
    res = _ingest_process(store, "t", f"delta:{path}", fault)
    assert res.returncode == 137, res.stderr[-2000:]
    after = Store(store).trace("t")
    if fault == "ingest.before_commit":
        assert (after.upper, after.sources, after.layers) == (before.upper, before.sources, before.layers)
    else:
        assert after.sources[f"delta:{os.path.realpath(path)}"]["version"] == latest(path)
    done = jsonl(_ingest_process(store, "t", f"delta:{path}", None).stdout)[0]
    assert done["noop"] == (fault == "ingest.after_commit")
    check_every_version(store, "t", path, tmp_path)


def test_schema_change_and_bad_sources_are_one_line(tmp_path):
    from deltalake import write_deltalake
    path, store = str(tmp_path / "lake"), str(tmp_path / "store")
    write_deltalake(path, pa.table({"k": [1, 2], "v": ["a", "b"]}))
    ok(ddcli(store, "ingest", "t", f"delta:{path}"))
    write_deltalake(path, pa.table({"k": [3], "v": ["c"], "w": [1.5]}), mode="append", schema_mode="merge")
    err = one_line_error(ddcli(store, "ingest", "t", f"delta:{path}"))
    assert "version 1 has the schema (k int64, v string, w double)" in err and "new trace" in err
    assert "nothing" not in ok(ddcli(store, "query", "t", "--format", "csv")).stdout
    assert "cannot be opened as a Delta table" in one_line_error(ddcli(store, "ingest", "u", f"delta:{tmp_path}/no"))
    assert "--time" in one_line_error(ddcli(store, "ingest", "t", f"delta:{path}", "--time", "3"))
    write_deltalake(str(tmp_path / "timed"), pa.table({"time": [1], "v": ["a"]}))
    err = one_line_error(ddcli(store, "ingest", "u", f"delta:{tmp_path}/timed"))
    assert "column 'time'" in err
    write_deltalake(str(tmp_path / "spaced"), pa.table({"a b": pa.array([], pa.int64())}))
    assert "identifiers" in one_line_error(ddcli(store, "ingest", "u", f"delta:{tmp_path}/spaced"))
    write_deltalake(str(tmp_path / "nested"), pa.table({"k": [1], "l": [[1, 2]]}))
    assert "nested type" in one_line_error(ddcli(store, "ingest", "u", f"delta:{tmp_path}/nested"))
    from storage.store import Store
    assert list(Store(store).state().traces) == ["t"], "nothing refused was created"


def test_a_table_on_s3_is_read_with_the_settings_of_s3_stores(tmp_path, s3_env):
    import uuid

    from deltalake import DeltaTable, write_deltalake

    from tests.helpers.s3 import BUCKET
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/lake"
    opts = {"AWS_ENDPOINT_URL": s3_env, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    rng = random.Random(13)
    store = str(tmp_path / "store")
    write_deltalake(url, rows(rng, 12), storage_options=opts)
    write_deltalake(url, rows(rng, 5), mode="append", storage_options=opts)
    ok(ddcli(store, "ingest", "t", f"delta:{url}"))
    DeltaTable(url, storage_options=opts).delete("id < 20")
    write_deltalake(url, rows(rng, 4), mode="append", storage_options=opts)
    ok(ddcli(store, "ingest", "t", f"delta:{url}"))
    check_every_version(store, "t", url, tmp_path, storage_options=opts)


def test_versions_that_change_no_rows_add_nothing_but_move_the_record(tmp_path):
    """A compaction (files rewritten, ``dataChange: false``) is not read; a property change
    adds nothing; both still move the record and the upper."""
    from deltalake import DeltaTable, write_deltalake
    rng = random.Random(17)
    path, store = str(tmp_path / "lake"), str(tmp_path / "store")
    write_deltalake(path, rows(rng, 10))
    write_deltalake(path, rows(rng, 5), mode="append")
    ok(ddcli(store, "ingest", "t", f"delta:{path}"))
    DeltaTable(path).optimize.compact()
    DeltaTable(path).alter.set_table_properties({"delta.checkpointInterval": "20"})
    res = jsonl(ok(ddcli(store, "ingest", "t", f"delta:{path}", "--json")).stdout)[0]
    assert (res["versions"], res["updates"], res["upper"], res["noop"]) == ([2, 3], 0, "4", False)
    check_every_version(store, "t", path, tmp_path)


def test_a_version_whose_commit_file_was_cleaned_up_is_read_from_the_checkpoint(tmp_path):
    """The log keeps a checkpoint of version 2 and not its commit file: its changes are the
    table's files at 2 against those at 1."""
    from deltalake import DeltaTable, write_deltalake
    rng = random.Random(19)
    path, store = str(tmp_path / "lake"), str(tmp_path / "store")
    write_deltalake(path, rows(rng, 10), partition_by=["flag"])
    write_deltalake(path, rows(rng, 5), mode="append")
    DeltaTable(path).delete("id < 20")
    DeltaTable(path).create_checkpoint()
    os.remove(os.path.join(path, "_delta_log", f"{2:020d}.json"))
    ok(ddcli(store, "ingest", "t", f"delta:{path}"))
    check_every_version(store, "t", path, tmp_path)


def test_a_change_data_feed_turned_on_midway(tmp_path):
    """Versions before the feed was turned on are read from their files, those after from the feed."""
    from deltalake import DeltaTable, write_deltalake
    rng = random.Random(23)
    path, store = str(tmp_path / "lake"), str(tmp_path / "store")
    write_history(path, rng, 3, cdf=False, partition=False)
    DeltaTable(path).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    write_history(path, rng, 4, cdf=False, partition=False, first=False)
    ok(ddcli(store, "ingest", "t", f"delta:{path}"))
    assert DeltaTable(path).metadata().configuration["delta.enableChangeDataFeed"] == "true"
    check_every_version(store, "t", path, tmp_path)
