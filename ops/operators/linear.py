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
    cols += [expr(exact_negations(df, e)).alias(name) for name, e in exprs.items()]
    return df.select(*cols, *ctx.tail())


#: Spark negates a decimal (``-x``, ``negative``, ``abs``) through Scala's BigDecimal, which
#: rounds to 34 digits: a decimal of more digits comes out rounded, or refused as out of range.
EXACT_NEGATION_DIGITS = 34
_NEGATIONS = ("UnaryMinus", "Abs")


def _wide_decimals(df: DataFrame) -> bool:
    """Whether ``df`` has a decimal column of more than :data:`EXACT_NEGATION_DIGITS` digits."""
    from pyspark.sql.types import DecimalType
    return any(isinstance(f.dataType, DecimalType) and f.dataType.precision > EXACT_NEGATION_DIGITS
               for f in df.schema.fields)


def exact_negations(df: DataFrame, e):
    """SQL expression ``e`` with each ``-x``, ``negative(x)`` and ``abs(x)`` of a decimal
    ``x`` of more than :data:`EXACT_NEGATION_DIGITS` digits written as an exact negation:
    ``x``'s digits as text with the sign changed, cast back to ``x``'s type (Spark's casts
    of a decimal to a string and back are exact). Other expressions come back as they are;
    a negation left (a Column, a form not recognised) is refused by :func:`inexact_negation`."""
    if not isinstance(e, str) or not any(m in e.lower() for m in ("-", "abs", "negative")) or \
            not _wide_decimals(df):
        return e
    import sqlglot
    from pyspark.sql.types import DecimalType
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(e, read="spark")
    except sqlglot.errors.SqlglotError:
        return e  # Spark says what is wrong with it
    changed = False
    for node in reversed(list(tree.find_all(exp.Neg, exp.Negative, exp.Abs))):  # breadth first: inner ones last
        x = node.this.sql("spark")
        try:
            t = df.select(F.expr(x)).schema.fields[0].dataType
        except Exception:  # noqa: BLE001 - not an expression of df's columns alone (a lambda's variable)
            continue
        if not (isinstance(t, DecimalType) and t.precision > EXACT_NEGATION_DIGITS):
            continue
        changed = True
        text = f"CAST(({x}) AS STRING)"
        other = text if isinstance(node, exp.Abs) else f"concat('-', {text})"  # x >= 0
        exact = sqlglot.parse_one(f"CAST(IF(({x}) < 0, substr({text}, 2), {other}) "
                                  f"AS DECIMAL({t.precision}, {t.scale}))", read="spark")
        tree = exact if node is tree else tree
        node.replace(exact)
    return tree.sql("spark") if changed else e


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
    return df.filter(expr(exact_negations(df, condition)))


def flat_map(ctx: EvalContext, df: DataFrame, column: str, array_expr, keep: list | None) -> DataFrame:
    if keep is None:
        keep = [c for c in ctx.data_columns(df) if c != column]
    return df.select(*keep, F.explode(expr(exact_negations(df, array_expr))).alias(column), *ctx.tail())


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
