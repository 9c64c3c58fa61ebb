"""The join's sweep kernel against a plain pairing of updates (no Spark).

The reference pairs every update of the left side with every update of the right side of
the same key (null keys equal), at the join of their times with the product of their diffs,
keeps the pairs with at least one new update, and sums them: the definition of a join's
new output. It imports nothing of ``ops``.
"""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from ops.operators.join_sweep import HIST, SIDE, JoinSpec, all_pairs, join_table


def reference(left, right, half=False):
    """left/right: lists of (key, value, time tuple, diff, new)."""
    out = Counter()
    for kl, vl, tl, dl, nl in left:
        for kr, vr, tr, dr, nr in right:
            if kl != kr or not (nl or nr):
                continue
            if half:
                if not all(a <= b for a, b in zip(tr, tl)):
                    continue
                t = tl
            else:
                t = tuple(max(a, b) for a, b in zip(tl, tr))
            out[(kl, vl, vr, t)] += dl * dr
    return {k: v for k, v in out.items() if v}


def table_of(left, right, d, hist=None):
    rows = [(0, u) for u in left] + [(1, u) for u in right]
    cols = {"k": pa.array([u[0] for _, u in rows], pa.int64()),
            "a": pa.array([u[1] if s == 0 else None for s, u in rows], pa.string()),
            "b": pa.array([u[1] if s == 1 else None for s, u in rows], pa.string())}
    names = ["time"] if d == 1 else [f"time_{i}" for i in range(d)]
    for i, c in enumerate(names):
        cols[c] = pa.array([u[2][i] for _, u in rows], pa.int64())
    cols["diff"] = pa.array([u[3] for _, u in rows], pa.int64())
    cols["_new"] = pa.array([u[4] for _, u in rows], pa.bool_())
    cols[SIDE] = pa.array([s for s, _ in rows], pa.int8())
    if hist is not None:
        cols[HIST] = pa.array(hist, pa.bool_())
    return pa.table(cols)


def as_dict(out: pa.Table, d: int) -> dict:
    names = ["time"] if d == 1 else [f"time_{i}" for i in range(d)]
    got = {}
    for r in out.to_pylist():
        k = (r["k"], r["a"], r["b"], tuple(r[c] for c in names))
        assert k not in got, f"not consolidated: {k}"
        assert r["diff"] != 0
        got[k] = r["diff"]
    return got


def random_updates(rng, n, keys, values, d, times, old_share):
    out = []
    for _ in range(n):
        new = rng.random() >= old_share
        t = tuple(rng.randrange(times) for _ in range(d))
        if d == 1 and not new:
            t = (rng.randrange(times // 2),)  # outside loops, old updates precede new ones
        elif d == 1:
            t = (times // 2 + rng.randrange(times - times // 2),)
        k = rng.choice(keys)
        out.append((k, rng.choice(values), t, rng.choice([-2, -1, 1, 1, 2]), new))
    return out


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("seed", range(12))
def test_the_sweep_equals_every_pair_of_updates(d, seed):
    rng = random.Random(seed * 10 + d)
    keys = [1, 2, None] if seed % 3 == 0 else [1, 2, 3, 4]
    left = random_updates(rng, rng.randrange(1, 60), keys, ["x", "y", "z", None], d, 6, 0.4)
    right = random_updates(rng, rng.randrange(1, 60), keys, ["p", "q"], d, 6, 0.4)
    spec = JoinSpec(("k",), ("a",), ("b",), d)
    assert as_dict(join_table(table_of(left, right, d), spec), d) == reference(left, right)


@pytest.mark.parametrize("seed", range(6))
def test_old_updates_at_times_after_new_ones_still_pair_exactly(seed):
    # partially ordered runs: an old update may lie after a new one in the first coordinate
    rng = random.Random(seed)
    left = [(1, rng.choice("xy"), (rng.randrange(5), rng.randrange(3)), rng.choice([-1, 1]), rng.random() < .5)
            for _ in range(30)]
    right = [(1, rng.choice("pq"), (rng.randrange(5), rng.randrange(3)), rng.choice([-1, 1]), rng.random() < .5)
             for _ in range(30)]
    spec = JoinSpec(("k",), ("a",), ("b",), 2)
    assert as_dict(join_table(table_of(left, right, 2), spec), 2) == reference(left, right)


@pytest.mark.parametrize("seed", range(6))
def test_the_half_join_pairs_each_left_change_with_the_right_side_as_of_its_time(seed):
    rng = random.Random(100 + seed)
    left = [(rng.choice([1, 2]), rng.choice("xyz"), (rng.randrange(10, 20),), rng.choice([-1, 1, 2]), True)
            for _ in range(25)]
    right = [(rng.choice([1, 2]), rng.choice("pq"), (rng.randrange(20),), rng.choice([-1, 1]), rng.random() < .5)
             for _ in range(40)]
    spec = JoinSpec(("k",), ("a",), ("b",), 1, half=True)
    assert as_dict(join_table(table_of(left, right, 1), spec), 1) == reference(left, right, half=True)


def test_a_history_row_is_alive_before_every_change_and_pairs_only_with_changes():
    # history: left x+1, right p+1 (both from earlier slices, old); changes: left x-1 at 5, right q+1 at 5
    left = [(1, "x", (0,), 1, False), (1, "x", (5,), -1, True)]
    right = [(1, "p", (0,), 1, False), (1, "q", (5,), 1, True)]
    spec = JoinSpec(("k",), ("a",), ("b",), 1)
    got = as_dict(join_table(table_of(left, right, 1, hist=[True, False, True, False]), spec), 1)
    # x-1 meets p (history) and q (same time); q+1 meets x strictly before 5 (history): x-1·q+1 + x+1·q+1 = 0
    assert got == {(1, "x", "p", (5,)): -1}


def test_a_key_replaced_at_every_time_costs_its_changes():
    # one live value per side replaced at each of 400 times: the pairs before consolidation
    # are a few per time, so this is quick; the product of histories would be 640,000 pairs
    T = 400
    left, right = [], []
    for t in range(T):
        for side, name in ((left, "l"), (right, "r")):
            side.append((1, f"{name}{t}", (t,), 1, True))
            if t:
                side.append((1, f"{name}{t - 1}", (t,), -1, True))
    spec = JoinSpec(("k",), ("a",), ("b",), 1)
    got = as_dict(join_table(table_of(left, right, 1), spec), 1)
    assert got == reference(left, right)
    assert len(got) == 2 * T - 1


@pytest.mark.parametrize("d", [1, 3])
def test_all_pairs_of_two_tables_equal_every_pair(d):
    rng = random.Random(7 + d)
    names = ["time"] if d == 1 else [f"time_{i}" for i in range(d)]

    def table(col, values, n):
        rows = [(rng.choice([1, 2, None]), rng.choice(values), tuple(rng.randrange(4) for _ in range(d)),
                 rng.choice([-1, 1, 3])) for _ in range(n)]
        cols = {"k": pa.array([r[0] for r in rows], pa.int64()), col: pa.array([r[1] for r in rows])}
        cols.update({c: pa.array([r[2][i] for r in rows], pa.int64()) for i, c in enumerate(names)})
        cols["diff"] = pa.array([r[3] for r in rows], pa.int64())
        return rows, pa.table(cols)

    lrows, left = table("a", ["x", "y"], 40)
    rrows, right = table("b", ["p", "q", "r"], 40)
    out = all_pairs(left, right, ["k"], d)
    assert out.column_names == ["k", "a", "b", *names, "diff"]
    expected = reference([(k, v, t, df, True) for k, v, t, df in lrows], [(k, v, t, df, False) for k, v, t, df in rrows])
    assert as_dict(out, d) == expected


@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("budget", [50, 90, 1000])
def test_a_task_over_its_budget_streams_its_keys_through_time_and_stays_exact(d, budget):
    # one hot key with long histories on both sides, a few cold keys, a null key
    from ops.operators.join_task import join_task
    rng = random.Random(budget + d)
    left, right = [], []
    for side, values in ((left, "xyz"), (right, "pq")):
        for _ in range(120):
            k = rng.choice([0, 0, 0, 0, 1, 2, None])
            new = rng.random() < 0.7
            t = tuple(rng.randrange(8) for _ in range(d))
            if d == 1:  # outside loops, old updates precede new ones
                t = (rng.randrange(3),) if not new else (3 + rng.randrange(30),)
            side.append((k, rng.choice(values), t, rng.choice([-1, 1, 1]), new))
    spec = JoinSpec(("k",), ("a",), ("b",), d)
    table = table_of(left, right, d)
    out = pa.Table.from_batches(list(join_task(table.to_batches(max_chunksize=10), spec, budget)),
                                schema=spec.output_schema(table.schema))
    assert as_dict(out, d) == reference(left, right)


def test_a_key_whose_live_rows_exceed_the_budget_is_one_clear_error():
    from ops.operators.join_task import TooManyLiveRows, join_task
    left = [(5, f"v{i}", (i,), 1, True) for i in range(40)]  # 40 rows alive at once
    right = [(5, "p", (i,), 1, True) for i in range(40)]
    spec = JoinSpec(("k",), ("a",), ("b",), 1)
    with pytest.raises(TooManyLiveRows, match=r"live rows of one key .*'k': 5.*DDCLI_REDUCE_TASK_ROWS=10"):
        list(join_task(table_of(left, right, 1).to_batches(max_chunksize=8), spec, 10))


def test_a_task_under_its_budget_sweeps_in_slices_of_whole_times_and_stays_exact(monkeypatch):
    from ops.operators import join_task as jt
    monkeypatch.setattr(jt, "SLICE_ROWS", 16)
    rng = random.Random(5)
    left = [(rng.choice([0, 0, 1, None]), rng.choice("xyz"), (rng.randrange(12),), rng.choice([-1, 1, 1]), True)
            for _ in range(150)]
    right = [(rng.choice([0, 1, 2]), rng.choice("pq"), (rng.randrange(12),), rng.choice([-1, 1]), True)
             for _ in range(150)]
    spec = JoinSpec(("k",), ("a",), ("b",), 1)
    table = table_of(left, right, 1)
    out = pa.Table.from_batches(list(jt.join_task(table.to_batches(), spec, 10_000)),
                                schema=spec.output_schema(table.schema))
    assert as_dict(out, 1) == reference(left, right)
