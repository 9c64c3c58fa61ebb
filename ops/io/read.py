"""Reading layer files into Spark, wherever the store lives.

A local (or shared) folder: ``spark.read.parquet``, exactly as fast as always. An object
store: pyspark ships no S3 connector jars and nothing may be downloaded, so Spark cannot
open ``s3://`` paths itself; instead each task reads its files with pyarrow through the
store's storage (storage/blobs/base.py), one partition per file, inside ``mapInArrow``.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame

from storage.blobs.resolve import for_path


def read_layers(spark, paths: list[str], schema) -> DataFrame:
    """The updates of layer files ``paths`` as a DataFrame of ``schema`` (a Spark StructType)."""
    if not paths or for_path(paths[0]).spark_reads_files:
        return spark.read.schema(schema).parquet(*paths)
    from ops.spark.arrow_types import arrow_schema

    arrow = arrow_schema(schema)
    files = list(paths)

    def read(batches):
        for b in batches:
            for i in b.column(0).to_pylist():
                yield from layer_table(files[i], arrow).to_batches()

    return spark.range(0, len(files), 1, len(files)).mapInArrow(read, schema)


def layer_table(path: str, schema: pa.Schema, where=None) -> pa.Table:
    """One layer file's updates as ``schema`` (an Arrow schema), read with pyarrow wherever
    the store lives: inside a task, without a Spark job. ``where``: only the rows that pass
    this filter (a ``pyarrow.compute`` expression; row groups whose statistics rule it out
    are not read)."""
    from storage.blobs.resolve import read_table

    table = read_table(path, page_checksum_verification=True, filters=where).replace_schema_metadata(None)
    return table.select(schema.names).cast(schema)
