"""``reduce`` on Spark: key-partition the changes and run the grid kernel per partition.

All updates of a touched key — its old updates from the arrangement and this run's new
ones — meet in one partition (``repartition`` by key), where ``ops.reduce_kernel`` computes
the output changes at every time they can occur, including joins of input times, with
vectorised numpy over the whole partition. One shuffle and one Arrow stage per reduce,
however many distinct times the run holds (no job per time, key or row). For a small
delta against a stored arrangement only the new updates are shuffled and each task reads
its keys' old updates itself; with a single partition nothing is shuffled at all.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from ops import reduce_kernel as rk
from ops.arrangement import Arrangement
from ops.context import EvalContext
from ops.session import partitions
from storage.lattice import time_columns


def _with_old_updates(new: pa.Table, files: list[str], key: list[str]) -> pa.Table:
    """A task's new updates plus the stored old updates of their keys (``_new`` false)."""
    from ops.arrangement import duckdb_keyed_read
    keys = new.select(key).group_by(key).aggregate([])
    old = duckdb_keyed_read(files, keys, key)
    if old.num_rows == 0:
        return new
    names = [c for c in new.column_names if c != "_new"]
    old = old.select(names).append_column("_new", pa.array(np.zeros(old.num_rows, bool)))
    return pa.concat_tables([new, old.select(new.column_names).cast(new.schema)])


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
    in_schema = to_arrow_schema(df_new.schema)
    values_schema = pa.schema([in_schema.field(v) for v in values])
    key_schema = pa.schema([in_schema.field(k) for k in full_key])
    out_arrow = output_arrow_schema(key_schema, reducer.output_schema(values_schema), ctx.d)
    parts = partitions(ctx.spark)
    both = df_new.withColumn("_new", F.lit(True))
    if old is not None and old_partitioned and parts > 1:
        # a loop view is hash-partitioned by the key already: shuffle only the new updates,
        # and the union keeps the partitioning (the repartition below is then a no-op)
        both = both.repartition(parts, *full_key)
    if old is not None:
        both = both.unionByName(old.select(*df_new.columns).withColumn("_new", F.lit(False)))
    d = ctx.d
    lookup_files = None if lookup is None else list(lookup.files)  # the closure ships to tasks

    def kernel(batches):
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        if table.num_rows == 0:
            return
        if lookup_files is not None:
            table = _with_old_updates(table, lookup_files, full_key)
        out = rk.reduce_delta(table, full_key, values, d, reducer)
        if out.num_rows:
            yield from out.select(out_arrow.names).cast(out_arrow).to_batches()

    # one partition holds every key: no shuffle needed to bring a key's updates together
    both = both.coalesce(1) if parts == 1 else both.repartition(parts, *full_key)
    out = both.mapInArrow(kernel, from_arrow_schema(out_arrow))
    cols = list(key) + [f.name for f in reducer.output_schema(values_schema)]
    return out.select(*cols, *ctx.tail())
