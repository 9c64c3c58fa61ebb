"""Several traces' layers written by one Spark job: a run's small outputs and states.

A run writes every output and the state of every arranged operator. Written one job per
trace, a loop's run paid a job (and its Python worker round trip) for each of four small
traces: 28% of a reach run (measured with ``ddcli bench reach --loop-paths``). Here the traces'
frames travel as one wide frame (``ops/io/wide_frame.py``), dealt to tasks by a hash of each
trace's key columns, so one trace's key still lands in one task; each task writes, per
trace it holds rows of, the same files ``ops/io/write.py`` writes. Only the files' metadata
comes back to the driver.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.io.wide_frame import TAG, pack_frames, unpack_table
from ops.io.write import (META_SCHEMA, layer_of, precombined, write_layer, write_sealed_and_pending,
                        write_table_files)
from storage.lattice import Frontier, time_columns
from storage.layer import Layer

_HASH = "__ddcli_write_hash"


@dataclass
class LayerWrite:
    """One trace's share of a grouped write: what ``write_layer`` (``split`` False) or
    ``write_sealed_and_pending`` (``split`` True) would be given."""

    df: DataFrame
    directory: str
    schema: pa.Schema  # data + time columns + diff
    key: list[str]
    d: int
    lower: Frontier
    upper: Frontier
    since: Frontier
    seq: int
    split: bool
    precombine: bool = False


def write_layers(writes: list[LayerWrite], *, partitions: int) -> list[tuple[Layer | None, Layer | None]]:
    """Write every trace of ``writes`` in one Spark job; per write, its (sealed, pending)
    layers as ``write_sealed_and_pending`` returns them (pending is None unless ``split``)."""
    if len(writes) == 1:  # the plain writer: no hash column, no wide frame
        w = writes[0]
        args = dict(directory=w.directory, schema=w.schema, key=w.key, d=w.d, lower=w.lower, upper=w.upper,
                    since=w.since, seq=w.seq, partitions=partitions)
        if w.split:
            return [write_sealed_and_pending(w.df, **args)]
        return [(write_layer(w.df, precombine=w.precombine, **args), None)]
    parts, schemas = {}, {}
    for tag, w in enumerate(writes, start=1):
        data_columns = [f.name for f in w.schema if f.name not in set(time_columns(w.d)) | {"diff"}]
        df = w.df.select(*w.schema.names)
        if w.precombine:
            df = precombined(df, data_columns, w.d, w.since)
        part_key = w.key or data_columns[:1]
        h = F.hash(*[F.col(c) for c in part_key]) if part_key else F.lit(0)
        parts[tag] = (df.withColumn(_HASH, h), (_HASH,))
        schemas[tag] = w.schema

    specs = {tag: dict(directory=w.directory, schema=w.schema, key=w.key, d=w.d, lower=w.lower, upper=w.upper,
                       since=w.since, split=w.split) for tag, w in enumerate(writes, start=1)}  # no frames: pickled

    def write_partition(batches):
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        for tag in pc.unique(table.column(TAG)).sort().to_pylist():  # the traces this task holds
            mine = unpack_table(table, tag, specs[tag]["schema"])
            for meta in write_table_files(mine, **specs[tag]):
                yield meta.append_column(TAG, pa.array([tag] * meta.num_rows, pa.int64()))

    wide = pack_frames(parts, schemas, [pa.field("h", pa.int32())])
    wide = wide.coalesce(1) if partitions == 1 else wide.repartition(partitions, "_p0")
    rows = wide.mapInArrow(write_partition, META_SCHEMA + f", {TAG} long").collect()
    out = []
    for tag, w in enumerate(writes, start=1):
        mine = [r for r in rows if r[TAG] == tag]
        sealed = layer_of([r for r in mine if not r["pending"]], w.lower, w.upper, w.since, w.seq, w.seq + 1)
        pending = layer_of([r for r in mine if r["pending"]], w.upper, w.upper, w.since, -1, -1)
        out.append((sealed, pending))
    return out
