"""A join side prepared once for many rounds (ops/operators/join_static.py) against a plain
pairing of updates (no Spark).

The reference pairs every change of a round (all at the current iteration) with every
update of the static side of the same key, at the join of their times with the product of
their diffs, and sums them: the definition of the join's output changes for that round. It
imports nothing of ``ops``.
"""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from ops.operators.join_static import StaticSide

TCOLS = ["time_0", "time_1"]


def reference(changes, static, static_left: bool):
    """changes/static: lists of (key, value, (t0, t1), diff); output keyed (key, left value,
    right value, time)."""
    out = Counter()
    for kc, vc, tc, dc in changes:
        for ks, vs, ts, ds in static:
            if kc != ks:
                continue
            t = tuple(max(a, b) for a, b in zip(tc, ts))
            left, right = (vs, vc) if static_left else (vc, vs)
            out[(kc, left, right, t)] += dc * ds
    return {k: v for k, v in out.items() if v}


def table(rows, value_column: str | None, key_type=pa.int64()) -> pa.Table:
    cols = {"k": pa.array([r[0] for r in rows], key_type)}
    if value_column:
        cols[value_column] = pa.array([r[1] for r in rows], pa.string())
    for i, c in enumerate(TCOLS):
        cols[c] = pa.array([r[2][i] for r in rows], pa.int64())
    cols["diff"] = pa.array([r[3] for r in rows], pa.int64())
    return pa.table(cols)


def as_dict(out: pa.Table) -> dict:
    got = {}
    for r in out.to_pylist():
        k = (r["k"], r.get("a"), r.get("b"), (r["time_0"], r["time_1"]))
        assert k not in got, f"not consolidated: {k}"
        assert r["diff"] != 0
        got[k] = r["diff"]
    return got


def random_rows(rng, n, keys, values, times, iterations, base):
    return [(rng.choice(keys), rng.choice(values), (base + rng.randrange(times), rng.choice(iterations)),
             rng.choice([-2, -1, 1, 1, 1, 2])) for _ in range(n)]


@pytest.mark.parametrize("static_left", [False, True])
@pytest.mark.parametrize("with_values", ["both", "static only", "changes only", "neither"])
@pytest.mark.parametrize("seed", range(8))
def test_a_round_of_changes_against_the_prepared_side_equals_every_pair(static_left, with_values, seed):
    rng = random.Random(seed * 31 + static_left * 7 + len(with_values))
    iteration = rng.randrange(1, 5)
    base = rng.choice([0, -50, 1_700_000_000])  # times anywhere: epochs, negatives
    static = random_rows(rng, rng.randrange(0, 80), [1, 2, 3, 5, 8], ["p", "q", None], 12,
                         range(iteration + 1), base)
    changes = random_rows(rng, rng.randrange(1, 50), [1, 2, 3, 4, 5, -7], ["x", "y", None], 12, [iteration], base)
    s_col, c_col = ("a", "b") if static_left else ("b", "a")
    s_has = with_values in ("both", "static only")
    c_has = with_values in ("both", "changes only")
    if not s_has:
        static = [(k, None, t, d) for k, _, t, d in static]
    if not c_has:
        changes = [(k, None, t, d) for k, _, t, d in changes]
    side = StaticSide.of(table(static, s_col if s_has else None), "k", [s_col] if s_has else [], TCOLS, static_left)
    got = side.pairs(table(changes, c_col if c_has else None), [c_col] if c_has else [], TCOLS, iteration)
    assert as_dict(got) == reference(changes, static, static_left)
    left_has, right_has = (s_has, c_has) if static_left else (c_has, s_has)
    assert got.column_names == ["k"] + ["a"] * left_has + ["b"] * right_has + TCOLS + ["diff"]


def test_a_change_meets_a_static_row_at_the_time_it_appears_once_and_a_removed_row_not_at_all():
    # static right: q appears at 5 and goes at 9; a left change at 5 meets it (at or before),
    # a left row alive from 3 meets its appearance at 5 once (not a second time at 5), and a
    # left change at 9 no longer meets it
    static = [(1, "q", (5, 0), 1), (1, "q", (9, 0), -1)]
    changes = [(1, "x", (3, 2), 1), (1, "y", (5, 2), 1), (1, "z", (9, 2), 1)]
    side = StaticSide.of(table(static, "b"), "k", ["b"], TCOLS, left=False)
    got = as_dict(side.pairs(table(changes, "a"), ["a"], TCOLS, 2))
    assert got == reference(changes, static, False) == {
        (1, "x", "q", (5, 2)): 1, (1, "x", "q", (9, 2)): -1, (1, "y", "q", (5, 2)): 1, (1, "y", "q", (9, 2)): -1}


def test_null_keys_and_times_too_wide_to_pack_are_left_to_the_sweep():
    assert StaticSide.of(table([(None, "p", (0, 0), 1)], "b"), "k", ["b"], TCOLS, left=False) is None
    side = StaticSide.of(table([(1, "p", (0, 0), 1)], "b"), "k", ["b"], TCOLS, left=False)
    assert side.pairs(table([(None, "x", (0, 1), 1)], "a"), ["a"], TCOLS, 1) is None
    wide = StaticSide.of(table([(1, "p", (-2 ** 62, 0), 1), (2, "p", (0, 0), 1)], "b"), "k", ["b"], TCOLS, False)
    assert wide.pairs(table([(1, "x", (2 ** 62, 1), 1)], "a"), ["a"], TCOLS, 1) is None
