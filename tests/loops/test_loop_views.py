"""Loop views (ops/operators/arrangement.py): a collection's old updates inside a loop, advanced to
the loop's frontier, consolidated and hash-partitioned by the key.

Checked against a plain computation over the recorded updates (advance the iteration to
the floor, sum equal updates, drop zeros), through folds round after round, a floor that
goes back (an inner loop starting again: the view is rebuilt from the record), and a
compaction between batches. The reduce reading a view shuffles only its new updates.
"""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from ops.reduce import kernel as rk
from ops.operators.arrangement import LiveArrangement
from ops.operators.context import EvalContext
from ops.reduce.operator import reduce_changes

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("time_0", pa.int64()), ("time_1", pa.int64()),
                    ("diff", pa.int64())])


def random_updates(rng: random.Random, n: int) -> list[tuple]:
    return [(rng.randrange(6), rng.choice("ab"), rng.randrange(5), rng.randrange(6), rng.choice((-1, 1, 2)))
            for _ in range(n)]


def frame(spark, rows: list[tuple]):
    cols = list(zip(*rows)) if rows else [[]] * len(SCHEMA)
    return spark.createDataFrame(pa.table([pa.array(c, f.type) for c, f in zip(cols, SCHEMA)], schema=SCHEMA))


def expected_view(rows: list[tuple], floor: int, first_time: int = 0) -> Counter:
    acc = Counter()
    for k, v, t0, t1, diff in rows:
        acc[(k, v, max(t0, first_time), max(t1, floor))] += diff
    return Counter({r: m for r, m in acc.items() if m})


def found(df) -> Counter:
    if df is None:
        return Counter()
    acc = Counter()
    for r in df.collect():
        acc[(r["k"], r["v"], r["time_0"], r["time_1"])] += r["diff"]
    assert all(m != 0 for m in acc.values())
    return acc


@pytest.fixture
def two_partitions(spark):
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    return spark


def test_a_view_equals_the_record_advanced_to_the_floor_round_after_round(two_partitions):
    spark = two_partitions
    rng = random.Random(4)
    live = LiveArrangement()
    recorded = []
    for floor in (0, 1, 2, 4, 1, 3):  # 4 -> 1: an inner loop starting again
        ctx = EvalContext(spark, 2, floor=(floor,))
        view = live.view(ctx, ["k"])
        assert found(view) == expected_view(recorded, floor), f"floor {floor}"
        rows = random_updates(rng, 25)
        live.record(frame(spark, rows))
        recorded += rows
    live.advance_processed(3)  # between batches of a run: later times are >= 3
    ctx = EvalContext(spark, 2, floor=(2,))
    assert found(live.view(ctx, ["k"])) == expected_view(recorded, 2, first_time=3)


def test_a_reduce_over_a_view_shuffles_only_its_new_updates_and_agrees_with_a_full_shuffle(two_partitions):
    spark = two_partitions
    rng = random.Random(9)
    live = LiveArrangement()
    for _ in range(3):
        live.record(frame(spark, random_updates(rng, 40)))
    ctx = EvalContext(spark, 2, floor=(3,))
    view = live.view(ctx, ["k"])
    new = frame(spark, [(k, v, t0, 3, diff) for k, v, t0, _, diff in random_updates(rng, 15)])
    fast = reduce_changes(ctx, new, view, ["k"], rk.Count(), old_partitioned=True)
    plan = fast._jdf.queryExecution().executedPlan().toString()
    assert plan.count("Exchange") == 1 and plan.index("Union") < plan.index("Exchange"), plan
    slow = reduce_changes(ctx, new, view, ["k"], rk.Count())
    slow_plan = slow._jdf.queryExecution().executedPlan().toString()
    assert slow_plan.index("Exchange") < slow_plan.index("Union"), slow_plan  # the whole union shuffled
    rows = lambda df: sorted(tuple(r) for r in df.collect())  # noqa: E731
    assert rows(fast) == rows(slow) and rows(fast)
