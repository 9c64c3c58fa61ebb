"""One Python stage per task (ops/spark/python_stage.py): a reduce's kernel and the layer writer
run in one ``mapInArrow``, so a task holds one Python worker rather than two, and the
result is the same as running the two functions one after the other."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ops.spark.python_stage import python_stage, stage_of, then


def _python_stages(frame) -> int:
    plan = frame._jdf.queryExecution().executedPlan().toString()
    return plan.count("MapInArrow")


def _functions():
    """The two functions of the stage, made here so that they ship to Spark's Python
    workers by value (the workers cannot import this test module)."""

    def doubled(batches):
        for b in batches:
            yield pa.record_batch({"x": b.column(0), "y": pc.multiply(b.column(0), 2), "dropped": b.column(0)})

    def summed(batches):
        """The sum of ``y`` in a task, and the columns the task's batches had."""
        total, names = 0, set()
        for b in batches:
            total += pc.sum(b.column("y")).as_py() or 0
            names.add(",".join(b.schema.names))
        yield pa.record_batch({"total": [total], "columns": [";".join(sorted(names))]})

    return doubled, summed


def test_the_next_function_runs_in_the_same_python_stage_on_the_stage_columns(spark):
    _doubled, _summed = _functions()
    source = spark.range(0, 1000, numPartitions=2).selectExpr("id AS x").repartition(2, "x")
    frame = python_stage(source, _doubled, "x long, y long, dropped long", ["x", "y"])
    assert frame.columns == ["x", "y"]  # an ordinary frame of the kept columns
    fused = then(stage_of(frame), _summed, "total long, columns string")
    separate = frame.mapInArrow(_summed, "total long, columns string")
    assert _python_stages(fused) == 1 and _python_stages(separate) == 2
    # the same answer: the sum of 2x over 0..999, per task, adds up to 999,000
    fused_rows, separate_rows = fused.collect(), separate.collect()
    assert sum(r["total"] for r in fused_rows) == sum(r["total"] for r in separate_rows) == 999_000
    # the next function sees only the stage's columns, as it would reading the frame
    assert {r["columns"] for r in fused_rows if r["columns"]} == {"x,y"}


def test_an_operator_applied_after_the_stage_makes_an_ordinary_frame(spark):
    _doubled, _ = _functions()
    source = spark.range(0, 10).selectExpr("id AS x")
    frame = python_stage(source, _doubled, "x long, y long, dropped long", ["x", "y"])
    assert stage_of(frame) is not None
    assert stage_of(frame.filter("x > 3")) is None
    assert stage_of(frame.select("x", "y")) is None
