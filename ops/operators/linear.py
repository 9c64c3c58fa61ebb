"""Linear operators: they act on each update alone, so a change maps to a change.

``select``/``map``, ``filter``, ``flat_map`` (explode), ``concat``, ``negate`` and
``consolidate`` need no state: the same code runs on this run's updates.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ops.operators.context import EvalContext


def expr(e) -> Column:
    """A Spark column from a SQL expression string, a column name, or a Column."""
    return e if isinstance(e, Column) else F.expr(e)


def select(ctx: EvalContext, df: DataFrame, columns: list, exprs: dict) -> DataFrame:
    cols = [F.col(c) if isinstance(c, str) else c for c in columns]
    cols += [expr(e).alias(name) for name, e in exprs.items()]
    return df.select(*cols, *ctx.tail())


#: Spark negates a decimal (``-x``, ``negative``, ``abs``) through Scala's BigDecimal, which
#: rounds to 34 digits: a decimal of more digits comes out rounded, or refused as out of range.
EXACT_NEGATION_DIGITS = 34
_NEGATIONS = ("UnaryMinus", "Abs")


def inexact_negation(df: DataFrame, out: DataFrame) -> str | None:
    """The SQL of an expression of ``out`` (computed from ``df``) that negates a decimal of
    more than :data:`EXACT_NEGATION_DIGITS` digits, or None. The expressions are walked only
    when ``df`` has such a column (a few Py4J calls a node)."""
    from pyspark.sql.types import DecimalType
    if not any(isinstance(f.dataType, DecimalType) and f.dataType.precision > EXACT_NEGATION_DIGITS
               for f in df.schema.fields):
        return None
    todo = list(_seq(out._jdf.queryExecution().analyzed().expressions()))
    while todo:
        e = todo.pop()
        if e.getClass().getSimpleName() in _NEGATIONS:
            t = e.dataType()
            if t.getClass().getSimpleName() == "DecimalType" and t.precision() > EXACT_NEGATION_DIGITS:
                return e.sql()
        todo += _seq(e.children())
    return None


def _seq(seq) -> list:
    """A Scala Seq (through Py4J) as a list."""
    return [seq.apply(i) for i in range(seq.size())]


def filter_(ctx: EvalContext, df: DataFrame, condition) -> DataFrame:
    return df.filter(expr(condition))


def flat_map(ctx: EvalContext, df: DataFrame, column: str, array_expr, keep: list | None) -> DataFrame:
    if keep is None:
        keep = [c for c in ctx.data_columns(df) if c != column]
    return df.select(*keep, F.explode(expr(array_expr)).alias(column), *ctx.tail())


def concat(ctx: EvalContext, frames: list[DataFrame]) -> DataFrame:
    return union_all(frames)


def union_all(frames: list[DataFrame | None]) -> DataFrame | None:
    """The union (by column name) of the frames that are present; None if none is."""
    present = [f for f in frames if f is not None]
    if not present:
        return None
    out = present[0]
    for f in present[1:]:
        out = out.unionByName(f.select(*out.columns))
    return out


def union_coalesced(frames: list[DataFrame]) -> DataFrame | None:
    """``union_all`` without a task per frame and partition: a union of k frames would
    otherwise cost k times the tasks of every stage that reads it."""
    from ops.spark.session import partitions
    out = union_all(frames)
    return out if out is None or len(frames) == 1 else out.coalesce(partitions(out.sparkSession))


def negate(ctx: EvalContext, df: DataFrame) -> DataFrame:
    return df.withColumn("diff", -F.col("diff"))


def consolidate(ctx: EvalContext, df: DataFrame) -> DataFrame:
    """Sum the diffs of equal (data, time) and drop zeros."""
    return advance_and_sum(df.select(*ctx.data_columns(df), *ctx.tail()), {})


def advance_and_sum(df: DataFrame, floors: dict[str, int]) -> DataFrame:
    """Time columns raised to at least ``floors`` (advancing to a frontier of one time),
    then equal updates summed and zeros dropped; the columns keep their order.

    Grouped by every column but ``diff``: Spark sums map-side before its shuffle, and needs
    none when the frame is already partitioned by some of those columns.
    """
    df = df.withColumns({c: F.greatest(F.col(c), F.lit(int(v)).cast("long")) for c, v in floors.items()})
    summed = df.groupBy(*[c for c in df.columns if c != "diff"]).agg(F.sum("diff").alias("diff"))
    return summed.filter(F.col("diff") != 0).select(*df.columns)
