"""The join family: ``join``, ``semijoin`` (and ``antijoin``, built from it).

Join is bilinear: the pairs a run adds are ``dA ⋈ (A's partner old + new) + A_old ⋈ dB``.
Each pair's time is the join of the two times and its diff the product of the diffs, so
many distinct times in one run need no special care. Old updates are read from the
partners' arrangements for the touched keys only (see ops/operators/arrangement.py). Keys compare
null-safely: a null key is a value like any other, as in differential dataflow.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.operators.context import EvalContext
from ops.operators.linear import union_all


def _pairs(ctx: EvalContext, left: DataFrame, right: DataFrame, on: list[str],
           right_cols: list[str]) -> DataFrame:
    """Join two update frames on ``on`` (+ extra columns): times join, diffs multiply."""
    keys = on + ctx.extra
    r = right.select(*[F.col(k).alias(f"_r_{k}") for k in keys],
                     *[F.col(c) for c in right_cols],
                     *[F.col(t).alias(f"_r_{t}") for t in ctx.tcols],
                     F.col("diff").alias("_r_diff"))
    cond = None
    for k in keys:
        c = F.col(k).eqNullSafe(F.col(f"_r_{k}"))
        cond = c if cond is None else cond & c
    j = left.join(r, cond, "inner")
    left_cols = ctx.data_columns(left)
    times = [F.greatest(F.col(t), F.col(f"_r_{t}")).alias(t) for t in ctx.tcols]
    return j.select(*[F.col(c) for c in left_cols], *[F.col(c) for c in right_cols],
                    *[F.col(x) for x in ctx.extra], *times,
                    (F.col("diff") * F.col("_r_diff")).alias("diff"))


def join_changes(ctx: EvalContext, on: list[str], d_left: DataFrame | None, d_right: DataFrame | None,
                 left_arr, right_arr, *, semi: bool = False) -> DataFrame | None:
    """The new output of ``left ⋈ right`` given both sides' new updates and arrangements.

    With ``semi`` only the left columns are kept (the right side contributes its key's
    multiplicity), which is ``semijoin``.
    """
    def right_view(df: DataFrame) -> DataFrame:
        return df.select(*on, *ctx.tail()) if semi else df

    def right_cols(df: DataFrame) -> list[str]:
        return [] if semi else [c for c in ctx.data_columns(df) if c not in on]

    parts = []
    if d_left is not None:
        partners = [] if d_right is None else [right_view(d_right)]
        if right_arr is not None:
            old = right_arr.old_for_keys(ctx, d_left, on)
            if old is not None:
                partners.append(right_view(old))
        r = union_all(partners)
        if r is not None:
            parts.append(_pairs(ctx, d_left, r, on, right_cols(r)))
    if d_right is not None and left_arr is not None:
        old_left = left_arr.old_for_keys(ctx, d_right, on)
        if old_left is not None:
            r = right_view(d_right)
            parts.append(_pairs(ctx, old_left, r, on, right_cols(r)))
    return union_all(parts)
