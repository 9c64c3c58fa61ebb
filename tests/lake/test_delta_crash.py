"""A writer killed between ddcli's commit and the Delta versions that follow it.

The writer runs in a fresh interpreter with ``DDCLI_FAULT`` set (storage/faults.py), so it
dies with ``os._exit(137)`` right there, as SIGKILL would leave it. ddcli's log then holds
the change and the Delta tables lag behind it (never ahead); the next command that
changes the store, or ``ddcli compact``, brings every table up to date.
"""

from __future__ import annotations

import pytest

from storage.store import Store
from tests.helpers.delta_reader import delta_files, delta_rs_at, polars_at
from tests.helpers.store_refs import fold, py, run_writer, write_updates

A = [((k, "a"), (0,), 1) for k in range(4)]
B = [((0, "a"), (1,), -1), ((9, "b"), (1,), 2)]


def sealed_files(store, name) -> set[str]:
    return {f.name for l in store.trace(name).layers for f in l.files}


def crash(code: str, fault: str) -> None:
    res = run_writer(code, fault=fault)
    assert res.returncode == 137, f"the writer did not reach {fault}: rc={res.returncode}\n{res.stderr[-2000:]}"


@pytest.mark.parametrize("next_command", ["ingest", "compact"])
@pytest.mark.parametrize("fault", ["delta.before_commit", "delta.after_commit"])
def test_a_crash_after_the_ddcli_commit_is_caught_up_by_the_next_command(tmp_path, store_location, fault,
                                                                           next_command):
    store = Store(store_location)
    store.ingest("t", [write_updates(str(tmp_path / "a.csv"), A, 1)])
    old_files = delta_files(store.trace_dir("t"))
    b = write_updates(str(tmp_path / "b.csv"), B, 1)
    crash(f"from storage.store import Store\nStore({py(store.path)}).ingest('t', [{py(b)}])", fault)
    store = Store(store.path)
    uri = store.trace_dir("t")
    assert store.trace("t").upper.elements == ((2,),), "ddcli's commit stands"
    if fault == "delta.before_commit":
        assert delta_files(uri) == old_files, "the Delta log lags behind ddcli's, never ahead"
        assert delta_rs_at(uri, (1,)) == fold(A, (1,))
    raw = A + B
    if next_command == "ingest":
        c = [((5, "c"), (2,), 1)]
        store.ingest("t", [write_updates(str(tmp_path / "c.csv"), c, 1)])
        raw += c
    else:
        store.compact()
    assert delta_files(uri) == sealed_files(store, "t")
    for t in range(4):
        assert delta_rs_at(uri, (t,)) == polars_at(uri, (t,)) == fold(raw, (t,))


def test_a_crash_between_the_tables_of_one_commit_is_caught_up(tmp_path):
    """One ddcli commit changes two traces; the writer dies after the first one's Delta
    version: the second table lags until the next command, which also changes neither."""
    store = Store(str(tmp_path / "store"))
    store.ingest("a", [write_updates(str(tmp_path / "a.csv"), A, 1)])
    store.ingest("b", [write_updates(str(tmp_path / "b.csv"), A, 1)])
    drop_both = (f"from storage.store import Store\n"
                 f"Store({py(store.path)}).write_and_commit('drop', lambda w: None, "
                 f"lambda s, _: s.with_traces({{'a': None, 'b': None}}))")
    crash(drop_both, "delta.before_commit@2")
    assert delta_files(store.trace_dir("a")) == set(), "the first table followed the commit"
    assert delta_files(store.trace_dir("b")), "the second did not"
    store = Store(store.path)
    store.ingest("c", [write_updates(str(tmp_path / "c.csv"), B, 1)])
    assert delta_files(store.trace_dir("b")) == set()
    assert delta_rs_at(store.trace_dir("c"), (1,)) == fold(B, (1,))


@pytest.mark.parametrize("damage", ["older_version", "newer_txn", "lost", "garbled"])
def test_a_stale_lost_or_damaged_record_costs_a_check_never_a_wrong_commit(tmp_path, damage):
    import json
    store = Store(str(tmp_path / "store"))
    raw = []
    for i in range(3):
        rows = [((i, "a"), (i,), 1), ((0, "a"), (i,), i + 1)]
        store.ingest("t", [write_updates(str(tmp_path / f"u{i}.csv"), rows, 1)])
        raw += rows
    path = store.blobs.join(store.path, "_delta_synced.json")
    record = json.loads(store.blobs.get(path))
    assert record["version"] == store.state().version and record["tables"]["t"][1] == record["version"]
    if damage == "older_version":  # the appended commit finds its Delta version taken
        record["tables"]["t"][0] -= 1
    elif damage == "newer_txn":  # the table would show a newer ddcli state than the command's: never appended to
        record["tables"]["t"][1] = record["version"] + 5
    store.blobs.replace(path, {"lost": b"", "garbled": b"{\x00"}.get(damage, json.dumps(record).encode()))
    if damage == "lost":
        store.blobs.delete(path)
    rows = [((7, "z"), (3,), 2)]
    store.ingest("t", [write_updates(str(tmp_path / "last.csv"), rows, 1)])
    raw += rows
    uri = store.trace_dir("t")
    assert delta_files(uri) == sealed_files(store, "t")
    for t in range(5):
        assert delta_rs_at(uri, (t,)) == polars_at(uri, (t,)) == fold(raw, (t,))
    assert not store.warnings


def test_writers_racing_on_one_store_leave_every_table_showing_its_trace(tmp_path):
    """Two writers commit in turns (each one's commits interleaved with the other's): the
    record is overtaken and rewritten out of order, every table still shows its trace."""
    import threading
    root = str(tmp_path / "store")
    Store(root).ingest("a", [write_updates(str(tmp_path / "seed.csv"), A, 1)])
    raws = {"a": list(A), "b": []}
    errors = []

    def writer(name):
        try:
            store = Store(root)
            for i in range(6):
                rows = [((i, name), (i + 1,), 1)]
                store.ingest(name, [write_updates(str(tmp_path / f"{name}{i}.csv"), rows, 1)])
                raws[name] += rows
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    store = Store(root)
    for name in ("a", "b"):
        uri = store.trace_dir(name)
        assert delta_files(uri) == sealed_files(store, name)
        for t in range(8):
            assert delta_rs_at(uri, (t,)) == fold(raws[name], (t,))
