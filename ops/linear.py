"""Linear operators: they act on each update alone, so a change maps to a change.

``select``/``map``, ``filter``, ``flat_map`` (explode), ``concat``, ``negate`` and
``consolidate`` need no state: the same code runs on this run's updates.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ops.context import EvalContext


def expr(e) -> Column:
    """A Spark column from a SQL expression string, a column name, or a Column."""
    return e if isinstance(e, Column) else F.expr(e)


def select(ctx: EvalContext, df: DataFrame, columns: list, exprs: dict) -> DataFrame:
    cols = [F.col(c) if isinstance(c, str) else c for c in columns]
    cols += [expr(e).alias(name) for name, e in exprs.items()]
    return df.select(*cols, *ctx.tail())


def filter_(ctx: EvalContext, df: DataFrame, condition) -> DataFrame:
    return df.filter(expr(condition))


def flat_map(ctx: EvalContext, df: DataFrame, column: str, array_expr, keep: list | None) -> DataFrame:
    if keep is None:
        keep = [c for c in ctx.data_columns(df) if c != column]
    return df.select(*keep, F.explode(expr(array_expr)).alias(column), *ctx.tail())


def concat(ctx: EvalContext, frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def negate(ctx: EvalContext, df: DataFrame) -> DataFrame:
    return df.withColumn("diff", -F.col("diff"))


def consolidate(ctx: EvalContext, df: DataFrame) -> DataFrame:
    """Sum the diffs of equal (data, time) and drop zeros."""
    group = ctx.data_columns(df) + ctx.extra + ctx.tcols
    out = df.groupBy(*group).agg(F.sum("diff").alias("diff")).filter(F.col("diff") != 0)
    return out.select(*ctx.data_columns(df), *ctx.tail())
