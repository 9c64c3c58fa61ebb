"""Sums of doubles and decimals are exact and order-free, so a reduce retracts exactly
what it wrote: random streams of doubles of mixed magnitudes (and decimals) with
retractions, many times per run, several runs and compaction between, at d = 1 and 2.

A sum of doubles rounded at each addition depends on the order of its terms; a run that
recomputes an earlier output from the stored history (merged and compacted in between)
then writes a retraction that differs in the last bit and leaves a phantom row of count
-1 beside a stale +1. The reference here is exact (fractions), rounded once: the engine
must give the correctly rounded sum at every time, and no row of another count than 1.
"""

from __future__ import annotations

import random
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

from ops import exact_sum
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench, random_updates, run_since, schedule

VS = pa.schema([("k", pa.string()), ("x", pa.float64()), ("m", pa.decimal128(18, 2)),
                ("big", pa.decimal128(38, 10))])

SUMS = """
def pipeline(p):
    v = p.input("vs")
    p.output("sum_x", v.sum(by="k", column="x", name="total"))
    p.output("avg_x", v.avg(by="k", column="x", name="mean"))
    p.output("sum_m", v.sum(by="k", column="m", name="money"))
    p.output("sum_big", v.sum(by="k", column="big", name="total"))
"""


def vs_row(rng):
    x = None if rng.random() < 0.05 else rng.choice((-1, 1)) * rng.random() * 10.0 ** rng.randint(-12, 15)
    m = Decimal(rng.randrange(-10 ** 17, 10 ** 17)).scaleb(-2)
    big = Decimal(rng.randrange(-10 ** 26, 10 ** 26)).scaleb(-10)
    return (rng.choice("ab"), x, m, big)


def _sum(c: R.Coll, column: str, name: str, exact=Fraction, done=float) -> R.Coll:
    """Per key the exact sum of ``column`` (nulls add 0), rounded once by ``done``."""
    def f(vals, values):
        i = values.index(column)
        return {(done(sum((exact(v[i]) * m for v, m in vals.items() if v[i] is not None), exact(0))),): 1}
    return R.reduce(c, "k", f, [name])


def _avg(c: R.Coll) -> R.Coll:
    """SQL's mean per key present: the exact sum of the non-null x rounded once, over their
    count; NULL when there is none (all null, or multiplicities that cancel)."""
    out = R.Coll(["k", "mean"])
    groups: dict = {}
    for row, m in c.rows.items():
        s, n = groups.get(row[0], (Fraction(0), 0))
        groups[row[0]] = (s, n) if row[1] is None else (s + Fraction(row[1]) * m, n + m)
    for k, (s, n) in groups.items():
        out.add((k, float(s) / n if n else None), 1)
    return out


def reference(i):
    vs = i["vs"]
    return {"sum_x": _sum(vs, "x", "total"), "avg_x": _avg(vs),
            "sum_m": _sum(vs, "m", "money", Decimal, lambda v: v),
            "sum_big": _sum(vs, "big", "total", Decimal, lambda v: v)}


@pytest.mark.parametrize("d", [1, 2])
def test_sums_of_doubles_and_decimals_retract_exactly_what_they_wrote(tmp_path, d):
    bench = Bench(tmp_path, d=d)
    path = bench.pipeline("sums", SUMS)
    rng = random.Random(f"exact-sums-{d}")
    pool: list = []
    for r in range(3):
        times, upper = schedule(d, r)
        bench.ingest("vs", VS, random_updates(rng, vs_row, times, 120, pool), upper=upper)
        assert not bench.run(path).nothing_to_do
        bench.check(path, reference, ["sum_x", "avg_x", "sum_m", "sum_big"], verify=r == 2)
        for out in ("sum_x", "sum_m"):  # a phantom row of count -1 beside a stale +1: counts other than 1
            now = bench.output_at(out, (10 ** 6,) * d)
            assert set(now.rows.values()) <= {1}, (out, now.rows)
        if r < 2:
            bench.advance_and_compact(run_since(d, r), full=r % 2 == 1)


def test_an_exact_sum_does_not_depend_on_the_order_of_its_terms():
    """The same multiset in any order, split in any parts summed apart: the same double,
    the correctly rounded sum (specials as IEEE adds them: +inf and -inf give NaN)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(3000) * 10.0 ** rng.integers(-300, 290, 3000)
    x[:4] = [5e-324, -5e-324, 1e300, 3e-310]
    diff = rng.integers(-3, 4, 3000)
    w = exact_sum.weights(pa.array(x), pa.float64(), diff)
    want = float(sum(Fraction(float(v)) * int(m) for v, m in zip(x, diff)))
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(x))
        cuts = np.sort(np.random.default_rng(seed).choice(len(x), 5, replace=False))
        parts = [p.sum() for p in np.split(w[order], cuts)]
        total = np.array([sum(parts)], object)
        assert exact_sum.values(total, pa.float64()).to_pylist() == [want]
    specials = exact_sum.weights(pa.array([float("inf"), float("-inf"), float("nan"), 2.5]), pa.float64(),
                                 np.array([1, 1, 1, 1]))
    got = lambda idx: exact_sum.values(np.array([specials[idx].sum()], object), pa.float64()).to_pylist()[0]  # noqa: E731
    assert got([0, 3]) == float("inf") and got([1, 3]) == float("-inf") and got([3]) == 2.5
    assert got([0, 1]) != got([0, 1]) and got([2, 3]) != got([2, 3])  # NaN


def test_a_sum_of_decimals_is_exact_and_past_38_digits_is_refused():
    t = pa.decimal128(38, 2)
    w = exact_sum.weights(pa.array([Decimal("9999999999999999.99"), Decimal("-0.01"), None], pa.decimal128(18, 2)),
                          t, np.array([3, 1, 1]))
    assert exact_sum.values(np.array([w.sum()], object), t).to_pylist() == [Decimal("29999999999999999.96")]
    huge = np.array([10 ** 38], object)
    with pytest.raises(exact_sum.DecimalOverflow, match=r"does not fit DECIMAL\(38,2\)"):
        exact_sum.values(huge, t)


def _agg_rows(values, counts, groups, t: pa.DataType) -> pa.Table:
    return pa.table({"_group": pa.array(groups, pa.int64()), "c": pa.array(values, t),
                     "_count": pa.array(counts, pa.int64())})


@pytest.mark.parametrize("t, values", [
    (pa.int64(), [2 ** 53 + 1, 2 ** 62, -(2 ** 53 + 1), 7, None, 3]),
    (pa.float64(), [1e200, 0.1, -1e200, 1.0 / 3, None, -2.5]),
    (pa.float32(), [3e38, 16777216.0, -1.25, 0.1, None, 1e-30]),
    (pa.decimal128(38, 10), [Decimal("9999999999999999999999999.9999999999"), Decimal("-0.0000000001"),
                             Decimal("1234567890123456.0123456789"), None, Decimal("0.1"), Decimal("-3")]),
])
def test_agg_sums_and_means_are_exact_rounded_once_in_any_order(t, values):
    """``agg``'s sum and avg of a group: the exact sum, and the exact mean rounded once
    to a double (an int64 beyond 2^53 and doubles of mixed magnitudes lose nothing first)."""
    from ops.dataflow.reducers import Agg, Aggregate
    reducer = Agg({"total": Aggregate("sum", "c"), "mean": Aggregate("avg", "c")})
    counts = [1, 2, 3, -1, 1, 2]
    stored = pa.array(values, t).to_pylist()  # float32 rounds what it holds
    known = [(v, m) for v, m in zip(stored, counts) if v is not None]
    exact = sum(Fraction(v) * m for v, m in known)
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(values))
        rows = _agg_rows([values[i] for i in order], [counts[i] for i in order], [0] * len(values), t)
        out = reducer(rows).to_pylist()[0]
        assert out["mean"] == float(exact / sum(m for _, m in known))
        assert Fraction(out["total"]) == exact if not pa.types.is_floating(t) else out["total"] == float(exact)


def test_agg_counts_distinct_values_as_sql_groups_them():
    """-0.0 is 0.0 and every NaN is one value, as in ``GROUP BY``; a group whose values
    cancel has a NULL mean."""
    from ops.dataflow.reducers import Agg, Aggregate
    nan, other_nan = float("nan"), -float("nan")
    rows = _agg_rows([0.0, -0.0, nan, other_nan, 1.0, 2.0, None], [1, 2, 1, 1, 1, 1, -1], [0, 0, 0, 0, 0, 1, 1],
                     pa.float64())
    out = Agg({"nd": Aggregate("count_distinct", "c"), "mean": Aggregate("avg", "c")})(rows).to_pylist()
    assert [r["nd"] for r in out] == [3, 1]
    assert out[1]["mean"] == 2.0
    cancel = _agg_rows([5.0, 5.0], [1, -1], [0, 0], pa.float64())
    assert Agg({"mean": Aggregate("avg", "c")})(cancel).to_pylist()[0]["mean"] is None
