"""The join family: ``join``, ``semijoin`` (and ``antijoin``, built from it).

Join is bilinear: the pairs a run adds are ``dA ⋈ (A's partner old + new) + A_old ⋈ dB``,
each at the join of its two times with the product of its diffs. Pairing every update of
a key on one side with every update on the other is exact, but costs the product of the
two histories, almost all of which cancel. Instead both sides' updates are partitioned by
the key and each task sweeps its keys' times (``ops/operators/join_sweep.py``): every change meets
the other side's rows alive at its time. One shuffle and one Arrow stage per join, however
many times the run holds; each task holds at most ``DDCLI_REDUCE_TASK_ROWS`` rows and
streams a hot key through time (``ops/operators/join_task.py``).

Old updates: for a small run against stored arrangements each task reads its own keys'
old updates with DuckDB (only new updates are shuffled); otherwise they are read from the
partners' arrangements for the touched keys only (see ops/operators/arrangement.py) and shuffled
with the new ones.

Null keys follow SQL: a row with a null in any key column matches nothing, unless the join
says ``nulls_equal``. Every output pair holds at least one new update, so leaving the new
updates with a null key out of both sides (``matchable``) is enough: an old update whose key
is null then never meets a partner, at any run. The sweep itself compares keys null-safely
(``nulls_equal`` joins, and ``ctx.extra``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from ops.operators.context import EvalContext
from ops.operators.join_sweep import SIDE, JoinSpec
from ops.operators.join_task import SLICE_ROWS, join_task
from ops.reduce.budget import task_rows
from ops.spark.arrow_types import arrow_schema
from ops.spark.python_stage import python_stage
from ops.spark.session import partitions

#: The most partitions a join's shuffle takes (each writes a file of the output's layer).
MAX_TASKS = 64


def matchable(df: DataFrame | None, on: list[str], nulls_equal: bool = False) -> DataFrame | None:
    """The updates of ``df`` that can match a partner: those without a null key column
    (all of them with ``nulls_equal``)."""
    if df is None or nulls_equal or not on:
        return df
    cond = F.col(on[0]).isNotNull()
    for k in on[1:]:
        cond = cond & F.col(k).isNotNull()
    return df.filter(cond)


def join_changes(ctx: EvalContext, on: list[str], d_left: DataFrame | None, d_right: DataFrame | None,
                 left_arr, right_arr, *, semi: bool = False, small: bool = False) -> DataFrame | None:
    """The new output of ``left ⋈ right`` given both sides' new updates and arrangements.

    With ``semi`` only the left columns are kept (the right side contributes its key's
    multiplicity), which is ``semijoin``. ``small``: the run's delta is small enough for
    each task to look its keys' old updates up in stored arrangements.
    """
    def right_view(df: DataFrame) -> DataFrame:
        return df.select(*on, *ctx.tail()) if semi else df

    lookup = lookup_files(left_arr, right_arr) if small and d_left is not None and d_right is not None else None
    old_left = old_right = None
    if lookup is None:
        if d_right is not None and left_arr is not None:
            old_left = left_arr.old_for_keys(ctx, d_right, on)
        if d_left is not None and right_arr is not None:
            old_right = right_arr.old_for_keys(ctx, d_left, on)
    lefts = [(f, new) for f, new in ((d_left, True), (old_left, False)) if f is not None]
    rights = [(f, new) for f, new in ((d_right, True), (old_right, False)) if f is not None]
    pairs_possible = (d_left is not None and rights) or (d_right is not None and lefts)
    if not pairs_possible or not lefts or not rights:
        return None
    rights = [(right_view(f), new) for f, new in rights]
    return sweep_pairs(ctx, on, lefts, rights, lookup=lookup)


def sweep_pairs(ctx: EvalContext, on: list[str], lefts: list[tuple[DataFrame, bool]],
                rights: list[tuple[DataFrame, bool]], *, half: bool = False,
                lookup: tuple[list[str], list[str]] | None = None) -> DataFrame:
    """Every pair of a left and a right update of the same key (``ctx.extra + on``) with at
    least one of the two new (each frame comes with whether its updates are new), at the
    join of their times with the product of their diffs, consolidated; or with ``half``
    every new left update with the right updates at or before its time, at its time.
    Columns: the left side's data columns, the right side's others, ``ctx.tail()``.
    ``lookup``: each side's stored layer files, from which the tasks read the old updates
    of their keys. A frame hash-partitioned by the key, one task per partition."""
    left_data = ctx.data_columns(lefts[0][0])
    right_data = [c for c in ctx.data_columns(rights[0][0]) if c not in on]
    key = ctx.extra + on
    spec = JoinSpec(tuple(key), tuple(c for c in left_data if c not in on), tuple(right_data), ctx.d, half)
    frames = [_tagged(ctx, f, key, list(spec.left), 0, new) for f, new in lefts]
    frames += [_tagged(ctx, f, key, right_data, 1, new) for f, new in rights]
    both = frames[0]
    for f in frames[1:]:
        both = both.unionByName(f, allowMissingColumns=True)
    parts = _tasks(ctx)
    source = both.coalesce(1) if parts == 1 else both.repartition(parts, *key)
    out_arrow = spec.output_schema(arrow_schema(both.schema))
    budget = task_rows()

    def kernel(batches):
        return join_task(batches, spec, budget, lookup)

    columns = left_data + right_data + ctx.tail()
    return python_stage(source, kernel, from_arrow_schema(out_arrow), columns, consolidated=True)


def _tasks(ctx: EvalContext) -> int:
    """The join's partitions: the session's, or more for a big run outside loops, so that
    a task's rows fit one slice of the sweep (``SLICE_ROWS``) and need neither spilling nor
    parts (a loop's rounds keep the session's: every task costs each round)."""
    parts = partitions(ctx.spark)
    if parts == 1 or not ctx.delta_rows or ctx.floor:
        return parts
    return max(parts, min(MAX_TASKS, -(-ctx.delta_rows // SLICE_ROWS)))


def _tagged(ctx: EvalContext, df: DataFrame, key: list[str], cols: list[str], side: int, new: bool) -> DataFrame:
    """One side's updates in the task's input form: key, its columns, times, diff, newness, side."""
    return df.select(*key, *cols, *ctx.tcols, "diff", F.lit(new).alias("_new"), F.lit(side).cast("byte").alias(SIDE))


def lookup_files(left_arr, right_arr) -> tuple[list[str], list[str]] | None:
    """Each side's stored layer files when every old update of both sides is in them (so
    that tasks may read their keys' old updates themselves), else None."""
    files = []
    for arr in (left_arr, right_arr):
        if arr is None:
            files.append([])
            continue
        source = arr.lookup_source()
        if source is not None:
            files.append(list(source.files))
        elif arr.has_nothing_old():
            files.append([])
        else:
            return None
    return files[0], files[1]

