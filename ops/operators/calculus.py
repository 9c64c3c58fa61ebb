"""Evaluating calculus: ``differentiate``, ``moments`` and ``integrate`` on update frames.

What the operators mean, the moment-time encoding (``alt(t) = 2t``, ``neu(t) = 2t + 1``)
and the rules a pipeline must follow are in ops/dataflow/calculus.py. Each operator here
only changes times, so it is linear: a change maps to a change, with no state.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.dataflow.calculus import MAX_TIME, check_domains
from ops.dataflow.graph import Node
from ops.errors import PipelineError
from ops.operators.context import AT, EvalContext


def check_moment_time(n: Node, ctx: EvalContext, runtime) -> None:
    """Before evaluating a node in moment time: the pipeline's time domains are consistent
    and the node's times have one coordinate."""
    check_domains(runtime.p)
    if ctx.d != 1:
        what = "as_of_join" if n.op.startswith("as_of") else "differentiate"
        inside = " (inside a loop, times gain an iteration coordinate)" if n.scope is not None else ""
        raise PipelineError(f"{n.describe()}: {what} needs d = 1 (times of one coordinate); "
                            f"this collection's times have {ctx.d} coordinates{inside}")


def refuse_from_scratch(n: Node, ctx: EvalContext, what: str) -> None:
    """verify evaluates every time from the inputs' collections at that time alone."""
    if AT in ctx.extra:
        raise PipelineError(f"{n.describe()}: verify cannot recompute {what} from scratch: it depends on when "
                            f"each input change happened, not only on the inputs at each time")


def differentiate_changes(n: Node, ctx: EvalContext, ins: list, runtime) -> DataFrame | None:
    check_moment_time(n, ctx, runtime)
    refuse_from_scratch(n, ctx, "a differentiated collection")
    return None if ins[0] is None else differentiate_frame(ins[0])


def moments_changes(n: Node, ctx: EvalContext, ins: list, runtime) -> DataFrame | None:
    check_moment_time(n, ctx, runtime)
    return None if ins[0] is None else moments_frame(ins[0], n.args.get("neu", False))


def integrate_changes(n: Node, ctx: EvalContext, ins: list, runtime) -> DataFrame | None:
    check_moment_time(n, ctx, runtime)
    return None if ins[0] is None else integrate_frame(ins[0])


def _checked_time(col) -> "F.Column":
    return F.when(col > F.lit(MAX_TIME), F.raise_error(F.lit(
        f"a time is {MAX_TIME + 1} or more: too large for moment time (differentiate doubles times)"))
    ).otherwise(col)


def differentiate_frame(df: DataFrame) -> DataFrame:
    """Each update at its ``alt`` moment, and retracted at its ``neu`` moment."""
    t = _checked_time(F.col("time"))
    cols = [c for c in df.columns if c not in ("time", "diff")]
    alt = df.select(*cols, (t * 2).alias("time"), F.col("diff"))
    neu = df.select(*cols, (t * 2 + 1).alias("time"), (-F.col("diff")).alias("diff"))
    return alt.unionByName(neu)


def moments_frame(df: DataFrame, neu: bool) -> DataFrame:
    """An ordinary collection in moment time: every update at its ``alt`` (or ``neu``) moment."""
    t = _checked_time(F.col("time")) * 2 + (1 if neu else 0)
    return df.withColumn("time", t).select(*df.columns)


def integrate_frame(df: DataFrame) -> DataFrame:
    """Keep the updates at ``alt`` moments, at their time; drop those at ``neu`` moments."""
    kept = df.filter(F.col("time").bitwiseAND(F.lit(1)) == 0)
    return kept.withColumn("time", F.shiftright(F.col("time"), 1)).select(*df.columns)
