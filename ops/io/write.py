"""Writing a run's changes as a layer of a trace, from inside Spark.

Each task consolidates and sorts its key partition with ``storage.layer`` and writes one
layer file, once, under a unique name straight into the trace's folder (a local folder:
tmp → fsync → rename; an object store: one put, through storage/blobs/base.py); only the files'
names and sizes come back to the driver, which commits them with everything else of the
run. No data is collected onto the driver.
"""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
from pyspark.sql import DataFrame

from ops.operators.linear import advance_and_sum
from ops.spark.python_stage import stage_of, then
from storage.lattice import Frontier, beyond_mask, time_columns
from storage.layer import Layer, LayerFile, consolidate, write_layer_file

#: the metadata row a task yields per layer file it wrote (the writers of ops/io/write_many.py and
#: ops/reduce/shared_shuffle.py yield it too)
META_SCHEMA = ("name string, rows long, bytes long, key_min string, key_max string, "
               "sha256 string, footer_sha256 string, diff_max long, pending boolean")


def write_layer(df: DataFrame, *, directory: str, schema: pa.Schema, key: list[str], d: int,
                lower: Frontier, upper: Frontier, since: Frontier, seq: int,
                partitions: int, partitioned: bool = False, precombine: bool = False) -> Layer | None:
    """Write ``df`` (data columns + time columns + diff) as one layer; None if it is empty.

    ``partitioned``: ``df`` is already hash-partitioned by ``key`` (a reduce's output), so
    the files are written in the same stage, without another shuffle. ``precombine``: most
    rows are expected to cancel or merge once advanced to ``since`` (a loop's state, one
    record per round at exact epochs): Spark's partial sums shrink them before the shuffle.
    """
    data_columns = [f.name for f in schema if f.name not in set(time_columns(d)) | {"diff"}]
    if precombine and not partitioned:
        df = precombined(df, data_columns, d, since)
    rows = _write_files(df, directory=directory, schema=schema, key=key, d=d, lower=lower, upper=upper,
                        since=since, partitions=partitions, partitioned=partitioned, split=False)
    return layer_of(rows, lower, upper, since, seq, seq + 1)


def write_sealed_and_pending(df: DataFrame, *, directory: str, schema: pa.Schema, key: list[str], d: int,
                             lower: Frontier, upper: Frontier, since: Frontier, seq: int, partitions: int,
                             partitioned: bool = False) -> tuple[Layer | None, Layer | None]:
    """Write an output's changes as a sealed layer (times not beyond ``upper``) and a
    pending layer (times beyond it), in one job.

    An output must not hold updates at or beyond its upper: a run's changes can lie beyond
    the pipeline's frontier (inputs of uneven uppers; joins of times for ``d >= 2``), and
    they wait, pending, until the frontier passes them.
    """
    rows = _write_files(df, directory=directory, schema=schema, key=key, d=d, lower=lower, upper=upper,
                        since=since, partitions=partitions, partitioned=partitioned, split=True)
    sealed = layer_of([r for r in rows if not r["pending"]], lower, upper, since, seq, seq + 1)
    pending = layer_of([r for r in rows if r["pending"]], upper, upper, since, -1, -1)
    return sealed, pending


def _write_files(df: DataFrame, *, directory: str, schema: pa.Schema, key: list[str], d: int,
                 lower: Frontier, upper: Frontier, since: Frontier, partitions: int,
                 partitioned: bool, split: bool) -> list:
    """Each task writes its partition's files; the files' metadata comes back (``split``:
    the updates beyond ``upper`` go to a file of their own, marked ``pending``)."""
    data_columns = [f.name for f in schema if f.name not in set(time_columns(d)) | {"diff"}]
    stage = stage_of(df)
    if stage is not None and not (partitioned or partitions == 1):
        stage = None  # not partitioned as the output's files need: read it as any frame
    summed = stage is not None and stage.consolidated

    def write_partition(batches):
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        if table.num_rows:
            yield from write_table_files(table, directory=directory, schema=schema, key=key, d=d, lower=lower,
                                         upper=upper, since=since, split=split, presummed=summed)

    if stage is not None:
        # a reduce's output: its kernel and this writer in one Python stage per task
        return then(stage, write_partition, META_SCHEMA).collect()
    part_key = key or data_columns[:1]
    if partitions == 1:
        df = df.coalesce(1)  # one file: no shuffle needed to keep a key's rows together
    elif not partitioned:
        df = df.repartition(partitions, *part_key)
    return df.mapInArrow(write_partition, META_SCHEMA).collect()


def write_table_files(table: pa.Table, *, directory: str, schema: pa.Schema, key: list[str], d: int,
                      lower: Frontier, upper: Frontier, since: Frontier, split: bool, presummed: bool = False):
    """Inside a task: one partition's updates of a trace, consolidated, sorted and written
    as a file (two with ``split``: the updates beyond ``upper`` in a pending one); yields
    one metadata batch (``META_SCHEMA``) per file. ``presummed``: the rows are consolidated
    already (a reduce's output), so consolidation only sorts and checks them."""
    data_columns = [f.name for f in schema if f.name not in set(time_columns(d)) | {"diff"}]
    tcols = time_columns(d)
    table = consolidate(table.select(schema.names).cast(schema), data_columns, key, d, since, presummed=presummed)
    parts = [(False, table)]
    if split:
        late = beyond_mask([table.column(c).to_numpy() for c in tcols], upper)
        parts = [(False, table.filter(pa.array(~late))), (True, table.filter(pa.array(late)))]
    for is_pending, part in parts:
        if part.num_rows == 0:
            continue
        f = write_layer_file(part, directory, key=key, lower=upper if is_pending else lower,
                             upper=upper, since=since)
        yield pa.RecordBatch.from_pylist([{"name": f.name, "rows": f.rows, "bytes": f.bytes,
                                           "key_min": json.dumps(f.key_min), "key_max": json.dumps(f.key_max),
                                           "sha256": f.sha256, "footer_sha256": f.footer_sha256,
                                           "diff_max": f.diff_max, "pending": is_pending}])


def layer_of(rows: list, lower: Frontier, upper: Frontier, since: Frontier, seq_lo: int, seq_hi: int) -> Layer | None:
    if not rows:
        return None
    files = sorted((LayerFile(r["name"], r["rows"], r["bytes"], json.loads(r["key_min"]), json.loads(r["key_max"]),
                              r["sha256"], r["footer_sha256"], r["diff_max"])
                    for r in rows), key=lambda f: (f.key_min is None, str(f.key_min)))
    return Layer(uuid.uuid4().hex[:16], files, lower, upper, since, seq_lo, seq_hi,
                 sum(f.rows for f in files), sum(f.bytes for f in files))


def precombined(df: DataFrame, data_columns: list[str], d: int, since: Frontier) -> DataFrame:
    """Times advanced to ``since`` (as ``storage.layer.consolidate`` does), equal updates
    summed by Spark's aggregation, whose map-side partial sums run before its shuffle."""
    tcols = time_columns(d)
    m = since.meet_time()
    return advance_and_sum(df.select(*data_columns, *tcols, "diff"), {} if m is None else dict(zip(tcols, m)))
