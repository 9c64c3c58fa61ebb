"""Every trace is a Delta Lake table: read by delta-rs and polars, it equals the fold.

The readers (tests/helpers/delta_reader.py) know nothing of ddcli: they read the trace's
folder as a Delta table and sum ``diff`` over ``time <= t`` per data row. After every
command of a random stream (ingests, sealing, ``advance --since``, compaction, garbage
collection) the answer at every time must be the fold of the updates the test ingested and
the answer of ``ddcli query --as-of t``, and the table must hold exactly the sealed layers.
"""

from __future__ import annotations

import os
import random

import pytest

from storage.lattice import format_frontier
from storage.sql.query import as_of
from storage.state.trace import Trace
from storage.store import Store
from tests.helpers.delta_reader import (ddcli_log_version, delta_files, delta_rs_at, delta_version,
                                        last_commit_info, polars_at)
from tests.helpers.store_refs import box, fold, moment_between, set_store_clock, write_updates

KEYS = [0, 1, 2, 3]
VALUES = ["a", "b"]


def random_rows(rng, times, n):
    return [((rng.choice(KEYS), rng.choice(VALUES)), rng.choice(times), rng.choice([-2, -1, 1, 1, 2, 3]))
            for _ in range(n)]


def sealed_files(store, name) -> set[str]:
    return {f.name for l in store.trace(name).layers for f in l.files}


def ddcli_at(store, name, t) -> dict:
    table = as_of(store, name, t)
    cols = [c for c in table.column_names if c != "count"]
    return {tuple(r[c] for c in cols): r["count"] for r in table.to_pylist()}


def assert_delta_follows(store, name, raw, times) -> int:
    """The Delta table shows the newest state: its files, its log version, its collections."""
    uri = store.trace_dir(name)
    trace = store.trace(name)
    assert delta_files(uri) == sealed_files(store, name), "the Delta table holds exactly the sealed layers"
    assert ddcli_log_version(uri) <= store.state().version, "never ahead of ddcli's log"
    info = last_commit_info(uri)["ddcli"]
    assert (info["since"], info["upper"]) == (trace.since.to_json(), trace.upper.to_json())
    sealed = [u for u in raw if not trace.upper.beyond(u[1])]
    checked = 0
    for t in times:
        if not trace.since.beyond(t) or trace.upper.beyond(t):
            continue
        want = fold(sealed, t)
        assert delta_rs_at(uri, t) == want, f"delta-rs at {t}"
        assert polars_at(uri, t) == want, f"polars at {t}"
        assert ddcli_at(store, name, t) == want, f"ddcli query --as-of {t}"
        checked += 1
    return checked


SEEDS = [("local", 0), ("local", 1), ("s3", 0)]


@pytest.mark.parametrize("store_location, seed", SEEDS, indirect=["store_location"])
def test_a_trace_read_as_a_delta_table_equals_the_fold_through_compaction_and_gc(tmp_path, store_location, seed):
    rng = random.Random(seed)
    store = Store(store_location)
    raw, upper, checked, n = [], 0, 0, 0
    for step in range(14):
        op = rng.choices(["ingest", "ingest_upper", "since", "compact", "full", "gc"], [6, 2, 2, 2, 1, 1])[0] \
            if step else "ingest"
        if op in ("ingest", "ingest_upper"):
            rows = random_rows(rng, [(upper + i,) for i in range(3)], rng.randint(1, 8))
            n += 1
            path = write_updates(str(tmp_path / f"u{n}{rng.choice(['.csv', '.parquet'])}"), rows, 1)
            top = max(u[1][0] for u in rows)
            upper = top + 1 + (rng.randint(0, 2) if op == "ingest_upper" else 0)
            store.ingest("t", [path], **({"upper": str(upper)} if op == "ingest_upper" else {}))
            raw += rows
        elif op == "since":
            store.advance("t", since=str(rng.randint(store.trace("t").since.elements[0][0], upper)))
        elif op == "compact":
            store.compact("t")
        elif op == "full":
            store.compact("t", full=True)
        else:
            store.compact(grace_seconds=0)  # merged-away layers go at once: no Delta version names them now
        checked += assert_delta_follows(store, "t", raw, [(t,) for t in range(upper + 2)])
    assert checked > 30


def test_pending_layers_stay_out_of_the_delta_table_until_sealed(tmp_path):
    store = Store(str(tmp_path / "store"))
    sealed_rows = [((0, "a"), (0, 0), 1), ((1, "a"), (0, 1), 2)]
    store.ingest("p", [write_updates(str(tmp_path / "a.csv"), sealed_rows, 2)], upper="(0,2) (1,0)")
    late = [((2, "b"), (1, 1), 1), ((0, "a"), (2, 0), -1)]
    store.ingest("p", [write_updates(str(tmp_path / "b.csv"), late, 2)])  # beyond the upper: pending
    trace = store.trace("p")
    assert trace.pending, "the late updates wait as a pending layer"
    pending = {f.name for l in trace.pending for f in l.files}
    assert not pending & delta_files(store.trace_dir("p"))
    assert_delta_follows(store, "p", sealed_rows + late, box(2, 0, 3))
    store.advance("p", upper="(3,3)")
    assert not store.trace("p").pending
    assert_delta_follows(store, "p", sealed_rows + late, box(2, 0, 3))
    assert delta_rs_at(store.trace_dir("p"), (2, 2)) == fold(sealed_rows + late, (2, 2))


def test_each_delta_version_says_which_ddcli_state_it_shows(tmp_path):
    store = Store(str(tmp_path / "store"))
    store.ingest("w", [write_updates(str(tmp_path / "a.csv"), [((0, "a"), (3,), 1)], 1)])
    store.advance("w", since="2")
    uri = store.trace_dir("w")
    commit = last_commit_info(uri)
    info = commit["ddcli"]
    assert info["trace"] == "w" and info["logVersion"] == store.state().version == ddcli_log_version(uri)
    assert info["since"] == [[2]] and info["upper"] == [[4]] and info["ddcli"] not in ("", None)
    assert "since 2" in commit["userMetadata"] and "upper 4" in commit["userMetadata"]
    # a command that changes nothing in the trace writes no Delta version
    version = delta_version(uri)
    store.ingest("w", [str(tmp_path / "a.csv")])  # the same file again: a no-op
    store.ingest("other", [write_updates(str(tmp_path / "b.csv"), [((1, "b"), (0,), 1)], 1)])
    assert delta_version(uri) == version


def test_garbage_collection_keeps_what_a_delta_version_inside_the_retention_names(tmp_path, store_location,
                                                                                   monkeypatch):
    store = Store(store_location)
    raw = []
    for i, rows in enumerate([[((k, "a"), (0,), 1) for k in range(10)], [((0, "a"), (1,), 1)]]):
        store.ingest("t", [write_updates(str(tmp_path / f"u{i}.csv"), rows, 1)])  # sizes apart: two layers
        raw += rows
    uri = store.trace_dir("t")
    before_version, before_files = delta_version(uri), delta_files(uri)
    store.compact("t", full=True)
    assert not before_files & delta_files(uri), "the full merge replaced every layer"
    monkeypatch.setenv("DDCLI_DELTA_RETENTION", "3600")
    store.compact(grace_seconds=0)  # no ddcli reader needs the merged-away files; a Delta reader may
    # time travel to the version before the merge still works
    assert delta_rs_at(uri, (5,), version=before_version) == fold(raw, (5,))
    set_store_clock(monkeypatch, moment_between() + 3600)
    store.compact(grace_seconds=0)
    files = {n for n in store.blobs.list(uri)}
    assert files == sealed_files(store, "t"), "past the retention the merged-away files are collected"
    assert delta_rs_at(uri, (5,)) == fold(raw, (5,))
    with pytest.raises(Exception):
        delta_rs_at(uri, (5,), version=before_version)  # its files are gone, as its retention said


def test_a_dropped_trace_empties_its_table_and_a_new_one_of_that_name_replaces_it(tmp_path, monkeypatch):
    store = Store(str(tmp_path / "store"))
    store.ingest("t", [write_updates(str(tmp_path / "a.csv"), [((0, "a"), (0,), 1)], 1)])
    store.write_and_commit("drop", lambda written: None, lambda s, _: s.with_traces({"t": None}))
    uri = store.trace_dir("t")
    assert delta_files(uri) == set() and delta_rs_at(uri, (9,)) == {}
    assert "dropped" in last_commit_info(uri)["ddcli"]["empty"]
    path = tmp_path / "b.csv"
    path.write_text("word,time\nhello,4\n")
    store.ingest("t", [str(path)])
    assert delta_rs_at(uri, (4,)) == {("hello",): 1} and polars_at(uri, (4,)) == {("hello",): 1}
    store.write_and_commit("drop", lambda written: None, lambda s, _: s.with_traces({"t": None}))
    set_store_clock(monkeypatch, moment_between() + 1)
    store.compact(grace_seconds=0)
    assert not os.path.exists(uri), "once nothing is left to read, the dropped trace's folder goes"


def test_delta_logs_can_be_turned_off_and_on_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCLI_DELTA", "off")
    store = Store(str(tmp_path / "store"))
    store.ingest("a", [write_updates(str(tmp_path / "a.csv"), [((0, "a"), (0,), 1)], 1)])
    store.ingest("b", [write_updates(str(tmp_path / "b.csv"), [((1, "b"), (0,), 1)], 1)])
    assert not os.path.exists(os.path.join(store.trace_dir("a"), "_delta_log"))
    monkeypatch.setenv("DDCLI_DELTA", "on")
    store = Store(store.path)
    store.ingest("b", [write_updates(str(tmp_path / "c.csv"), [((1, "b"), (1,), 1)], 1)])
    # the record of how far the Delta logs are lags, so every trace is brought up to date
    assert delta_rs_at(store.trace_dir("a"), (5,)) == {(0, "a"): 1}
    assert delta_rs_at(store.trace_dir("b"), (5,)) == {(1, "b"): 2}


def test_types_delta_lake_cannot_hold_are_widened_or_leave_the_trace_without_a_table(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    store = Store(str(tmp_path / "store"))
    p = str(tmp_path / "u.parquet")
    pq.write_table(pa.table({"small": pa.array([255], pa.uint8()), "big": pa.array([7], pa.uint64()),
                             "at": pa.array([1], pa.timestamp("s")), "code": pa.array([b"ab"], pa.binary(2)),
                             "time": pa.array([1], pa.int64())}), p)
    store.ingest("u", [p])
    assert [str(f.type) for f in store.trace("u").schema] == ["int16", "int64", "timestamp[us]", "binary"]
    assert polars_at(store.trace_dir("u"), (1,)) == {(255, 7, pa.scalar(1, pa.timestamp("s")).as_py(), b"ab"): 1}
    q = str(tmp_path / "clock.parquet")
    pq.write_table(pa.table({"at": pa.array([5], pa.time64("us")), "time": pa.array([1], pa.int64())}), q)
    store.ingest("clock", [q])  # Delta has no time-of-day type: the trace works, without a table
    assert not os.path.exists(os.path.join(store.trace_dir("clock"), "_delta_log"))
    assert not store.warnings


def test_a_writer_holding_an_older_state_never_moves_the_table_back(tmp_path):
    from storage.lake.table import publish
    store = Store(str(tmp_path / "store"))
    store.ingest("t", [write_updates(str(tmp_path / "a.csv"), [((0, "a"), (0,), 1)], 1)])
    old: Trace = store.trace("t")
    old_version = store.state().version
    store.ingest("t", [write_updates(str(tmp_path / "b.csv"), [((0, "a"), (1,), 5)], 1)])
    uri = store.trace_dir("t")
    files = delta_files(uri)
    assert publish(uri, "t", old, old_version, options=None, retention_seconds=3600).note == "current"
    assert delta_files(uri) == files and delta_rs_at(uri, (1,)) == {(0, "a"): 6}
    assert format_frontier(old.upper) == "1"


def test_appended_commits_are_checkpointed_and_read_the_same(tmp_path, monkeypatch):
    from storage.lake import table
    monkeypatch.setattr(table, "CHECKPOINT_EVERY", 3)
    store = Store(str(tmp_path / "store"))
    raw = []
    for i in range(8):
        rows = [((i % 3, "a"), (i,), 1), ((7, "b"), (i,), -1 if i % 2 else 2)]
        store.ingest("t", [write_updates(str(tmp_path / f"u{i}.csv"), rows, 1)])
        raw += rows
    uri = store.trace_dir("t")
    log = os.listdir(os.path.join(uri, "_delta_log"))
    assert any(n.endswith(".checkpoint.parquet") for n in log), sorted(log)
    assert any(json_commit["commitInfo"]["engineInfo"].startswith("ddcli")
               for json_commit in _first_lines(uri)), "the commits after the first were appended by ddcli"
    assert_delta_follows(store, "t", raw, [(t,) for t in range(9)])


def _first_lines(uri):
    import json
    folder = os.path.join(uri, "_delta_log")
    for n in sorted(os.listdir(folder)):
        if n.endswith(".json") and not n.startswith("_"):
            with open(os.path.join(folder, n)) as fh:
                yield json.loads(fh.readline())
