"""A loop task's spine (ops/loops/spine.py): rows of the touched keys found by binary search,
batches merged geometrically, and one hash for a key whatever its integer width (the
resident tasks route by it, ops/loops/exchange.py).

The references are plain Python over the rows: a key's rows are those whose key values
are equal (None equal to None), the multiset of every row added."""

from __future__ import annotations

import random
from collections import Counter

import duckdb
import pyarrow as pa
import pytest

import ops.loops.spine as loop_spine
from ops.loops.exchange import owners
from ops.loops.spine import MERGE_SHARE, Spine

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("v", pa.int64())])


def _rows(t: pa.Table | None) -> Counter:
    return Counter() if t is None else Counter(zip(*(t.column(c).to_pylist() for c in t.column_names)))


def _random_table(rng: random.Random, n: int) -> pa.Table:
    return pa.table({
        "k": [None if rng.random() < 0.05 else rng.randint(-30, 30) for _ in range(n)],
        "s": [rng.choice([None, "a", "b", "c"]) for _ in range(n)],
        "v": [rng.randint(0, 5) for _ in range(n)],
    }, schema=SCHEMA)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("key", [["k"], ["k", "s"], ["s"]])
def test_matching_finds_exactly_the_rows_of_the_probed_keys(seed, key, monkeypatch):
    """Every batch indexed (INDEX_ROWS 0, whatever the probe's size): the rows found are those of the probe's keys,
    no more (a 64-bit hash shared by two of these few keys would show as a failure), and
    all of them, across merges that concatenate (so nothing is lost by merging)."""
    monkeypatch.setattr(loop_spine, "INDEX_ROWS", 0)
    monkeypatch.setattr(loop_spine, "WHOLE_SHARE", float("inf"))
    rng = random.Random(seed)
    con = duckdb.connect()
    spine = Spine(lambda t: t)
    added = Counter()
    for size in [rng.choice([1, 5, 40, 300]) for _ in range(25)]:
        t = _random_table(rng, size)
        spine.add(t)
        added += _rows(t)
        probe = _random_table(rng, rng.randint(1, 6)).cast(
            pa.schema([("k", pa.int32()), ("s", pa.large_string()), ("v", pa.int64())]))
        wanted = {tuple(r[SCHEMA.names.index(c)] for c in key) for r in _rows(probe)}
        expected = Counter({r: m for r, m in added.items() if tuple(r[SCHEMA.names.index(c)] for c in key) in wanted})
        assert _rows(spine.matching(con, key, probe)) == expected
        assert _rows(spine.whole()) == added
    assert len(spine.batches) < 25


def test_batches_shrink_geometrically_and_merge_by_the_callers_function():
    merges = []

    def merge(t):
        merges.append(t.num_rows)
        return t

    spine = Spine(merge)
    for _ in range(5000):
        spine.add(pa.table({"k": [1]}))
    sizes = [b.table.num_rows for b in spine.batches]
    assert sum(sizes) == 5000
    assert all(newer < MERGE_SHARE * older for older, newer in zip(sizes, sizes[1:])), sizes
    assert len(sizes) <= 8, sizes
    # a row is merged O(log rows) times: the merged rows are far fewer than rows x adds
    assert sum(merges) < 5000 * 20, sum(merges)


def test_a_merge_that_cancels_everything_leaves_no_batch():
    spine = Spine(lambda t: t.slice(0, 0))
    spine.add(pa.table({"k": [1, 2]}))
    spine.add(pa.table({"k": [3]}))
    assert spine.batches == [] and spine.whole() is None
    assert spine.matching(duckdb.connect(), ["k"], pa.table({"k": [1]})) is None


def test_keys_that_may_hash_differently_read_every_row():
    """A probe key of another kind of type (a float against integers): every row, so the
    caller's exact join still sees 1.0 = 1."""
    spine = Spine(lambda t: t)
    t = pa.table({"k": list(range(2000))})
    spine.add(t)
    got = spine.matching(duckdb.connect(), ["k"], pa.table({"k": [1.0]}))
    assert got.num_rows == 2000


def test_one_owner_for_a_key_of_every_integer_width():
    """DuckDB alone hashes -5 as INTEGER and as BIGINT differently; the two sides of a join
    must route a key to the same task."""
    con = duckdb.connect()
    values = [-(2 ** 31), -70000, -5, -1, 0, 3, 2 ** 31 - 1, None]
    widths = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    seen = {}
    for w in widths:
        fits = [v for v in values if v is None or -(2 ** (w.bit_width - 1)) <= v < 2 ** (w.bit_width - 1)]
        got = owners(con, pa.table({"k": pa.array(fits, w)}), ["k"], 7)
        for v, o in zip(fits, got):
            assert seen.setdefault(v, o) == o, (v, w)
    unsigned = owners(con, pa.table({"k": pa.array([0, 3], pa.uint64())}), ["k"], 7)
    assert list(unsigned) == [seen[0], seen[3]]
    assert len(set(seen.values())) > 1  # not one owner for everything


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("key, touched_schema", [
    (["k"], SCHEMA),  # one integer column: Arrow's membership test
    (["s"], SCHEMA),  # one string column: the same
    (["k"], pa.schema([("k", pa.int32()), ("s", pa.string()), ("v", pa.int64())])),  # types differ: DuckDB
    (["k", "s"], SCHEMA),  # two columns: DuckDB
    (["f"], None),  # floats (-0.0 equals 0.0): DuckDB
], ids=["int", "string", "widths", "two_columns", "float"])
def test_rows_of_the_touched_keys_are_those_a_semi_join_keeps(seed, key, touched_schema):
    """A reduce's old rows narrowed to the keys a round touches (ops/loops/task.py
    rows_of_keys), whichever way it takes: every row whose key a touched row holds, None
    equal to None, and no other."""
    from ops.loops.task import rows_of_keys

    rng = random.Random(seed)
    if key == ["f"]:
        def table(n):
            return pa.table({"f": [rng.choice([None, 0.0, -0.0, 1.5, float("nan")]) for _ in range(n)],
                             "v": [rng.randint(0, 5) for _ in range(n)]})
        old, touched = table(200), table(4)
    else:
        old, touched = _random_table(rng, 300), _random_table(rng, 5).cast(touched_schema)

    def same(a, b):  # None equals None, NaN equals NaN, -0.0 equals 0.0 (DuckDB's semantics)
        return a == b or (a is None and b is None) or (isinstance(a, float) and a != a and b is not None and b != b)

    def canon(row):  # a row as a countable tuple (NaN is not equal to itself)
        return tuple("nan" if isinstance(x, float) and x != x else x for x in row.values())

    wanted = [tuple(r[c] for c in key) for r in touched.to_pylist()]
    expected = Counter(canon(r) for r in old.to_pylist()
                       if any(all(same(x, y) for x, y in zip(tuple(r[c] for c in key), w)) for w in wanted))
    got = rows_of_keys(duckdb.connect(), old, touched, key)
    assert Counter(canon(r) for r in got.to_pylist()) == expected
    assert sum(expected.values()) > 0 or not wanted


def test_lookup_values_are_equal_for_equal_integers_of_any_width_and_apart_for_others():
    """The spine's lookup value of one integer column is the key's own bits: equal keys of
    any width meet, distinct keys (and null) stay apart."""
    values = [None, -5, -1, 0, 1, 7, 127]
    tables = [pa.table({"k": pa.array(values, typ)}) for typ in (pa.int8(), pa.int16(), pa.int32(), pa.int64())]
    got = [loop_spine.lookup_hashes(None, t, ["k"]).tolist() for t in tables]
    assert all(g == got[0] for g in got)
    assert len(set(got[0])) == len(values)
    unsigned = loop_spine.lookup_hashes(None, pa.table({"k": pa.array([0, 1, 7, 127], pa.uint8())}), ["k"]).tolist()
    assert unsigned == got[0][3:]
