"""``reduce`` on Spark: key-partition the changes and run the grid kernel per partition.

All updates of a touched key — its old updates from the arrangement and this run's new
ones — meet in one partition (``repartition`` by key), where ``ops.reduce.kernel`` computes
the output changes at every time they can occur, including joins of input times, with
vectorised numpy over the whole partition. One shuffle and one Arrow stage per reduce,
however many distinct times the run holds (no job per time, key or row). For a small
delta against a stored arrangement only the new updates are shuffled and each task reads
its keys' old updates itself (``ops/reduce/budget.py``: a summary of them, the updates
whole, or, over a budget, the keys' rows in shares one after another), so that a few
changes of a hot key neither cost its history nor hold it whole; with a single partition
nothing is shuffled at all.

A big run of a reduce (``two_stage``) splits every key's value rows among tasks instead,
so a hot key never lands whole in one task: count, sum and count_distinct sum per-task
partials per (key, time) (one more shuffle, of partials; for ``d >= 2`` the synthetic rows
of ``ops/reduce/builtin_grid.py``); min, max and top_k reduce each share of a key's rows to its
first k records over time, then reduce those.

Every task of these stages holds at most ``DDCLI_REDUCE_TASK_ROWS`` rows in Arrow
(``ops/reduce/held_rows.py``): more spill to a DuckDB table and are reduced in shares by their
values, or in groups of keys (``ops/reduce/budget.py`` ``reduce_held``).
"""

from __future__ import annotations

import os
from typing import Callable

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from ops.reduce import kernel as rk
from ops.operators.arrangement import Arrangement
from ops.operators.context import EvalContext
from ops.reduce.old_updates import OldLookup
from ops.spark.arrow_types import arrow_schema
from ops.spark.python_stage import python_stage
from ops.reduce.shared_shuffle import SharedShuffle
from ops.reduce.held_rows import HeldRows
from ops.reduce.budget import held_shares, in_shares, reduce_held, reduce_with_lookup, task_rows
from ops.reduce.summaries.insertions import summarisable
from ops.spark.session import partitions
from storage.lattice import time_columns


#: New updates from which a reduce splits keys among tasks (two stages); below it each
#: task looks its own keys' old updates up (ops/reduce/budget.py, under its own budget).
#: Below it no key can hold more new updates than this, and the sweeps of one stage take a
#: key of 10^6 updates whole for ~0.3 GB of a worker (measured: top_k and min, one key, 1.0M
#: rows); one stage lets the reduces of one key share one shuffle (ops/reduce/shared_shuffle.py).
SPLIT_ROWS = 1 << 20


def two_stage(ctx: EvalContext, reducer: rk.Reducer, df: DataFrame) -> bool:
    """Split keys among tasks: outside loops, a built-in reducer that composes over
    shares of value rows (``rk.splits``), and a run big enough for a key to be hot
    (``DDCLI_REDUCE_SPLIT_ROWS`` overrides the threshold; 0 splits every run). ``df``:
    the reduce's input (its columns' types decide for a sum)."""
    limit = int(os.environ.get("DDCLI_REDUCE_SPLIT_ROWS", SPLIT_ROWS))
    if ctx.extra or (ctx.delta_rows or 0) < limit:
        return False
    return rk.splits(reducer, arrow_schema(df.schema))


def by_key(df: DataFrame, parts: int, key: list[str]) -> DataFrame:
    """``df`` partitioned so that each key's updates meet in one partition; a reduce over all
    rows (no key) has one key, so one partition (a repartition by no column deals rows round
    robin)."""
    return df.repartition(parts, *key) if key else df.repartition(1)


def output_arrow_schema(key_schema: pa.Schema, out_schema: pa.Schema, d: int) -> pa.Schema:
    fields = list(key_schema) + list(out_schema)
    fields += [pa.field(t, pa.int64()) for t in time_columns(d)] + [pa.field("diff", pa.int64())]
    return pa.schema(fields)


def reduce_changes(ctx: EvalContext, df_new: DataFrame, old: DataFrame | None, key: list[str],
                   reducer: rk.Reducer, *, lookup: Arrangement | None = None,
                   old_partitioned: bool = False) -> DataFrame:
    """The output changes of ``reducer`` per ``key`` caused by ``df_new``.

    The old updates come either as a frame (``old``; ``old_partitioned``: a loop view,
    already hash-partitioned by the key) or, for a small delta against a
    stored arrangement, as ``lookup``: each task then reads its own keys' old updates
    with DuckDB (which prunes row groups of the key-sorted layers), which costs no Spark
    job to collect keys and no shuffle of old state.
    """
    full_key = ctx.extra + key
    values = [c for c in ctx.data_columns(df_new) if c not in key]
    in_schema = arrow_schema(df_new.schema)
    values_schema = pa.schema([in_schema.field(v) for v in values])
    key_schema = pa.schema([in_schema.field(k) for k in full_key])
    out_arrow = output_arrow_schema(key_schema, reducer.output_schema(values_schema), ctx.d)
    parts = partitions(ctx.spark)
    both = df_new.withColumn("_new", F.lit(True))
    if old is not None and old_partitioned and parts > 1:
        # a loop view is hash-partitioned by the key already: shuffle only the new updates,
        # and the union keeps the partitioning (the repartition below is then a no-op)
        both = by_key(both, parts, full_key)
    if old is not None:
        both = both.unionByName(old.select(*df_new.columns).withColumn("_new", F.lit(False)))
    d = ctx.d
    lookup_files = None if lookup is None else list(lookup.files)  # the closure ships to tasks
    summary = summarisable(reducer, values_schema, d, bool(ctx.extra))
    budget, shares_ok = task_rows(), in_shares(reducer, values_schema)

    def kernel(batches):
        if lookup_files is None:  # every row of the task's keys comes through the shuffle
            held = HeldRows.of(batches, budget)
            if held.rows == 0:
                return
            try:
                out = reduce_held(held, full_key, values, d, reducer, out_arrow, budget=budget, shares_ok=shares_ok)
            finally:
                if held is not batches:
                    held.close()
        else:
            batches = list(batches)
            table = pa.Table.from_batches(batches) if batches else None
            if table is None or table.num_rows == 0:
                return
            try:
                out = reduce_with_lookup(table, lookup_files, full_key, values, d, reducer, out_arrow,
                                         summary=summary, budget=budget, shares_ok=shares_ok)
            finally:
                OldLookup.task_ended()
        if out.num_rows:
            yield from out.select(out_arrow.names).cast(out_arrow).to_batches()

    shared = None
    if lookup_files is None and two_stage(ctx, reducer, df_new):
        source, last = _split_keys(both, full_key, values, in_schema, reducer, out_arrow, parts, kernel,
                                   ctx.delta_rows or 0, d, budget)
    else:
        # one partition holds every key: no shuffle needed to bring a key's updates together
        source, last = (both.coalesce(1) if parts == 1 else by_key(both, parts, full_key)), kernel
        if old is None:  # the source depends on df_new and the key only: other reduces may share it
            shared = SharedShuffle(df_new, full_key, parts, lookup_files)
    cols = list(key) + [f.name for f in reducer.output_schema(values_schema)]
    # the writer may run in the same Python stage (ops/spark/python_stage.py); the kernel's
    # output is consolidated per task (rk.reduce_delta), so the writer only sorts it
    return python_stage(source, last, from_arrow_schema(out_arrow), cols + ctx.tail(), consolidated=True,
                        shared=shared)


def _split_keys(both: DataFrame, key: list[str], values: list[str], in_schema: pa.Schema, reducer: rk.Reducer,
                out_arrow: pa.Schema, parts: int, kernel, rows: int, d: int,
                budget: int) -> tuple[DataFrame, Callable]:
    """The two stages of a reduce whose keys' value rows are dealt to tasks: the first
    stage's frame, partitioned by key, and the function of the second. A first stage's
    task takes its rows in shares of about ``budget`` (``ops/reduce/held_rows.py``)."""

    def first_stage(fn):
        """``fn`` (a table of whole value rows -> a table or None) over a task's rows, share by share."""
        def run(batches):
            held = HeldRows(batches, budget)
            try:
                for table in held_shares(held, values, budget) if held.rows else ():
                    out = fn(table)
                    if out is not None and out.num_rows:
                        yield from out.to_batches()
            finally:
                held.close()
        return run

    if not values:  # nothing to split a key by
        return by_key(both, parts, key), kernel
    key_fields = [in_schema.field(k) for k in key]
    tcols = time_columns(d)
    time_fields = [pa.field(c, pa.int64()) for c in tcols]
    out_schema = pa.schema(list(out_arrow)[len(key):-1 - d])
    if isinstance(reducer, rk.ABELIAN) and d >= 2:
        # per share: synthetic rows (weight updates, presence changes), summed per key and time
        wtype = rk.partial_weight_type(reducer, pa.schema([in_schema.field(v) for v in values]))
        syn_fields = {"diff": pa.int64(), "_new": pa.bool_(), rk.CHANNEL: pa.int64(), rk.WEIGHT: wtype}
        syn_schema = pa.schema(key_fields + time_fields + [pa.field(c, syn_fields[c])
                                                           for c in rk.synthetic_columns(reducer)])
        sums = [c for c in ("diff", rk.WEIGHT) if c in syn_schema.names]

        def synthetic(table):
            syn = rk.abelian_synthetic(table, key, values, d, reducer)
            return None if syn is None else syn.select(syn_schema.names).cast(syn_schema)

        def from_synthetic(batches):
            table = _table(batches)
            if table is not None:
                out = rk.abelian_from_synthetic(table, key, d, reducer, out_schema)
                if out.num_rows:
                    yield from out.select(out_arrow.names).cast(out_arrow).to_batches()

        stage1 = both.repartition(parts, *key, *values).mapInArrow(first_stage(synthetic), from_arrow_schema(syn_schema))
        nonzero = F.col("diff") != 0
        if rk.WEIGHT in sums:
            nonzero = nonzero | (F.col(rk.WEIGHT) != 0)
        summed = stage1.groupBy(*key, *tcols, "_new", rk.CHANNEL).agg(*(F.sum(c).alias(c) for c in sums)) \
            .where(nonzero)
        return by_key(summed, parts, key), from_synthetic
    if isinstance(reducer, rk.ABELIAN):
        wtype = rk.partial_weight_type(reducer, pa.schema([in_schema.field(v) for v in values]))
        partial_schema = pa.schema(key_fields + [pa.field(rk.SIDE, pa.int64()), pa.field("time", pa.int64()),
                                                 pa.field(rk.DW, wtype), pa.field(rk.DN, pa.int64())])

        def partials(table):
            return rk.abelian_partials(table, key, values, reducer).cast(partial_schema)

        def finish(batches):
            table = _table(batches)
            if table is not None:
                out = rk.abelian_from_partials(table, key, reducer, out_schema, out_arrow)
                if out.num_rows:
                    yield from out.cast(out_arrow).to_batches()

        stage1 = both.repartition(parts, *key, *values).mapInArrow(first_stage(partials),
                                                                   from_arrow_schema(partial_schema))
        summed = stage1.groupBy(*key, rk.SIDE, "time").agg(F.sum(rk.DW).alias(rk.DW), F.sum(rk.DN).alias(rk.DN))
        return by_key(summed, parts, key), finish
    # min, max, top_k: shares of each key's value rows by a hash of the values, enough of
    # them that a share of a single hot key fits one slice of the kernel (rk.ROW_BUDGET)
    salts = max(8, 4 * parts, 2 * rows // rk.ROW_BUDGET)
    trace_schema = pa.schema(key_fields + [pa.field(rk.SALT, pa.int64())] + [in_schema.field(v) for v in values]
                             + time_fields + [pa.field("diff", pa.int64()), pa.field("_new", pa.bool_())])

    def traces(table):
        return rk.order_traces(table, key + [rk.SALT], values, reducer, d=d).select(trace_schema.names).cast(trace_schema)

    salted = both.withColumn(rk.SALT, F.pmod(F.xxhash64(*values), F.lit(salts)))
    stage1 = salted.repartition(parts, *key, rk.SALT).mapInArrow(first_stage(traces), from_arrow_schema(trace_schema))
    return by_key(stage1.drop(rk.SALT), parts, key), kernel


def _table(batches) -> pa.Table | None:
    batches = list(batches)
    if not batches:
        return None
    table = pa.Table.from_batches(batches)
    return table if table.num_rows else None
