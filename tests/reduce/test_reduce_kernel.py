"""reduce_delta against the seed example of docs/architecture.md and a plain-Python reference.

The reference never builds a grid: it checks the defining property directly, at every
time of a box that reaches between and beyond the input times, that the output updates
accumulated at t equal f(total input at t) - f(old input at t).
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from ops.reduce.kernel import Count, CountDistinct, Distinct, Max, Min, PerKey, Sum, Threshold, TopK, reduce_delta
from tests.helpers.reduce_refs import (KEYS, KTYPES, REDUCERS, VALUES, VTYPES, check_accumulation, check_shape,
                                       make_table, nonzero, output_rows, perkey_fn, random_rows)

# ------------------------------------------------------------------ the seed example

SEED = [
    ((0, 0), "a", 1), ((0, 0), "b", 3), ((0, 0), "cc", 2),
    ((0, 1), "a", -1), ((0, 1), "b", -3),
    ((1, 0), "a", -1), ((1, 0), "b", -1),
    ((1, 1), "a", 1), ((1, 1), "b", 2),
]  # fmt: skip

SEED_EXPECTED = {
    ((1,), (2,), (0, 0)): 1, ((2,), (1,), (0, 0)): 1,
    ((1,), (2,), (0, 1)): -1,
    ((1,), (1,), (1, 0)): 1, ((1,), (2,), (1, 0)): -1,
    ((1,), (2,), (1, 1)): 1,
}  # fmt: skip


def seed_table(new=lambda i: True):
    rows = [((len(s),), (s,), t, df, new(i)) for i, (t, s, df) in enumerate(SEED)]
    return make_table(rows, ["length"], ["s"], 2)


def test_seed_example_count_distinct():
    out = reduce_delta(seed_table(), ["length"], ["s"], 2, CountDistinct())
    assert out.column_names == ["length", "distinct", "time_0", "time_1", "diff"]
    got = {(k, o, t): df for k, o, t, df in output_rows(out, ["length"], 2)}
    assert got == SEED_EXPECTED


def test_seed_example_split_into_runs_adds_up():
    """Two runs (old then new) sum to the one-run answer, for every split."""
    for mask in range(1 << len(SEED)):
        first = seed_table(lambda i: bool(mask >> i & 1))
        t1 = first.filter(first.column("_new"))
        run1 = output_rows(reduce_delta(t1, ["length"], ["s"], 2, CountDistinct()), ["length"], 2)
        run2 = output_rows(reduce_delta(seed_table(lambda i: not (mask >> i & 1)), ["length"], ["s"], 2, CountDistinct()), ["length"], 2)
        total = Counter()
        for k, o, t, df in run1 + run2:
            total[(k, o, t)] += df
        assert nonzero(total) == SEED_EXPECTED, mask


# ------------------------------------------------------------------ against the reference

CASES = {1: 30, 2: 20, 3: 8}


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_against_plain_reference(name, d):
    make, plain = REDUCERS[name]
    rng = random.Random(f"{name}-{d}")
    tmax = {1: 6, 2: 3, 3: 2}[d]
    for case in range(CASES[d]):
        rows = random_rows(rng, d, rng.randint(1, 14), tmax)
        table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
        if case % 3 == 0:  # arbitrary row order and chunking must not matter
            table = pa.concat_tables([table.slice(0, len(rows) // 2), table.slice(len(rows) // 2)])
        reducer = make()
        out = reduce_delta(table, KEYS, VALUES, d, reducer)
        check_shape(out, table, d, reducer)
        check_accumulation(rows, out, d, plain)


def test_all_old_or_cancelling_new_gives_nothing():
    rows = [((1, "p"), (1, "a", 0.5), (0, 0), 1, False), ((1, "p"), (2, "b", 0.5), (1, 2), 1, False)]
    rows += [((1, "p"), (3, "c", None), (2, 1), 1, True), ((1, "p"), (3, "c", None), (2, 1), -1, True)]
    out = reduce_delta(make_table(rows, KEYS, VALUES, 2, KTYPES, VTYPES), KEYS, VALUES, 2, Count())
    assert out.num_rows == 0


def test_empty_input_and_no_value_columns():
    table = make_table([], KEYS, VALUES, 1, KTYPES, VTYPES)
    out = reduce_delta(table, KEYS, VALUES, 1, Sum("x"))
    assert out.num_rows == 0 and out.column_names == ["k", "g", "sum", "time", "diff"]
    # key = the whole row, no value columns: Count is the multiplicity of each row
    rows = [((1, "p"), (), (0,), 2, True), ((1, "p"), (), (3,), -1, True), ((2, "q"), (), (1,), 1, False)]
    table = make_table(rows, KEYS, [], 1, KTYPES)
    got = output_rows(reduce_delta(table, KEYS, [], 1, Count()), KEYS, 1)
    assert sorted(got) == [((1, "p"), (1,), (3,), 1), ((1, "p"), (2,), (0,), 1), ((1, "p"), (2,), (3,), -1)]


def test_output_schemas():
    vs = pa.schema([("v", pa.int32()), ("w", pa.string()), ("x", pa.float32())])
    assert Count().output_schema(vs) == pa.schema([("count", pa.int64())])
    assert CountDistinct().output_schema(vs) == pa.schema([("distinct", pa.int64())])
    assert Sum("v").output_schema(vs) == pa.schema([("sum", pa.int64())])
    assert Sum("x", name="s").output_schema(vs) == pa.schema([("s", pa.float64())])
    assert Min("w").output_schema(vs) == pa.schema([("min", pa.string())])
    assert Max("v", name="hi").output_schema(vs) == pa.schema([("hi", pa.int32())])
    for r in (Distinct(), Threshold(np.sign), TopK(1, ["w"])):
        assert r.output_schema(vs) == vs
    assert PerKey(perkey_fn).output_schema(vs) == pa.schema([("w", pa.string()), ("n", pa.int64())])
    with pytest.raises(TypeError):
        Sum("w").output_schema(vs)
    with pytest.raises(ValueError):
        Min("nope").output_schema(vs)


def test_output_clash_is_refused():
    rows = [((1, "p"), (1, "a", 0.5), (0,), 1, True)]
    table = make_table(rows, KEYS, VALUES, 1, KTYPES, VTYPES)
    with pytest.raises(ValueError, match="clash"):
        reduce_delta(table, KEYS, VALUES, 1, Count(name="k"))


def test_many_times_one_key_stays_vectorised():
    """A key with many distinct times in one run (d = 1): cumulative count at every time."""
    n = 2000
    rng = np.random.default_rng(7)
    t = rng.permutation(n).astype(np.int64)
    table = pa.table({"k": np.zeros(n, np.int64), "v": np.arange(n), "time": t,
                      "diff": np.ones(n, np.int64), "_new": np.ones(n, bool)})  # fmt: skip
    out = reduce_delta(table, ["k"], ["v"], 1, Count())
    times = out.column("time").to_numpy()
    counts = out.column("count").to_numpy()
    diffs = out.column("diff").to_numpy()
    # at time i the count goes from i to i + 1
    assert sorted(zip(times[diffs > 0], counts[diffs > 0])) == [(i, i + 1) for i in range(n)]
    assert sorted(zip(times[diffs < 0], counts[diffs < 0])) == [(i, i) for i in range(1, n)]


@pytest.mark.parametrize("d", [1, 2])
def test_chunking_does_not_change_the_result(d):
    rng = random.Random(d)
    for _ in range(10):
        rows = random_rows(rng, d, rng.randint(5, 30), 3)
        rows += [((k, "z"), v, t, df, nw) for (k, _), v, t, df, nw in random_rows(rng, d, 10, 3)]
        table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
        for reducer in (Count(), TopK(2, ["w"]), PerKey(perkey_fn)):
            whole = reduce_delta(table, KEYS, VALUES, d, reducer)
            for budget in (1, 5, 40):  # cells (grid kernel) or updates (sweeps) per chunk
                assert reduce_delta(table, KEYS, VALUES, d, reducer, max_cells=budget, max_rows=budget).equals(whole)


def test_struct_values_and_signed_zero():
    """Rows are identified by value: struct fields compared field by field, -0.0 == 0.0."""
    s = pa.array([{"a": 1, "b": "x"}, {"a": 1, "b": "x"}, None, None])
    table = pa.table({"k": [1, 1, 1, 1], "s": s, "f": [0.0, -0.0, 1.0, 1.0], "time": [0, 1, 2, 2],
                      "diff": [1, 1, 1, -1], "_new": [True] * 4})  # fmt: skip
    got = reduce_delta(table, ["k"], ["s", "f"], 1, Threshold(lambda c: c * c))
    assert got.column("diff").to_pylist() == [1, 3]
    assert got.column("time").to_pylist() == [0, 1]
    assert got.column("s").to_pylist() == [{"a": 1, "b": "x"}] * 2
    # a null struct is not a struct of nulls
    s2 = pa.array([None, {"a": None, "b": None}, {"a": 0, "b": None}], s.type)
    t2 = pa.table({"k": [1] * 3, "s": s2, "time": [0] * 3, "diff": [1] * 3, "_new": [True] * 3})
    assert reduce_delta(t2, ["k"], ["s"], 1, CountDistinct()).column("distinct").to_pylist() == [3]
    with pytest.raises(TypeError, match="cannot group"):
        reduce_delta(table.append_column("l", pa.array([[1]] * 4)), ["k"], ["l"], 1, Count())


@pytest.mark.parametrize("name", ["min", "max_str", "topk"])
def test_insertions_only_order_reducers_match_the_reference(name):
    """With every diff positive the order sweep first drops the value rows that never reach
    the first k (``_ever_first_k``); multiplicities, ties, old and new rows, many times."""
    make, plain = REDUCERS[name]
    rng = random.Random(f"insert-{name}")
    for case in range(25):
        rows = [(k, v, t, abs(df), nw) for k, v, t, df, nw in random_rows(rng, 1, rng.randint(1, 40), 12)]
        table = make_table(rows, KEYS, VALUES, 1, KTYPES, VTYPES)
        reducer = make()
        out = reduce_delta(table, KEYS, VALUES, 1, reducer)
        check_shape(out, table, 1, reducer)
        check_accumulation(rows, out, 1, plain)


def test_insertions_only_top_k_drops_rows_but_not_answers():
    """Many insertions into one key: the filtered sweep equals the sweep of every row."""
    from ops.reduce import sweep as sw
    rng = np.random.default_rng(5)
    n = 3000
    table = pa.table({"k": np.zeros(n, np.int64), "v": rng.integers(0, 50, n), "time": rng.integers(0, 400, n),
                      "diff": rng.integers(1, 3, n), "_new": rng.random(n) < 0.7})
    for reducer, never in ((TopK(3, ["v"], descending=True), -1), (Min("v"), 99)):
        fast = reduce_delta(table, ["k"], ["v"], 1, reducer)
        # a row that is never among the first k, inserted then retracted: the same answers,
        # computed without the filter (not every change is an insertion)
        slow_in = pa.concat_tables([table, pa.table({"k": [0, 0], "v": [never, never], "time": [500, 501],
                                                     "diff": [1, -1], "_new": [True, True]})])
        assert reduce_delta(slow_in, ["k"], ["v"], 1, reducer).equals(fast)
    kv = np.asarray(table.column("v"))
    keep = sw._ever_first_k(np.zeros(n, np.int64), np.sort(np.asarray(table.column("time"))), np.arange(n) * 2,
                            np.ones(n, np.int64), np.ones(n, bool), np.argsort(np.argsort(-kv, kind="stable")), 3, 2)
    assert 0 < keep.sum() < n // 10


def loop_round_rows(rng: random.Random, d: int, tmax: int):
    """A loop round's shape: most keys have every update at one last coordinate (their own
    iteration), a few also hold updates at other iterations; many outer times, retractions."""
    rows = []
    for k in range(6):
        key = (k, rng.choice(["p", "q"]))
        it = rng.randint(0, tmax)
        mixed = k % 3 == 0
        vals = [(rng.randrange(-2, 4), rng.choice(["a", "b", None]), rng.choice([0.5, -2.0, None]))
                for _ in range(rng.randint(1, 3))]
        for _ in range(rng.randint(1, 8)):
            last = rng.randint(0, tmax) if mixed and rng.random() < 0.4 else it
            outer = tuple(rng.randint(0, tmax + 2) for _ in range(d - 1))
            rows.append((key, rng.choice(vals), outer + (last,), rng.choice([1, 1, 2, -1, -1]), rng.random() < 0.5))
        if rng.random() < 0.5:  # a retraction cancelling an earlier update of the key exactly
            kk, v, t, df, nw = rng.choice([r for r in rows if r[0] == key])
            rows.append((kk, v, t, -df, rng.random() < 0.5))
    return rows


SLAB_CHOICES = {  # (MAX_SLABS, SLAB_ROW_COST, COPY_BUDGET)
    "grid": (0, float("inf"), 1 << 20),  # every key to the grid
    "flat": (1, float("inf"), 1 << 20),  # keys with one slab to compute, the others to the grid
    "costed": (1, 8, 1 << 20),  # the default: the others by cost
    "slabs": (0, 0, 5),  # every key to the slabs, copied a few rows at a time
}


@pytest.mark.parametrize("choice", sorted(SLAB_CHOICES))
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("name", ["distinct", "threshold", "count", "sum_int", "min", "topk", "perkey"])
def test_keys_cut_into_slabs_match_the_reference(name, d, choice, monkeypatch):
    """Keys whose slabs of equal last coordinate cost less than their grid are reduced one
    dimension lower (ops/reduce/slabs.py), the others by the grid: each choice, forced,
    gives the exact answer on loop-round-shaped inputs."""
    import ops.reduce.slabs

    for name_, value in zip(("MAX_SLABS", "SLAB_ROW_COST", "COPY_BUDGET"), SLAB_CHOICES[choice]):
        monkeypatch.setattr(ops.reduce.slabs, name_, value)
    monkeypatch.setattr("ops.reduce.kernel.presence_delta", lambda *a: None)  # (tested on its own below)
    make, plain = REDUCERS[name]
    rng = random.Random(f"flat-{name}-{d}")
    for _ in range({2: 12, 3: 4}[d]):
        rows = loop_round_rows(rng, d, 2)
        table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
        reducer = make()
        out = reduce_delta(table, KEYS, VALUES, d, reducer)
        check_shape(out, table, d, reducer)
        check_accumulation(rows, out, d, plain)


def hot_rows(rng: random.Random, d: int, tmax: int):
    """Two keys with many distinct value rows each, changing at many times of a d >= 2
    grid (every coordinate), old updates and new ones at any time, retractions."""
    rows = []
    for k in range(2):
        key = (k, "p")
        vals = [(rng.randrange(-5, 6), rng.choice(["a", "b", "c", None]), rng.choice([0.5, -2.0, None]))
                for _ in range(12)]
        for _ in range(40):
            t = tuple(rng.randint(0, tmax) for _ in range(d))
            rows.append((key, rng.choice(vals), t, rng.choice([1, 1, 2, -1]), rng.random() < 0.3))
        for kk, v, t, df, nw in rng.sample([r for r in rows if r[0] == key], 6):  # exact retractions
            rows.append((kk, v, tuple(rng.randint(x, tmax) for x in t), -df, rng.random() < 0.3))
    return rows


@pytest.mark.parametrize("choice", ["grid", "costed", "slabs"])
@pytest.mark.parametrize("name", ["min", "max_str", "topk", "distinct", "count_distinct", "sum_int", "perkey"])
def test_hot_keys_at_d2_match_the_reference(name, choice, monkeypatch):
    """Few keys, many distinct value rows, many distinct times in both coordinates: the
    slabs (only those at or beyond a key's first new update) and the grid agree with the
    reference at every time."""
    import ops.reduce.slabs

    for name_, value in zip(("MAX_SLABS", "SLAB_ROW_COST", "COPY_BUDGET"), SLAB_CHOICES[choice]):
        monkeypatch.setattr(ops.reduce.slabs, name_, value)
    monkeypatch.setattr("ops.reduce.kernel.presence_delta", lambda *a: None)
    make, plain = REDUCERS[name]
    rng = random.Random(f"hot-{name}")
    for _ in range(3):
        rows = hot_rows(rng, 2, 7)
        table = make_table(rows, KEYS, VALUES, 2, KTYPES, VTYPES)
        reducer = make()
        out = reduce_delta(table, KEYS, VALUES, 2, reducer)
        check_shape(out, table, 2, reducer)
        check_accumulation(rows, out, 2, plain)


@pytest.mark.parametrize("ranks", ["table", "sort"])
@pytest.mark.parametrize("shape", ["loop_round", "hot", "random"])
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("name", ["distinct", "threshold", "threshold_neg"])
def test_presence_kernel_matches_the_reference(name, d, shape, ranks, monkeypatch):
    """Distinct and threshold at d >= 2 take every row's grid in one pass
    (ops/reduce/presence.py) when it is small: exact at every time, and it is the kernel
    that answered; the ranks of times within a row found by a table of pairs or by a sort."""
    import ops.columnar
    import ops.reduce.kernel
    import ops.reduce.presence

    big = 0 if ranks == "sort" else 1 << 30
    monkeypatch.setattr(ops.columnar, "PAIR_TABLE_PER_ROW", big)
    monkeypatch.setattr(ops.columnar, "PAIR_TABLE_MIN", big)
    answered = []

    def counted(*a):
        out = ops.reduce.presence.presence_delta(*a)
        answered.append(out is not None)
        return out

    monkeypatch.setattr(ops.reduce.kernel, "presence_delta", counted)
    make, plain = REDUCERS[name]
    rng = random.Random(f"presence-{name}-{d}-{shape}")
    for case in range(8):
        rows = {"loop_round": lambda: loop_round_rows(rng, d, 3), "hot": lambda: hot_rows(rng, d, 5),
                "random": lambda: random_rows(rng, d, rng.randint(1, 30), 3)}[shape]()
        table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
        if case % 2:  # rows in any order
            table = table.take(pa.array(rng.sample(range(table.num_rows), table.num_rows)))
        reducer = make()
        out = reduce_delta(table, KEYS, VALUES, d, reducer)
        check_shape(out, table, d, reducer)
        check_accumulation(rows, out, d, plain)
    assert answered and all(answered)


def test_presence_kernel_declines_grids_larger_than_its_updates():
    """Updates spread over both coordinates make a grid of (outer times x iterations)
    cells: above its cells-per-update bound the presence kernel leaves the table to the
    slabs and the grid, which stay exact."""
    from ops.reduce.presence import CELLS_PER_UPDATE, presence_delta

    n = 3 * CELLS_PER_UPDATE  # a diagonal: n x n cells, over CELLS_PER_UPDATE x n and the minimum of 1,024
    rows = [((1, "p"), (1, "a", 0.5), (i, n - i), 1, i % 2 == 0) for i in range(n)]
    table = make_table(rows, KEYS, VALUES, 2, KTYPES, VTYPES)
    schema = reduce_delta(table.slice(0, 0), KEYS, VALUES, 2, Distinct()).schema
    assert presence_delta(table, KEYS + VALUES, 2, None, schema, 1 << 30) is None
    out = reduce_delta(table, KEYS, VALUES, 2, Distinct())
    check_accumulation(rows, out, 2, REDUCERS["distinct"][1])


def test_only_slabs_from_the_first_new_update_are_copied(monkeypatch):
    """A key whose new updates all sit at its last slab copies its rows once, however many
    old slabs lie below: the cost follows the slabs that can change."""
    import ops.reduce.slabs as rf

    copies = []
    real = rf._chunks

    def counting(*args, **kw):
        for part in real(*args, **kw):
            copies.append(part.num_rows)
            yield part

    monkeypatch.setattr(rf, "_chunks", counting)
    n = 2000
    rng = np.random.default_rng(3)
    last = rng.integers(0, 50, n)
    last[-5:] = 60
    table = pa.table({"k": np.zeros(n, np.int64), "v": rng.integers(0, 300, n), "time_0": rng.integers(0, 40, n),
                      "time_1": last, "diff": np.ones(n, np.int64), "_new": np.arange(n) >= n - 5})
    out = reduce_delta(table, ["k"], ["v"], 2, Min("v"))
    assert sum(copies) == n  # one slab: every row once, not 51 slabs of them
    # the same answer from the grid
    monkeypatch.setattr(rf, "MAX_SLABS", 0)
    monkeypatch.setattr(rf, "SLAB_ROW_COST", float("inf"))
    assert reduce_delta(table, ["k"], ["v"], 2, Min("v")).equals(out)
