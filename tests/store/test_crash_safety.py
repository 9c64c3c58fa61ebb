"""A writer killed at every step of ingest, advance and compaction.

Each case runs the writer in a fresh interpreter with ``DDCLI_FAULT`` set, so it dies with
``os._exit(137)`` at that point, leaving exactly what SIGKILL would. Then the store must be
readable and hold the previous state or the new one (never a mix, nothing lost); retrying
the same command must succeed (or be a no-op when the crash came after the commit); and
``compact(grace_seconds=0)`` must leave only files the newest version references.
"""

from __future__ import annotations

import shutil

import pytest

from storage.lattice import Frontier, parse_frontier
from storage.store import Store
from tests.helpers.s3 import place_store
from tests.helpers.store_refs import (Updates, box, check_equivalence, check_layers, files_on_disk, fold,
                             moment_between, py, referenced_files, run_writer, set_store_clock, write_updates)

# ------------------------------------------------------------------ helpers


def assert_readable(store):
    """The newest version parses and every file it names is there and well formed."""
    state = store.state()
    for name, trace in state.traces.items():
        for p in store.layer_paths(trace):
            assert store.blobs.exists(p), f"committed version names missing file {p}"
        check_layers(store, name)
    return state


def assert_collections(store, name, raw, hi):
    """The collection at every time of the box beyond since equals the fold of ``raw``."""
    trace = store.trace(name)
    got = Updates(store.read_updates(trace), trace.d)
    for t in box(trace.d, 0, hi):
        if trace.since.beyond(t) and got.at(t) != fold(raw, t):
            return False
    return True


def crash(code, fault):
    res = run_writer(code, fault=fault)
    assert res.returncode == 137, f"the writer did not reach fault point {fault}: rc={res.returncode}\n{res.stderr}"


def assert_clean_after_gc(store):
    store.compact(grace_seconds=0)
    assert files_on_disk(store) == referenced_files(store), "orphans left after compact(grace_seconds=0)"


# ------------------------------------------------------------------ ingest (d = 1), with the merge it triggers

OLD = [[((k, "a"), (0,), 1) for k in range(8)],
       [((k, "b"), (1,), 1) for k in range(3)]]
NEW = [((0, "a"), (2,), -1), ((5, "c"), (2,), 2), ((1, "b"), (3,), 1)]


@pytest.fixture(scope="module")
def ingest_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("ingest")
    store = Store(str(root / "store"))
    for i, rows in enumerate(OLD):
        store.ingest("t", [write_updates(str(root / f"old{i}.csv"), rows, 1)])
    assert [l.rows for l in store.trace("t").layers] == [8, 3]
    write_updates(str(root / "new.parquet"), NEW, 1)
    return root


# (fault point, whether the ingest is committed when the writer dies there)
INGEST_FAULTS = [
    ("layer.before_fsync", False),
    ("layer.before_rename", False),
    ("layer.after_rename", False),
    ("ingest.before_commit", False),
    ("log.before_link", False),
    ("log.after_link", True),
    ("ingest.after_commit", True),
    # the geometric merge that follows the ingest (layers of 8, 3 and 3 rows become one)
    ("layer.before_rename@2", True),
    ("compact.before_commit", True),
    ("log.before_link@2", True),
    ("log.after_link@2", True),
    ("compact.after_commit", True),
]


@pytest.mark.parametrize("fault, committed", INGEST_FAULTS)
def test_ingest_killed_at_each_step_leaves_the_old_or_the_new_state(ingest_template, tmp_path, fault, committed,
                                                                     store_location):
    root = tmp_path / "copy"
    shutil.copytree(ingest_template, root)
    path, new_file = place_store(str(root / "store"), store_location), str(root / "new.parquet")
    store = Store(path)
    before = store.state()
    old_raw = [u for rows in OLD for u in rows]
    new_raw = old_raw + NEW

    crash(f"from storage.store import Store; Store({py(path)}).ingest('t', [{py(new_file)}])", fault)

    state = assert_readable(store)
    trace = state.traces["t"]
    is_old = assert_collections(store, "t", old_raw, 5)
    is_new = assert_collections(store, "t", new_raw, 5)
    assert is_old != is_new, "the store holds neither the previous nor the new collection"
    assert is_new == committed
    if committed:
        assert trace.upper == Frontier([(4,)])
    else:
        assert state.version == before.version and state.to_json() == before.to_json()

    res = store.ingest("t", [new_file])
    assert (res.skipped == [new_file]) == committed and (res.rows == 0) == committed
    check_equivalence(store, "t", new_raw, 5)
    assert_clean_after_gc(store)
    check_equivalence(store, "t", new_raw, 5)
    check_layers(store, "t")


@pytest.fixture(scope="module")
def checkpoint_template(ingest_template, tmp_path_factory):
    """The ingest template with the log padded so that the ingest's own commit writes a
    checkpoint (the test moves the store's clock so that the old versions were superseded
    long ago, and the commit also prunes)."""
    from storage.log.commit import CHECKPOINT_EVERY
    root = tmp_path_factory.mktemp("checkpoint")
    shutil.copytree(ingest_template, root, dirs_exist_ok=True)
    store = Store(str(root / "store"))
    while True:
        chain = store.log._read_chain()
        if chain.last_full > 1 and chain.version + 1 - chain.last_full == CHECKPOINT_EVERY:
            break
        store.commit(lambda s: s)
    return root


# the ingest's commit is a checkpoint: it is committed once linked, whatever follows
CHECKPOINT_FAULTS = ["log.before_hint", "log.before_prune", "log.mid_prune"]


@pytest.mark.parametrize("fault", CHECKPOINT_FAULTS)
def test_ingest_killed_while_writing_a_checkpoint_or_pruning_the_log(checkpoint_template, tmp_path, fault,
                                                                    store_location, monkeypatch):
    root = tmp_path / "copy"
    shutil.copytree(checkpoint_template, root)
    path, new_file = place_store(str(root / "store"), store_location), str(root / "new.parquet")
    store = Store(path)
    before = store.state().version
    assert store.blobs.exists(store.log.path(1))
    set_store_clock(monkeypatch, moment_between() + store.log.retention)  # the versions so far: long superseded
    new_raw = [u for rows in OLD for u in rows] + NEW

    crash(f"from storage.store import Store; Store({py(path)}).ingest('t', [{py(new_file)}])", fault)

    state = assert_readable(Store(path))
    assert state.version == before + 1 and assert_collections(store, "t", new_raw, 5)
    if fault == "log.mid_prune":
        assert not store.blobs.exists(store.log.path(1)), "the first deletion happened"
    kept = store.log.states()  # every version left in the log still rebuilds
    assert max(kept) == state.version and sorted(kept) == list(range(min(kept), state.version + 1))
    res = store.ingest("t", [new_file])
    assert res.skipped == [new_file] and res.rows == 0
    store.commit(lambda s: s)  # and the log takes commits again
    check_equivalence(store, "t", new_raw, 5)
    assert_clean_after_gc(store)
    check_equivalence(store, "t", new_raw, 5)


def test_a_first_ingest_killed_before_its_commit_leaves_no_trace(tmp_path, store_location):
    path = store_location
    f = write_updates(str(tmp_path / "a.csv"), NEW, 1)
    crash(f"from storage.store import Store; Store({py(path)}).ingest('t', [{py(f)}])", "log.before_link")
    store = Store(path)
    assert store.state().traces == {}
    store.ingest("t", [f])
    check_equivalence(store, "t", NEW, 5)
    assert_clean_after_gc(store)


# ------------------------------------------------------------------ compaction

SIZES = [40, 12, 4, 1]  # each layer more than twice the next: no geometric merge on its own


def compaction_raw():
    raw = []
    for i, n in enumerate(SIZES):
        raw += [((k, "abcd"[i]), (i,), 1 + (k % 2)) for k in range(n)]
    raw += [((0, "a"), (2,), -1)]  # a retraction that cancels only once times are advanced
    return raw


@pytest.fixture(scope="module")
def compact_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("compact")
    store = Store(str(root / "store"))
    raw = compaction_raw()
    for i in range(len(SIZES)):
        store.ingest("t", [write_updates(str(root / f"u{i}.csv"), [u for u in raw if u[1] == (i,)], 1)])
    store.advance("t", since="3")
    assert len(store.trace("t").layers) == 4
    return root


COMPACT_FAULTS = [
    ("layer.before_fsync", False),
    ("layer.before_rename", False),
    ("layer.after_rename", False),
    ("compact.before_commit", False),
    ("log.before_link", False),
    ("log.after_link", True),
    ("compact.after_commit", True),
]


@pytest.mark.parametrize("fault, committed", COMPACT_FAULTS)
def test_compaction_killed_at_each_step_leaves_the_old_or_the_new_layers(compact_template, tmp_path, fault, committed,
                                                                        store_location):
    root = tmp_path / "copy"
    shutil.copytree(compact_template, root)
    path = place_store(str(root / "store"), store_location)
    store = Store(path)
    before = store.trace("t")
    raw = compaction_raw()

    crash(f"from storage.store import Store; Store({py(path)}).compact('t', full=True)", fault)

    assert_readable(store)
    trace = store.trace("t")
    old_ids = [l.id for l in before.layers]
    if committed:
        assert len(trace.layers) == 1 and trace.layers[0].id not in old_ids
        assert trace.layers[0].since == Frontier([(3,)])
    else:
        assert [l.id for l in trace.layers] == old_ids, "a mix of old and new layers"
    check_equivalence(store, "t", raw, 6)

    store.compact("t", full=True, grace_seconds=0)
    assert len(store.trace("t").layers) == 1
    assert files_on_disk(store) == referenced_files(store)
    check_equivalence(store, "t", raw, 6)


# ------------------------------------------------------------------ advance: sealing pending updates (d = 2)

PENDING = [((1, "a"), (0, 1), 1), ((2, "a"), (1, 0), 2), ((1, "a"), (2, 2), -1), ((3, "b"), (0, 3), 1)]
SEAL = "(2,0) (0,2)"


@pytest.fixture(scope="module")
def advance_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("advance")
    store = Store(str(root / "store"))
    store.ingest("t", [write_updates(str(root / "p.parquet"), PENDING, 2)])
    trace = store.trace("t")
    assert len(trace.pending) == 1 and not trace.layers
    return root


ADVANCE_FAULTS = [
    ("layer.before_rename", False),      # the sealed layer
    ("layer.before_rename@2", False),    # the pending updates that stay beyond the new upper
    ("advance.before_commit", False),
    ("log.before_link", False),
    ("log.after_link", True),
    ("advance.after_commit", True),
]


@pytest.mark.parametrize("fault, committed", ADVANCE_FAULTS)
def test_advance_killed_at_each_step_seals_all_or_nothing(advance_template, tmp_path, fault, committed,
                                                          store_location):
    root = tmp_path / "copy"
    shutil.copytree(advance_template, root)
    path = place_store(str(root / "store"), store_location)
    store = Store(path)

    crash(f"from storage.store import Store; Store({py(path)}).advance('t', upper={py(SEAL)})", fault)

    assert_readable(store)
    trace = store.trace("t")
    check_equivalence(store, "t", PENDING, 4)
    sealed = [u for u in PENDING if not parse_frontier(SEAL).beyond(u[1])]
    if committed:
        assert trace.upper == parse_frontier(SEAL)
        assert sum(l.rows for l in trace.layers) == len(sealed)
        assert sum(l.rows for l in trace.pending) == len(PENDING) - len(sealed)
    else:
        assert trace.upper == Frontier([(0, 0)]) and not trace.layers and len(trace.pending) == 1

    store.advance("t", upper=SEAL)
    trace = store.trace("t")
    assert trace.upper == parse_frontier(SEAL)
    for t in box(2, 0, 4):
        if not trace.upper.beyond(t):
            assert Updates(store.read_updates(trace, trace.layers), 2).at(t) == fold(sealed, t)
    assert_clean_after_gc(store)
    check_equivalence(store, "t", PENDING, 4)
