"""The trace store against a plain fold of the raw updates.

Accumulation equivalence: for random update streams the collection at every time beyond
``since`` (every time of a box) equals the fold of the updates ingested so far, after every
ingest, ``advance`` and ``compact``. Plus geometric merging, holds, garbage collection and
the layer files themselves.
"""

from __future__ import annotations

import json
import math
import os
import random

import pyarrow.parquet as pq
import pytest

from storage import layer as layer_mod
from storage.errors import StoreError
from storage.lattice import Frontier, format_frontier, join, parse_frontier
from storage.log.commit import CHECKPOINT_EVERY
from storage.state.transitions import plan_merges, with_hold, without_hold
from storage.store import Store
from tests.helpers.store_refs import (Updates, box, check_equivalence, check_layers, collection_at, files_on_disk, fold,
                                      moment_between, referenced_files, set_store_clock, write_updates)

KEYS = [0, 1, 2, 3]
VALUES = ["a", "b"]


def random_rows(rng, times, n):
    return [((rng.choice(KEYS), rng.choice(VALUES)), rng.choice(times), rng.choice([-2, -1, 1, 1, 2, 3]))
            for _ in range(n)]


class Files:
    def __init__(self, root, rng):
        self.root, self.rng, self.n = root, rng, 0

    def write(self, rows, d):
        self.n += 1
        ext = self.rng.choice([".csv", ".parquet"])
        return write_updates(os.path.join(self.root, f"u{self.n}{ext}"), rows, d)


def assert_equivalent(store, name, raw, hi):
    checked = check_equivalence(store, name, raw, hi)
    check_layers(store, name)
    return checked


# ------------------------------------------------------------------ accumulation equivalence, d = 1


# every seed on a local folder, one on the object store (its requests are slow)
SEEDS = [("local", 0), ("local", 1), ("local", 2), ("s3", 0)]


@pytest.mark.parametrize("store_location, seed", SEEDS, indirect=["store_location"])
def test_d1_random_stream_equals_the_fold_through_advance_and_compact(tmp_path, store_location, seed):
    rng = random.Random(seed)
    store = Store(store_location)
    files = Files(str(tmp_path), rng)
    raw, written, upper, checked = [], [], 0, 0
    for step in range(22):
        op = rng.choices(["ingest", "ingest_upper", "reingest", "since", "compact", "full"],
                         [6, 2, 1, 2, 2, 1])[0] if step else "ingest"
        if op == "reingest" and written:
            path, before = rng.choice(written), store.state().version
            res = store.ingest("t", [path])
            assert res.skipped == [path] and res.rows == 0
            assert store.state().version == before, "re-ingesting a file changes nothing"
            continue
        if op in ("ingest", "ingest_upper", "reingest"):
            nfiles = rng.choice([1, 1, 2])
            batch = [random_rows(rng, [(upper + i,) for i in range(3)], rng.randint(1, 6)) for _ in range(nfiles)]
            paths = [files.write(rows, 1) for rows in batch]
            top = max(u[1][0] for rows in batch for u in rows)
            if op == "ingest_upper":
                new_upper = top + 1 + rng.randint(0, 2)
                store.ingest("t", paths, upper=str(new_upper))
            else:
                new_upper = top + 1
                store.ingest("t", paths)
            for rows in batch:
                raw += rows
            written += paths
            upper = new_upper
            assert store.trace("t").upper == Frontier([(upper,)])
        elif op == "since":
            cur = store.trace("t").since.elements[0][0]
            store.advance("t", since=str(rng.randint(cur, upper + 1)))
        elif op == "compact":
            store.compact("t")
        else:
            store.compact("t", full=True)
            assert len(store.trace("t").layers) == 1
        checked += assert_equivalent(store, "t", raw, upper + 2)
    assert checked > 100


# ------------------------------------------------------------------ accumulation equivalence, d = 2

B = 5  # times of the d = 2 streams live in [0, B)^2; the box checked is [0, B+1]^2


class Sealed:
    """A down-set S of [0, B)^2: the times not beyond the trace's upper."""

    def __init__(self):
        self.s: set = set()

    def upper(self) -> Frontier:
        return Frontier([p for p in box(2, 0, B) if p not in self.s], 2)

    def open_times(self):
        return [p for p in box(2, 0, B - 1) if p not in self.s]

    def grow(self, rng, k):
        """Seal up to k more times (each a minimal open time); returns the newly sealed ones."""
        new = []
        for _ in range(k):
            minimal = [p for p in self.open_times()
                       if all(q in self.s for q in ((p[0] - 1, p[1]), (p[0], p[1] - 1)) if min(q) >= 0)]
            if not minimal:
                break
            p = rng.choice(minimal)
            self.s.add(p)
            new.append(p)
        return new


def random_since(rng, cur: Frontier) -> Frontier:
    """A random frontier at or beyond ``cur``."""
    qs = [(rng.randint(0, B), rng.randint(0, B)) for _ in range(rng.randint(1, 3))]
    return Frontier([join(q, rng.choice(cur.elements)) for q in qs], 2)


@pytest.mark.parametrize("store_location, seed", SEEDS, indirect=["store_location"])
def test_d2_random_stream_with_upper_and_pending_equals_the_fold(tmp_path, store_location, seed):
    rng = random.Random(100 + seed)
    store = Store(store_location)
    files = Files(str(tmp_path), rng)
    sealed = Sealed()
    raw, written, checked = [], [], 0
    for step in range(24):
        op = rng.choices(["ingest_upper", "pending", "seal", "since", "compact", "full", "reingest"],
                         [4, 4, 2, 2, 2, 1, 1])[0] if step else rng.choice(["ingest_upper", "pending"])
        if op == "ingest_upper":
            new = sealed.grow(rng, rng.randint(1, 4))
            if not new:
                continue
            rows = random_rows(rng, new, rng.randint(1, 6))
            path = files.write(rows, 2)
            store.ingest("t", [path], upper=format_frontier(sealed.upper()))
            raw += rows
            written.append(path)
        elif op == "pending":
            open_times = sealed.open_times()
            if not open_times:
                continue
            rows = random_rows(rng, open_times, rng.randint(1, 6))
            path = files.write(rows, 2)
            store.ingest("t", [path])
            raw += rows
            written.append(path)
        elif op == "seal":
            sealed.grow(rng, rng.randint(1, 5))
            store.advance("t", upper=sealed.upper())
        elif op == "since":
            store.advance("t", since=random_since(rng, store.trace("t").since))
        elif op == "compact":
            store.compact("t")
        elif op == "full":
            store.compact("t", full=True)
        elif op == "reingest" and written:
            before = store.state().version
            assert store.ingest("t", [rng.choice(written)]).rows == 0
            assert store.state().version == before
        trace = store.trace("t")
        assert trace.upper == sealed.upper()
        # pending updates wait beyond the upper; sealed layers hold none of them
        for l in trace.pending:
            u = Updates(store.read_updates(trace, [l]), 2)
            assert all(trace.upper.beyond(t) for _, t, _ in u.raw)
        sealed_fold = [u for u in raw if not trace.upper.beyond(u[1])]
        for t in box(2, 0, B + 1):
            if trace.since.beyond(t) and not trace.upper.beyond(t):
                assert collection_at(store, trace, t, trace.layers) == fold(sealed_fold, t)
        checked += assert_equivalent(store, "t", raw, B + 1)
    assert checked > 100


# ------------------------------------------------------------------ merges by key range


@pytest.mark.parametrize("d, seed", [(1, 0), (1, 1), (2, 0)])
def test_merges_over_the_row_limit_go_by_key_range_and_equal_the_fold(tmp_path, monkeypatch, d, seed):
    """Layers of a few rows in row groups of two, merges of at most three rows at once: every
    merge of the random streams above goes one key range at a time into a layer of several
    files, and every collection still equals the fold (check_layers: the files follow each
    other by key)."""
    monkeypatch.setenv("DDCLI_MERGE_ROWS", "3")
    monkeypatch.setattr(layer_mod, "ROW_GROUP_ROWS", 2)
    files_per_merge = []
    merged = Store._merged

    def recorded(self, t, g):
        layer = merged(self, t, g)
        files_per_merge.append(len(layer.files))
        return layer

    monkeypatch.setattr(Store, "_merged", recorded)

    stream = test_d1_random_stream_equals_the_fold_through_advance_and_compact if d == 1 else \
        test_d2_random_stream_with_upper_and_pending_equals_the_fold
    stream(tmp_path, str(tmp_path / "store"), seed)
    assert max(files_per_merge) > 1, files_per_merge


# ------------------------------------------------------------------ geometric merging


def test_layers_stay_logarithmic_over_many_small_ingests(tmp_path):
    rng = random.Random(7)
    store = Store(str(tmp_path / "store"))
    raw = []
    n = 200
    for i in range(1, n + 1):
        rows = random_rows(rng, [(i,)], rng.randint(1, 3))
        store.ingest("t", [write_updates(str(tmp_path / f"u{i}.parquet"), rows, 1)])
        raw += rows
        layers = store.trace("t").layers
        assert len(layers) <= 2 * math.log2(i) + 2, f"{len(layers)} layers after {i} ingests"
        # the geometric invariant: each layer is more than twice the size of the next newer one
        sizes = [l.rows for l in layers]
        assert all(a > 2 * b for a, b in zip(sizes, sizes[1:])), sizes
    assert not plan_merges(store.trace("t"), full=False)
    check_equivalence(store, "t", raw, n + 1)
    check_layers(store, "t")
    seqs = [(l.seq_lo, l.seq_hi) for l in store.trace("t").layers]
    assert seqs[0][0] == 0 and seqs[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(seqs, seqs[1:])), "layers cover the seals in order"


# ------------------------------------------------------------------ holds


def add_hold(store, name, holder, since, seq):
    def change(s):
        s.traces[name] = with_hold(s.traces[name], holder, since, seq)
        return s
    store.commit(change)


def drop_hold(store, name, holder):
    def change(s):
        s.traces[name] = without_hold(s.traces[name], holder)
        return s
    store.commit(change)


def test_compaction_never_advances_past_a_hold_nor_merges_across_its_seq(tmp_path):
    rng = random.Random(3)
    store = Store(str(tmp_path / "store"))
    raw, old = [], []
    for i in range(12):
        rows = random_rows(rng, [(i,)], 3)
        store.ingest("t", [write_updates(str(tmp_path / f"u{i}.csv"), rows, 1)])
        raw += rows
        if i == 4:
            trace = store.trace("t")
            hold_seq = trace.next_seq
            assert hold_seq == 5 and trace.layers[-1].seq_hi == 5
            add_hold(store, "t", "reader", Frontier([(2,)]), hold_seq)
            old = list(raw)
    store.advance("t", since="10")
    for full in (False, True, True):
        store.compact("t", full=full)
        trace = store.trace("t")
        assert trace.effective_since() == Frontier([(2,)])
        for l in trace.layers:
            assert not (l.seq_lo < hold_seq < l.seq_hi), f"layer {l.seq_lo}..{l.seq_hi} spans the hold at {hold_seq}"
            assert Frontier([(2,)]).dominates(l.since), "compaction went past the hold"
        # exact at every time beyond the hold, not only beyond the since
        check_equivalence(store, "t", raw, 14, frontier=Frontier([(2,)]))
        check_layers(store, "t")
        # and the reader can still tell what it consumed from what came later
        consumed = [l for l in trace.layers if l.seq_hi <= hold_seq]
        for t in range(2, 15):
            assert collection_at(store, trace, (t,), consumed) == fold(old, (t,))
    assert len(store.trace("t").layers) == 2
    drop_hold(store, "t", "reader")
    store.compact("t", full=True)
    trace = store.trace("t")
    assert len(trace.layers) == 1 and trace.layers[0].since == Frontier([(10,)])
    check_equivalence(store, "t", raw, 14)
    # everything at or before the since collapsed onto it
    times = Updates(store.read_updates(trace), 1).times[:, 0]
    assert times.min() >= 10


@pytest.mark.parametrize("hold_at", ["before_gap", "after_gap"])
def test_a_hold_in_a_gap_of_seq_numbers_still_keeps_layers_apart(tmp_path, hold_at):
    # a seal that writes no layer (advance --upper with nothing pending) uses up a seq number
    store = Store(str(tmp_path / "store"))
    raw = []
    for i in range(3):
        rows = [((k, "a"), (i,), 1) for k in range(4)]
        store.ingest("t", [write_updates(str(tmp_path / f"a{i}.csv"), rows, 1)])
        raw += rows
    store.advance("t", upper="5")
    trace = store.trace("t")
    assert trace.next_seq == 4 and trace.layers[-1].seq_hi == 3
    seq = 3 if hold_at == "before_gap" else 4
    add_hold(store, "t", "reader", Frontier([(0,)]), seq)
    old = list(raw)
    for i in range(5, 8):
        rows = [((k, "b"), (i,), 1) for k in range(4)]
        store.ingest("t", [write_updates(str(tmp_path / f"b{i}.csv"), rows, 1)])
        raw += rows
    store.compact("t", full=True)
    trace = store.trace("t")
    assert [(l.seq_lo, l.seq_hi) for l in trace.layers] == [(0, 3), (4, 7)]
    consumed = [l for l in trace.layers if l.seq_hi <= seq]
    assert collection_at(store, trace, (9,), consumed) == fold(old, (9,))
    check_equivalence(store, "t", raw, 9)


def test_effective_since_is_the_meet_of_since_and_holds(tmp_path):
    store = Store(str(tmp_path / "store"))
    store.ingest("t", [write_updates(str(tmp_path / "a.csv"), [((1, "a"), (0, 0), 1)], 2)], upper="(5,0) (0,5)")
    store.advance("t", since="(3,3)")
    add_hold(store, "t", "p", parse_frontier("(1,4)"), 0)
    add_hold(store, "t", "q", parse_frontier("(4,1)"), 0)
    assert store.trace("t").effective_since() == parse_frontier("(1,4) (3,3) (4,1)")


# ------------------------------------------------------------------ garbage collection


def test_garbage_collection_removes_old_orphans_and_never_referenced_files(tmp_path, store_location, monkeypatch):
    store = Store(store_location)
    blobs = store.blobs
    for i in range(3):
        store.ingest("t", [write_updates(str(tmp_path / f"u{i}.csv"), [((i, "a"), (i,), 1)], 1)])
    tdir = store.trace_dir("t")
    old_orphan, new_orphan, tmp_orphan = (blobs.join(tdir, n) for n in ("old.parquet", "new.parquet", ".tmp-x"))
    log_tmp = blobs.join(store.log.dir, ".tmp-y")
    hint_tmp = blobs.join(store.path, ".tmp-z")  # a hint's writer killed before its rename
    for p in (old_orphan, tmp_orphan, log_tmp, hint_tmp):
        blobs.replace(p, b"")
    merged_away = files_on_disk(store) - referenced_files(store) - {old_orphan, tmp_orphan, log_tmp, hint_tmp}
    assert merged_away, "geometric merging replaced some layers"
    then = moment_between()  # everything so far is old, the referenced files must stay all the same
    blobs.replace(new_orphan, b"")
    referenced = referenced_files(store)
    set_store_clock(monkeypatch, then + 3600)
    removed = store.compact(grace_seconds=3600)["removed_files"]
    assert removed == 4 + len(merged_away)
    assert ".tmp-z" not in blobs.list(store.path)
    assert files_on_disk(store) == referenced | {new_orphan}
    store.compact(grace_seconds=0)
    assert files_on_disk(store) == referenced
    assert collection_at(store, store.trace("t"), (5,)) == {(0, "a"): 1, (1, "a"): 1, (2, "a"): 1}


def test_files_of_a_version_superseded_within_the_grace_period_stay(tmp_path, store_location, monkeypatch):
    store = Store(store_location)
    store.ingest("t", [write_updates(str(tmp_path / "u0.csv"), [((k, "a"), (0,), 1) for k in range(10)], 1)])
    store.ingest("t", [write_updates(str(tmp_path / "u1.csv"), [((0, "a"), (1,), 1)], 1)])
    before = referenced_files(store)
    assert len(before) == 2
    # the files and versions so far were written long ago ...
    set_store_clock(monkeypatch, moment_between() + 3600)
    store.compact("t", full=True, grace_seconds=3600)  # ... but were the newest until just now
    after = referenced_files(store)
    assert before and not (before & after)
    assert files_on_disk(store) == before | after, "a reader of the previous version still finds its files"
    set_store_clock(monkeypatch, moment_between() + 3600)
    store.compact(grace_seconds=3600)
    assert files_on_disk(store) == after
    # old versions are deleted, but not the checkpoint the kept ones are built on
    versions = sorted(n for n in store.blobs.list(store.log.dir) if n.startswith("v"))
    assert store.state().version == int(versions[-1][1:13]) and len(versions) <= CHECKPOINT_EVERY
    oldest = json.loads(store.blobs.get(store.blobs.join(store.log.dir, versions[0])))
    assert "delta" not in oldest, "the oldest kept version is a checkpoint"


# ------------------------------------------------------------------ layer files written by the store


def test_a_large_ingest_is_one_sorted_layer_whose_row_groups_skip_by_key(tmp_path, monkeypatch):
    monkeypatch.setattr(layer_mod, "ROW_GROUP_ROWS", 2000)
    rng = random.Random(1)
    rows = [((rng.randrange(10_000), rng.choice("xyz")), (rng.randrange(5),), 1) for _ in range(50_000)]
    store = Store(str(tmp_path / "store"))
    store.ingest("t", [write_updates(str(tmp_path / "big.parquet"), rows, 1)])
    trace = store.trace("t")
    assert len(trace.layers) == 1
    check_layers(store, "t")
    (path,) = store.layer_paths(trace)
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups >= 20
    kidx = md.schema.names.index("k")
    hits = [g for g in range(md.num_row_groups)
            if md.row_group(g).column(kidx).statistics.min <= 4321 <= md.row_group(g).column(kidx).statistics.max]
    assert len(hits) <= 2


# ------------------------------------------------------------------ refusals change nothing


def snapshot(store):
    return store.state().version, files_on_disk(store)


@pytest.mark.parametrize("case, match", [
    ("sealed_time", "is not beyond the upper"),
    ("beyond_new_upper", "is beyond the new upper"),
    ("upper_behind", "behind the trace's upper"),
    ("key_mismatch", "is keyed by k"),
    ("bad_name", "bad trace name"),
    ("unknown_key", "is not a column"),
])
def test_refused_ingests_change_nothing(tmp_path, store_location, case, match):
    store = Store(store_location)
    store.ingest("t", [write_updates(str(tmp_path / "a.csv"), [((1, "a"), (5,), 1)], 1)])
    before = snapshot(store)
    path = str(tmp_path / "b.csv")
    if case == "sealed_time":
        write_updates(path, [((1, "a"), (7,), 1), ((1, "a"), (3,), 1)], 1)
        args = dict(name="t")
    elif case == "beyond_new_upper":
        write_updates(path, [((1, "a"), (7,), 1), ((1, "a"), (9,), 1)], 1)
        args = dict(name="t", upper="8")
    elif case == "upper_behind":
        write_updates(path, [((1, "a"), (7,), 1)], 1)
        args = dict(name="t", upper="4")
    elif case == "key_mismatch":
        write_updates(path, [((1, "a"), (7,), 1)], 1)
        args = dict(name="t", key=["v"])
    elif case == "bad_name":
        write_updates(path, [((1, "a"), (7,), 1)], 1)
        args = dict(name="1bad")
    else:
        write_updates(path, [((1, "a"), (7,), 1)], 1)
        args = dict(name="u", key=["nope"])
    name = args.pop("name")
    with pytest.raises(StoreError, match=match):
        store.ingest(name, [path], **args)
    assert snapshot(store) == before


def test_refused_advances_change_nothing(tmp_path, store_location):
    store = Store(store_location)
    store.ingest("t", [write_updates(str(tmp_path / "a.csv"), [((1, "a"), (5,), 1)], 1)])
    store.advance("t", since="3")
    before = snapshot(store)
    with pytest.raises(StoreError, match="behind the current 6"):
        store.advance("t", upper="4")
    with pytest.raises(StoreError, match="behind the current 3"):
        store.advance("t", since="2")
    with pytest.raises(StoreError, match="unknown trace 'nope'.*traces: t"):
        store.advance("nope", since="2")
    with pytest.raises(StoreError, match="coordinate"):
        store.advance("t", since=Frontier([(1, 2)]))
    assert snapshot(store) == before


def test_first_ingest_creates_the_trace_with_its_schema_key_and_upper(tmp_path, store_location):
    store = Store(store_location)
    res = store.ingest("t", [write_updates(str(tmp_path / "a.parquet"), [((1, "a"), (0, 3), 2)], 2)], key=["v"])
    assert res.created and res.rows == 1
    trace = store.trace("t")
    assert (trace.d, trace.key, trace.data_columns) == (2, ["v"], ["k", "v"])
    assert trace.upper == Frontier([(0, 0)]) and len(trace.pending) == 1 and not trace.layers
    store.advance("t", upper="(0,4) (1,0)")
    trace = store.trace("t")
    assert not trace.pending and len(trace.layers) == 1
    assert collection_at(store, trace, (0, 3)) == {(1, "a"): 2}
