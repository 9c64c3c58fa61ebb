"""Spark's schemas as Arrow's, in the session's time zone.

Spark's ``TIMESTAMP`` is an instant in UTC; PySpark turns it into Arrow only with a time
zone given, the session's (``spark.sql.session.timeZone``, which ops/spark/session.py sets
to :data:`SESSION_TIME_ZONE`): the batches of ``mapInArrow`` hold ``timestamp[us, tz=UTC]``.
A timestamp without a zone is ``TIMESTAMP_NTZ`` and ``timestamp[us]``.

Spark's ``TIMESTAMP`` has no zone of its own, so an output's zone is given back by
:func:`zones_of` from the pipeline's inputs, as DuckDB keeps a ``TIMESTAMPTZ`` column's zone:
the values are the same instants whatever the zone a type names.
"""

from __future__ import annotations

import pyarrow as pa

SESSION_TIME_ZONE = "UTC"


def arrow_schema(spark_schema) -> pa.Schema:
    """A Spark ``StructType`` as the Arrow schema of its batches."""
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(spark_schema, timezone=SESSION_TIME_ZONE)


def zones_of(schema: pa.Schema, inputs: list[pa.Schema], pipeline_zone: str | None) -> pa.Schema:
    """``schema`` (of :func:`arrow_schema`) with each zoned timestamp column in the zone of
    the column of that name in ``inputs`` (the operator's inputs' schemas), else in
    ``pipeline_zone`` (the one zone of every zoned column the pipeline reads, if it reads
    one zone only), else UTC. The zone depends only on the pipeline and its inputs, never
    on what ran before in the same process."""
    named = {}
    for s in inputs:
        for f in s:
            if pa.types.is_timestamp(f.type) and f.type.tz:
                named.setdefault(f.name, f.type.tz)
    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.type.tz:
            zone = named.get(f.name) or pipeline_zone or f.type.tz
            f = f.with_type(pa.timestamp(f.type.unit, tz=zone))
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def one_zone(schemas: list[pa.Schema]) -> str | None:
    """The zone of every zoned timestamp column of ``schemas``, if they all have the same."""
    zones = {f.type.tz for s in schemas for f in s if pa.types.is_timestamp(f.type) and f.type.tz}
    return zones.pop() if len(zones) == 1 else None
