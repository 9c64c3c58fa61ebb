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
