"""Spark's schemas as Arrow's, in the session's time zone.

Spark's ``TIMESTAMP`` is an instant in UTC; PySpark turns it into Arrow only with a time
zone given, the session's (``spark.sql.session.timeZone``, which ops/spark/session.py sets
to :data:`SESSION_TIME_ZONE`): the batches of ``mapInArrow`` hold ``timestamp[us, tz=UTC]``.
A timestamp without a zone is ``TIMESTAMP_NTZ`` and ``timestamp[us]``.
"""

from __future__ import annotations

import pyarrow as pa

SESSION_TIME_ZONE = "UTC"


def arrow_schema(spark_schema) -> pa.Schema:
    """A Spark ``StructType`` as the Arrow schema of its batches."""
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(spark_schema, timezone=SESSION_TIME_ZONE)
