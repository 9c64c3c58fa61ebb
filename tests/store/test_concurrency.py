"""Writers racing on the one commit path.

Races are forced, not hoped for: a hook in place of ``storage.faults.point`` holds writers
at a barrier just before they commit (or just before the put-if-absent link), or runs a
second writer right there. Every test checks against the fold that nothing committed was
lost, nothing of a losing writer is visible and no file of it stays behind.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from storage import faults
from storage.errors import Conflict
from storage.lattice import Frontier
from storage.log.commit import Log
from storage.state.transitions import with_hold
from storage.store import Store
from tests.helpers.store_refs import check_equivalence, check_layers, files_on_disk, py, run_writer, write_updates

OLD = [((k, "a"), (0,), 1) for k in range(6)]


def make_store(tmp_path, rows=OLD, location=None):
    store = Store(location or str(tmp_path / "store"))
    store.ingest("t", [write_updates(str(tmp_path / "old.csv"), rows, 1)])
    return store


def referenced_by_any_version(store) -> set[str]:
    """Every file that some committed version names (nothing is pruned in these tests)."""
    out = set()
    for state in store.log.states().values():
        for name, t in state["traces"].items():
            for l in t["layers"] + t["pending"]:
                out.update(store.blobs.join(store.trace_dir(name), f["name"]) for f in l["files"])
    return out


def assert_no_orphans(store):
    assert files_on_disk(store) <= referenced_by_any_version(store), "a losing writer left files behind"


def barrier_hook(monkeypatch, point_name, parties=2):
    """Hold each thread at ``point_name`` (its first time there) until all have arrived."""
    barrier = threading.Barrier(parties, timeout=20)
    seen = threading.local()

    def point(name):
        if name == point_name and not getattr(seen, "done", False):
            seen.done = True
            barrier.wait()
    monkeypatch.setattr(faults, "point", point)


def run_threads(*fns):
    results = [None] * len(fns)

    def run(i, fn):
        try:
            results[i] = ("ok", fn())
        except Exception as e:  # noqa: BLE001 - recorded and asserted on
            results[i] = ("error", e)
    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


# ------------------------------------------------------------------ the log itself


def test_put_if_absent_never_overwrites_a_version(store_location):
    log = Log(store_location)
    v, state = log.commit(lambda s: {"traces": {}, "n": 1})
    assert v == 1
    assert not log._put_if_absent(1, {"traces": {}, "n": 2})
    v, state = log.latest()
    assert (v, state["n"], state["version"]) == (1, 1, 1)
    assert log.stray_tmp_files() == []


def test_a_commit_that_loses_the_race_reapplies_its_change_to_the_newer_state(store_location):
    log = Log(store_location)
    log.commit(lambda s: {"traces": {}, "items": []})
    calls = []

    def change(s):
        calls.append(s["version"])
        if len(calls) == 1:  # another writer commits in between
            log.commit(lambda s2: {**s2, "items": s2["items"] + ["theirs"]})
        return {**s, "items": s["items"] + ["mine"]}

    v, state = log.commit(change)
    assert calls == [1, 2] and v == 3
    assert state["items"] == ["theirs", "mine"] and log.latest()[1]["items"] == ["theirs", "mine"]


# ------------------------------------------------------------------ two ingests into one trace


def ordered_race_hook(monkeypatch, where, winner_done):
    """Threads named A and B both stop at ``where`` (after reading the state and writing their
    layer); then B goes on and A waits until B has reached ``winner_done``. B wins, A races
    against a state that changed under it."""
    barrier = threading.Barrier(2, timeout=20)
    b_done = threading.Event()
    seen = threading.local()

    def point(name):
        me = threading.current_thread().name
        if name == where and not getattr(seen, "done", False):
            seen.done = True
            barrier.wait()
            if me == "A":
                assert b_done.wait(20)
        if name == winner_done and me == "B":
            b_done.set()
    monkeypatch.setattr(faults, "point", point)


def run_named(**fns):
    out = {}

    def run(name, fn):
        try:
            out[name] = ("ok", fn())
        except Exception as e:  # noqa: BLE001 - recorded and asserted on
            out[name] = ("error", e)
    threads = [threading.Thread(target=run, args=(n, fn), name=n) for n, fn in fns.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.mark.parametrize("where, winner_done", [("ingest.before_commit", "ingest.after_commit"),
                                                ("log.before_link", "log.after_link")])
def test_two_concurrent_ingests_into_one_trace_one_wins_the_other_fails_cleanly(tmp_path, monkeypatch, where,
                                                                                winner_done, store_location):
    store = make_store(tmp_path, location=store_location)
    a_rows = [((1, "x"), (5,), 1), ((2, "x"), (6,), -1)]
    b_rows = [((3, "y"), (1,), 2), ((1, "a"), (2,), -1)]
    fa = write_updates(str(tmp_path / "a.csv"), a_rows, 1)
    fb = write_updates(str(tmp_path / "b.parquet"), b_rows, 1)
    ordered_race_hook(monkeypatch, where, winner_done)

    out = run_named(A=lambda: Store(store.path).ingest("t", [fa]), B=lambda: Store(store.path).ingest("t", [fb]))

    assert out["B"][0] == "ok", out
    kind, err = out["A"]
    assert kind == "error" and isinstance(err, Conflict), out
    assert "trace 't' changed while ingesting" in str(err) and "nothing was ingested, retry" in str(err)
    check_equivalence(store, "t", OLD + b_rows, 8)
    assert_no_orphans(store)

    monkeypatch.setattr(faults, "point", lambda name: None)
    res = store.ingest("t", [fa])
    assert res.rows == len(a_rows) and not res.skipped
    check_equivalence(store, "t", OLD + b_rows + a_rows, 8)
    check_layers(store, "t")


@pytest.mark.parametrize("where", ["ingest.before_commit", "log.before_link"])
def test_two_racing_pending_ingests_into_one_trace_one_wins_and_a_retry_succeeds(tmp_path, monkeypatch, where):
    # d = 2 without --upper: a free race (whoever commits first wins)
    first = [((0, "a"), (0, 0), 1)]
    store = Store(str(tmp_path / "store"))
    store.ingest("t", [write_updates(str(tmp_path / "first.csv"), first, 2)])
    rows = {"A": [((1, "x"), (1, 0), 1)], "B": [((2, "y"), (0, 1), 2), ((0, "a"), (1, 1), -1)]}
    paths = {n: write_updates(str(tmp_path / f"{n}.csv"), r, 2) for n, r in rows.items()}
    barrier_hook(monkeypatch, where)
    out = run_named(**{n: (lambda n=n: Store(store.path).ingest("t", [paths[n]])) for n in rows})
    assert sorted(k for k, _ in out.values()) == ["error", "ok"], out
    winner = next(n for n, (k, _) in out.items() if k == "ok")
    loser = "B" if winner == "A" else "A"
    assert isinstance(out[loser][1], Conflict) and "retry" in str(out[loser][1])
    check_equivalence(store, "t", first + rows[winner], 3)
    assert_no_orphans(store)
    monkeypatch.setattr(faults, "point", lambda name: None)
    store.ingest("t", [paths[loser]])
    check_equivalence(store, "t", first + rows["A"] + rows["B"], 3)
    store.advance("t", upper="(2,2)")
    check_equivalence(store, "t", first + rows["A"] + rows["B"], 3)
    check_layers(store, "t")


def test_two_concurrent_first_ingests_create_the_trace_once(tmp_path, monkeypatch):
    fa = write_updates(str(tmp_path / "a.csv"), [((1, "x"), (0,), 1)], 1)
    fb = write_updates(str(tmp_path / "b.csv"), [((2, "y"), (0,), 1)], 1)
    path = str(tmp_path / "store")
    barrier_hook(monkeypatch, "log.before_link")
    results = run_threads(lambda: Store(path).ingest("t", [fa]), lambda: Store(path).ingest("t", [fb]))
    assert sorted(r[0] for r in results) == ["error", "ok"], results
    err = next(r[1] for r in results if r[0] == "error")
    assert isinstance(err, Conflict) and "created by another command at the same time" in str(err)
    assert_no_orphans(Store(path))


def test_two_concurrent_ingests_of_the_same_pending_file_count_it_once(tmp_path, monkeypatch):
    # d = 2 without --upper: neither moves the upper, yet the second must not add the file again
    store = Store(str(tmp_path / "store"))
    store.ingest("t", [write_updates(str(tmp_path / "first.csv"), [((0, "a"), (0, 0), 1)], 2)])
    f = write_updates(str(tmp_path / "p.csv"), [((1, "x"), (1, 1), 1)], 2)
    barrier_hook(monkeypatch, "log.before_link")
    results = run_threads(lambda: Store(store.path).ingest("t", [f]), lambda: Store(store.path).ingest("t", [f]))
    assert sorted(r[0] for r in results) == ["error", "ok"], results
    assert isinstance(next(r[1] for r in results if r[0] == "error"), Conflict)
    check_equivalence(store, "t", [((0, "a"), (0, 0), 1), ((1, "x"), (1, 1), 1)], 3)
    assert_no_orphans(store)
    assert store.ingest("t", [f]).rows == 0, "a retry finds the file ingested"


def test_concurrent_ingests_into_different_traces_both_succeed(tmp_path, monkeypatch):
    store = make_store(tmp_path)
    ra, rb = [((1, "x"), (1,), 1)], [((2, "y"), (5,), 3)]
    fa = write_updates(str(tmp_path / "a.csv"), ra, 1)
    fb = write_updates(str(tmp_path / "b.csv"), rb, 1)
    barrier_hook(monkeypatch, "log.before_link")
    results = run_threads(lambda: Store(store.path).ingest("t", [fa]), lambda: Store(store.path).ingest("u", [fb]))
    assert [r[0] for r in results] == ["ok", "ok"], results
    check_equivalence(store, "t", OLD + ra, 6)
    check_equivalence(store, "u", rb, 6)
    assert_no_orphans(store)


def test_many_processes_ingesting_into_one_trace_lose_cleanly_and_retry(tmp_path, store_location):
    first = [((0, "a"), (0, 0), 1)]
    store = Store(store_location)
    store.ingest("t", [write_updates(str(tmp_path / "first.csv"), first, 2)])
    n = 4
    rows = [[((10 + i, "p"), (i, 3 - i), 1)] for i in range(n)]
    files = [write_updates(str(tmp_path / f"p{i}.csv"), rows[i], 2) for i in range(n)]
    start = time.time() + 0.6
    code = """
import time
from storage.store import Store
from storage.log.commit import Conflict
time.sleep(max(0, {start} - time.time()))
try:
    Store({path}).ingest('t', [{f}])
    print('ok')
except Conflict as e:
    print('conflict', e)
"""
    results = run_threads(*[lambda f=f: run_writer(code.format(start=start, path=py(store.path), f=py(f)))
                            for f in files])
    outs = [r[1].stdout.strip() for r in results]
    assert all(o == "ok" or o.startswith("conflict trace 't'") for o in outs), (outs, [r[1].stderr for r in results])
    won = [i for i, o in enumerate(outs) if o == "ok"]
    assert won
    check_equivalence(store, "t", first + [u for i in won for u in rows[i]], 4)
    assert_no_orphans(store)
    for i, o in enumerate(outs):
        if o != "ok":
            assert store.ingest("t", [files[i]]).rows == 1
    check_equivalence(store, "t", first + [u for r in rows for u in r], 4)


# ------------------------------------------------------------------ compaction racing other writers


def layered_store(tmp_path):
    store = Store(str(tmp_path / "store"))
    raw = []
    for i, n in enumerate([40, 12, 4, 1]):
        rows = [((k, "v"), (i,), 1) for k in range(n)]
        store.ingest("t", [write_updates(str(tmp_path / f"l{i}.csv"), rows, 1)])
        raw += rows
    assert len(store.trace("t").layers) == 4
    return store, raw


def run_at(monkeypatch, point_name, action):
    """Run ``action`` once, in the middle of the writer, when it reaches ``point_name``."""
    state = {"done": False}

    def point(name):
        if name == point_name and not state["done"]:
            state["done"] = True
            action()
    monkeypatch.setattr(faults, "point", point)
    return state


def test_compaction_racing_an_ingest_both_land(tmp_path, monkeypatch):
    store, raw = layered_store(tmp_path)
    new = [((99, "n"), (4,), 5), ((0, "v"), (4,), -1)]
    f = write_updates(str(tmp_path / "n.csv"), new, 1)
    # the ingest commits while the full compaction is about to; its own merge is held off
    monkeypatch.setattr(Store, "merge_after_commit", lambda self, *names, **how: None)
    hit = run_at(monkeypatch, "compact.before_commit", lambda: Store(store.path).ingest("t", [f]))
    assert store.merge_layers("t", full=True) == 1
    assert hit["done"]
    trace = store.trace("t")
    assert [l.rows for l in trace.layers] == [57, 2], "the merged layer, then the ingest's"
    check_equivalence(store, "t", raw + new, 6)
    check_layers(store, "t")
    assert_no_orphans(store)


def test_compaction_racing_another_compaction_backs_off_and_loses_nothing(tmp_path, monkeypatch):
    store, raw = layered_store(tmp_path)
    run_at(monkeypatch, "compact.before_commit", lambda: Store(store.path).merge_layers("t", full=True))
    with pytest.raises(Conflict, match="changed while compacting; the merge backs off"):
        store.merge_layers("t", full=True)
    assert len(store.trace("t").layers) == 1
    check_equivalence(store, "t", raw, 6)
    assert_no_orphans(store)


def test_compact_command_replans_after_losing_a_race(tmp_path, monkeypatch):
    store, raw = layered_store(tmp_path)
    new = [((7, "n"), (4,), 1)]
    f = write_updates(str(tmp_path / "n.csv"), new, 1)

    def both():
        Store(store.path).merge_layers("t", full=True)  # replaces what the outer compaction read
        Store(store.path).ingest("t", [f])
    run_at(monkeypatch, "compact.before_commit", both)
    out = store.compact("t", full=True, grace_seconds=3600)
    assert out["conflicts"] == 0
    assert len(store.trace("t").layers) == 1
    check_equivalence(store, "t", raw + new, 6)
    assert_no_orphans(store)


def test_compaction_backs_off_when_a_hold_appears_meanwhile(tmp_path, monkeypatch):
    store, raw = layered_store(tmp_path)
    store.advance("t", since="3")
    hold = Frontier([(1,)])

    def add_hold():
        def change(s):
            s.traces["t"] = with_hold(s.traces["t"], "reader", hold, 2)
            return s
        Store(store.path).commit(change)
    run_at(monkeypatch, "compact.before_commit", add_hold)
    with pytest.raises(Conflict, match="hold"):
        store.merge_layers("t", full=True)
    trace = store.trace("t")
    assert len(trace.layers) == 4 and "reader" in trace.holds
    check_equivalence(store, "t", raw, 6, frontier=hold)
    assert_no_orphans(store)
    # planned again, the merge respects the hold
    monkeypatch.setattr(faults, "point", lambda name: None)
    store.merge_layers("t", full=True)
    trace = store.trace("t")
    assert all(hold.dominates(l.since) for l in trace.layers)
    assert [(l.seq_lo, l.seq_hi) for l in trace.layers] == [(0, 2), (2, 4)]
    check_equivalence(store, "t", raw, 6, frontier=hold)


def test_racing_writers_while_checkpoints_are_written_and_the_log_is_pruned(tmp_path):
    """Writers race for versions while checkpoint commits prune with no retention and
    another thread prunes all it can: every commit lands exactly once, in order per writer."""
    import time as _t
    root = str(tmp_path)
    Log(root).commit(lambda s: {"traces": {}, "items": []})
    stop = threading.Event()

    def writer(w):
        log = Log(root, retention_seconds=0)
        for i in range(40):
            log.commit(lambda s, i=i: {**s, "items": s["items"] + [f"{w}-{i}"]})

    def pruner():
        log = Log(root, retention_seconds=0)
        while not stop.is_set():
            log.prune(_t.time() + 10, listing=True)

    p = threading.Thread(target=pruner)
    p.start()
    try:
        results = run_threads(*(lambda w=w: writer(w) for w in range(3)))
    finally:
        stop.set()
        p.join(30)
    assert all(r[0] == "ok" for r in results), results
    items = Log(root).latest()[1]["items"]
    assert sorted(items) == sorted(f"{w}-{i}" for w in range(3) for i in range(40))
    for w in range(3):
        mine = [x for x in items if x.startswith(f"{w}-")]
        assert mine == [f"{w}-{i}" for i in range(40)]
