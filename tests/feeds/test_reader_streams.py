"""Named readers through random update streams, compaction, ``advance --since`` and GC.

Several readers follow one trace at their own pace while random ingests (with
retractions), moves of the since (also past a reader's position), geometric and full
compaction and garbage collection run in between; some reads are acknowledged, some only
looked at, some acknowledged after a compaction merged what was read with what was not.
Every read is checked against an independent fold of what the test ingested:

* a new reader reads every sealed update, times advanced to the trace's since;
* a reader at position ``P`` reads exactly the updates at times beyond ``P`` and not
  beyond the upper, at their own times: nothing acknowledged comes back, nothing is lost;
* the store keeps every update no reader has acknowledged at its own time: acknowledged
  ones never land on a time beyond a position;
* at the end the acknowledged batches of each reader add up, at every time between its
  first since and its position, to the collection the test ingested.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import pyarrow.csv as pacsv
import pytest

from storage.errors import Conflict
from storage.lattice import Frontier, format_frontier
from storage.store import Store
from storage.writes import feeds

KEYS = [0, 1, 2]
VALUES = ["a", "b"]
B = 5  # d = 2 times live in [0, B)^2


# ---------------------------------------------------------------- the reference (plain Python)


def beyond(frontier, t) -> bool:
    return any(all(a <= b for a, b in zip(f, t)) for f in frontier)


def advance(t, frontier):
    """meet over f of join(t, f); the empty frontier moves nothing."""
    if not frontier:
        return tuple(t)
    joins = [tuple(max(a, b) for a, b in zip(t, f)) for f in frontier]
    return tuple(min(j[i] for j in joins) for i in range(len(t)))


def consolidated(updates) -> dict:
    acc: Counter = Counter()
    for data, t, diff in updates:
        acc[(data, tuple(t))] += diff
    return {k: v for k, v in acc.items() if v}


def collection(updates, t) -> dict:
    acc: Counter = Counter()
    for data, s, diff in updates:
        if all(a <= b for a, b in zip(s, t)):
            acc[data] += diff
    return {k: v for k, v in acc.items() if v}


def expected_batch(raw, upper, position, start) -> dict:
    """What a reader at ``position`` (None: new, created when the trace's since was
    ``start``) reads when the upper is ``upper`` (frontiers as lists of tuples)."""
    sealed = [u for u in raw if not beyond(upper, u[1])]
    if position is None:
        return consolidated([(data, advance(t, start), diff) for data, t, diff in sealed])
    return consolidated([u for u in sealed if beyond(position, u[1])])


def as_updates(table, d) -> list:
    tcols = ["time"] if d == 1 else [f"time_{i}" for i in range(d)]
    cols = {c: table.column(c).to_pylist() for c in ["k", "v", "diff"] + tcols}
    return [((cols["k"][i], cols["v"][i]), tuple(cols[c][i] for c in tcols), cols["diff"][i])
            for i in range(table.num_rows)]


# ---------------------------------------------------------------- the stream


class Follower:
    """The test's own record of one named reader."""

    def __init__(self):
        self.position = None  # list of tuples, None before its first acknowledgement
        self.start = None  # the trace's since when the reader was created
        self.acked: list = []  # every acknowledged update


class Stream:
    def __init__(self, tmp_path, d, seed):
        self.rng = random.Random(seed)
        self.store = Store(str(tmp_path / "store"))
        self.root, self.d, self.n = str(tmp_path), d, 0
        self.raw: list = []
        self.readers = {"a": Follower(), "b": Follower(), "c": Follower()}
        self.reads = 0
        self.sealed: set = set()  # d = 2: the times not beyond the upper

    # -- writing

    def rows(self, times, n):
        return [((self.rng.choice(KEYS), self.rng.choice(VALUES)), self.rng.choice(times),
                 self.rng.choice([-2, -1, 1, 1, 2, 3])) for _ in range(n)]

    def ingest(self, rows, upper=None):
        self.n += 1
        path = os.path.join(self.root, f"u{self.n}.csv")
        cols = {"k": [r[0][0] for r in rows], "v": [r[0][1] for r in rows]}
        for i, c in enumerate(["time"] if self.d == 1 else [f"time_{i}" for i in range(self.d)]):
            cols[c] = [r[1][i] for r in rows]
        cols["diff"] = [r[2] for r in rows]
        import pyarrow as pa
        pacsv.write_csv(pa.table(cols), path)
        self.store.ingest("t", [path], upper=upper)
        self.raw += rows

    def upper(self):
        return list(self.store.trace("t").upper)

    def since(self):
        return list(self.store.trace("t").since)

    # -- reading

    def read(self, name, ack):
        f = self.readers[name]
        upper = self.upper()
        f.start = f.start or self.since()  # a reader is created by its first read
        reading, table = feeds.read_changes(self.store, "t", name)
        got = consolidated(as_updates(table, self.d))
        assert got == expected_batch(self.raw, upper, f.position, f.start), (name, f.position, upper)
        assert list(reading.upper) == upper
        self.reads += 1
        if ack:
            feeds.acknowledge(self.store, reading)
            self.acknowledged(f, reading, got)

    def acknowledged(self, f, reading, got):
        f.acked += [(data, t, diff) for (data, t), diff in got.items()]
        f.position = list(reading.upper)

    def read_then_merge_then_ack(self, name, more_rows, upper=None):
        """A compaction merges what was read with what was sealed after, before the ack."""
        f = self.readers[name]
        f.start = f.start or self.since()
        reading, table = feeds.read_changes(self.store, "t", name)
        got = consolidated(as_updates(table, self.d))
        self.reads += 1
        self.ingest(more_rows, upper)
        self.store.compact("t", full=True)
        try:
            feeds.acknowledge(self.store, reading)
        except Conflict:
            assert f.position is None, "only a new reader's first ack can be undone by a merge"
            return
        self.acknowledged(f, reading, got)

    # -- checks

    def check_store_keeps_unacknowledged_updates_at_their_times(self):
        t = self.store.trace("t")
        stored = as_updates(self.store.read_updates(t, t.layers), self.d)
        sealed = [u for u in self.raw if not beyond(list(t.upper), u[1])]
        for name, f in self.readers.items():
            if f.position is None:
                continue
            assert consolidated(u for u in stored if beyond(f.position, u[1])) == \
                consolidated(u for u in sealed if beyond(f.position, u[1])), name

    def check_no_loss_no_repeat(self, times):
        for name, f in self.readers.items():
            if f.position is None:
                continue
            for t in times:
                if beyond(f.start, t) and not beyond(f.position, t):
                    assert collection(f.acked, t) == collection(self.raw, t), (name, t)


def test_d1_readers_follow_random_ingests_compaction_since_and_gc_exactly_once(tmp_path):
    for seed in range(3):
        s = Stream(tmp_path / f"s{seed}", 1, seed)
        os.makedirs(s.root)
        top = 0
        s.ingest(s.rows([(0,), (1,)], 4))
        top = 2
        late = {"c": s.rng.randint(6, 16)}  # reader c starts later
        for step in range(26):
            op = s.rng.choices(["ingest", "since", "compact", "full", "gc", "read", "peek", "race", "drop"],
                               [5, 2, 1, 1, 1, 5, 2, 2, 1])[0]
            names = [n for n in s.readers if n not in late or step >= late[n]]
            if op == "ingest":
                s.ingest(s.rows([(top + i,) for i in range(3)], s.rng.randint(1, 6)))
                top = max(u[1][0] for u in s.raw) + 1
            elif op == "since":
                cur = s.since()[0][0]
                s.store.advance("t", since=str(s.rng.randint(cur, top + 1)))
            elif op == "compact":
                s.store.compact("t")
            elif op == "full":
                s.store.compact("t", full=True)
            elif op == "gc":
                s.store.compact("t", grace_seconds=0)
            elif op in ("read", "peek"):
                s.read(s.rng.choice(names), ack=op == "read")
            elif op == "race":
                rows = s.rows([(top + i,) for i in range(2)], 3)
                s.read_then_merge_then_ack(s.rng.choice(names), rows)
                top = max(u[1][0] for u in s.raw) + 1
            elif op == "drop" and "b" in names and s.store.trace("t").holds.get("reader:b"):
                feeds.drop_reader(s.store, "t", "b")
                s.readers["b"] = Follower()
            s.check_store_keeps_unacknowledged_updates_at_their_times()
        for name in s.readers:
            s.read(name, ack=True)
        s.check_store_keeps_unacknowledged_updates_at_their_times()
        s.check_no_loss_no_repeat([(t,) for t in range(top + 2)])
        assert s.reads >= 10


class Sealed2:
    """A down-set of [0, B)^2 (the sealed times) grown one minimal open time at a time."""

    def __init__(self):
        self.s: set = set()

    def upper(self) -> Frontier:
        return Frontier([p for p in _box(B) if p not in self.s], 2)

    def open_times(self):
        return [p for p in _box(B - 1) if p not in self.s]

    def grow(self, rng, k):
        for _ in range(k):
            minimal = [p for p in self.open_times()
                       if all(q in self.s for q in ((p[0] - 1, p[1]), (p[0], p[1] - 1)) if min(q) >= 0)]
            if not minimal:
                return
            self.s.add(rng.choice(minimal))


def _box(hi):
    return [(i, j) for i in range(hi + 1) for j in range(hi + 1)]


@pytest.mark.parametrize("seed", [0, 1])
def test_d2_readers_follow_pending_updates_seals_and_since_exactly_once(tmp_path, seed):
    s = Stream(tmp_path, 2, 50 + seed)
    sealed = Sealed2()
    sealed.grow(s.rng, 2)
    s.ingest(s.rows(sorted(sealed.s), 4), upper=format_frontier(sealed.upper()))
    s.read("a", ack=False)  # reader a exists from the start
    for step in range(30):
        op = s.rng.choices(["sealed", "pending", "seal", "since", "full", "gc", "read", "peek", "race", "drop"],
                           [3, 3, 2, 2, 1, 1, 6, 2, 3, 1])[0]
        names = ["a", "b"] + (["c"] if step > 10 else [])
        if op == "sealed":
            before = set(sealed.s)
            sealed.grow(s.rng, s.rng.randint(1, 3))
            new = sorted(sealed.s - before)
            if new:
                s.ingest(s.rows(new, s.rng.randint(1, 5)), upper=format_frontier(sealed.upper()))
        elif op == "pending" and sealed.open_times():
            s.ingest(s.rows(sealed.open_times(), s.rng.randint(1, 5)))
        elif op == "seal":
            sealed.grow(s.rng, s.rng.randint(1, 4))
            s.store.advance("t", upper=sealed.upper())
        elif op == "since":
            cur = s.store.trace("t").since
            qs = [(s.rng.randint(0, B), s.rng.randint(0, B)) for _ in range(s.rng.randint(1, 2))]
            s.store.advance("t", since=Frontier([tuple(max(a, b) for a, b in zip(q, s.rng.choice(cur.elements)))
                                                 for q in qs], 2))
        elif op == "full":
            s.store.compact("t", full=True)
        elif op == "gc":
            s.store.compact("t", grace_seconds=0)
        elif op in ("read", "peek"):
            s.read(s.rng.choice(names), ack=op == "read")
        elif op == "race" and sealed.open_times():
            before = set(sealed.s)
            sealed.grow(s.rng, 1)
            new = sorted(sealed.s - before)
            if new:
                s.read_then_merge_then_ack(s.rng.choice(names), s.rows(new, 3), upper=format_frontier(sealed.upper()))
        elif op == "drop" and s.store.trace("t").holds.get("reader:b"):
            feeds.drop_reader(s.store, "t", "b")
            s.readers["b"] = Follower()
        assert s.store.trace("t").upper == sealed.upper()
        s.check_store_keeps_unacknowledged_updates_at_their_times()
    for name in s.readers:
        s.read(name, ack=True)
    s.check_no_loss_no_repeat(_box(B + 1))
    assert s.reads >= 10


def test_a_new_reader_starting_beyond_the_upper_is_refused_an_ack_across_a_merge(tmp_path):
    """Its history sits at its start, beyond the upper it read: once merged with what it
    has not read, times cannot tell them apart, so the ack conflicts and nothing repeats."""
    s = Stream(tmp_path, 1, 0)
    s.ingest([((0, "a"), (0,), 1), ((1, "b"), (1,), 1)])
    s.store.advance("t", since="7")
    s.store.compact("t", full=True)  # the history now sits at 7, the upper is 2
    s.read_then_merge_then_ack("a", [((2, "c"), (2,), 1)])
    assert s.readers["a"].position is None, "the ack conflicted"
    s.read("a", ack=True)
    s.read("a", ack=True)  # nothing again
    s.ingest([((0, "a"), (3,), -1)])
    s.read("a", ack=True)
    assert collection(s.readers["a"].acked, (9,)) == collection(s.raw, (9,)) != {}


@pytest.mark.parametrize("store_location", ["s3"], indirect=True)
def test_a_reader_follows_a_trace_on_an_object_store(tmp_path, store_location):
    s = Stream(tmp_path, 1, 9)
    s.store = Store(store_location)
    for step in range(3):
        s.ingest(s.rows([(2 * step,), (2 * step + 1,)], 4))
        s.read("a", ack=True)
        s.store.advance("t", since=str(2 * step + 1))
        s.store.compact("t", full=True, grace_seconds=0)
        s.check_store_keeps_unacknowledged_updates_at_their_times()
    s.ingest(s.rows([(6,)], 3))
    s.read("a", ack=True)
    s.check_no_loss_no_repeat([(t,) for t in range(8)])
