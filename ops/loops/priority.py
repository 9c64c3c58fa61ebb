"""Prioritized fixed points: records brought into a loop at an iteration of their own.

Differential dataflow's ``enter_at``: a collection entered into a loop normally has its
updates at iteration 0; entered *at* an expression, an update of the outer collection at
time ``t`` is at ``(t, p)`` where ``p`` is the expression on its row. Accumulated at
``(t, k)`` the entered collection is the outer one at ``t`` restricted to rows with
``p <= k``: the same collection once ``k`` is past every priority, so a body whose fixed
point does not depend on the order of arrival (monotone ones: min-label propagation,
shortest paths) reaches the same fixed point — records just arrive in priority order.

A loop variable may be prioritized the same way (``iterate(priority=…)``): its initial
records enter at their priority, and a record it gets back from the body enters at the
next iteration or at its priority, whichever is later (``delay_at``). Each is a map of
times per record, monotone in the iteration, so it is linear and commutes with
accumulation: the loop's differential machinery is unchanged.

Rounds follow the iterations that hold pending updates (``ops/loops/rounds.py``), so distinct
priorities cost rounds only where records are.

A record whose priority is null or negative is refused. The check costs no job of its
own: such a record's iteration is set to a negative mark (the value itself, or
``NULL_MARK``), and the job that finds a loop's next iteration sees it first.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ops.dataflow.graph import Node, node_priority
from ops.errors import PipelineError
from ops.operators.linear import expr

NULL_MARK = -(2 ** 63)  # the iteration of a record whose priority is null
INTEGRAL = {"tinyint", "smallint", "int", "bigint"}


def priority_column(df: DataFrame, priority, where: str) -> Column:
    """The priority expression as a long column; a non-integer expression is refused."""
    col = expr(priority)
    kind = df.select(col.alias("_priority")).dtypes[0][1]
    if kind not in INTEGRAL:
        raise PipelineError(f"{where}: the iteration {_show(priority)} is {kind}; it must be an integer "
                            f"(e.g. CAST(... AS BIGINT))")
    return col.cast("long")


def _marked(p: Column, otherwise: Column) -> Column:
    return F.when(p.isNull(), F.lit(NULL_MARK)).when(p < 0, p).otherwise(otherwise)


def enter_at_frame(df: DataFrame, last: str, priority, where: str) -> DataFrame:
    """Entered updates (iteration coordinate ``last``) moved to their priority."""
    p = priority_column(df, priority, where)
    return df.withColumn(last, _marked(p, p))


def delay_at(df: DataFrame, last: str, priority, where: str) -> DataFrame:
    """A variable's feedback: to the next iteration, or to the record's priority if later."""
    p = priority_column(df, priority, where)
    return df.withColumn(last, _marked(p, F.greatest(F.col(last) + 1, p)))


def check_iteration(value: int | None, loop: str, node: Node) -> None:
    """Refuse a pending iteration below 0: a record with a null or negative priority."""
    if value is None or value >= 0:
        return
    shown = "null" if value == NULL_MARK else str(value)
    what = "priority" if node.op == "variable" else "enter_at iteration"
    raise PipelineError(f"loop {loop}: {node.describe()}: a record's {what} {_show(node_priority(node))} "
                        f"is {shown}; it must be a non-negative integer")


def _show(priority) -> str:
    return repr(priority) if isinstance(priority, str) else str(priority)
