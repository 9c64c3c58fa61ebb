"""Several update frames as one: the rows a partition-local loop ships to and from its tasks.

``mapInArrow`` takes one frame with one schema, but a loop's task needs several
collections (each variable's old state, each entered collection's new updates...) and
returns several (each leave's changes, each arrangement's processed updates). They travel
as one *wide* frame: a ``_tag`` column says which collection a row belongs to, collection
``k``'s column ``c`` is ``c{k}_{c}`` (null in other collections' rows), and ``_p0 …`` hold
the row's partition columns, by which the frame is dealt to tasks.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from ops.spark.arrow_types import arrow_schema

TAG = "_tag"


def wide_name(tag: int, col: str) -> str:
    return f"c{tag}_{col}"


def wide_schema(schemas: dict[int, pa.Schema], partition: list[pa.Field] | None = None) -> pa.Schema:
    """The wide schema of collections ``schemas`` (tag -> schema), partition fields first."""
    fields = [pa.field(TAG, pa.int64())]
    fields += [pa.field(f"_p{j}", f.type) for j, f in enumerate(partition or [])]
    for tag, s in schemas.items():
        fields += [pa.field(wide_name(tag, f.name), f.type) for f in s]
    return pa.schema(fields)


def pack_frames(parts: dict[int, tuple[DataFrame, tuple[str, ...] | None]], schemas: dict[int, pa.Schema],
                partition: list[pa.Field] | None = None) -> DataFrame:
    """One wide Spark frame of ``parts`` (tag -> (frame, its partition columns)).

    Each part is projected by one ``selectExpr`` of SQL casts: built as Column objects,
    the casts of a wide frame cost a few Py4J calls each (thousands a run)."""
    wide = wide_schema(schemas, partition)
    spark_types = {f.name: f.dataType for f in from_arrow_schema(wide).fields}
    if not all(_sql_typed(t) for t in spark_types.values()):
        return _pack_columns(parts, schemas, wide, spark_types, partition)
    types = {name: t.simpleString() for name, t in spark_types.items()}
    out = None
    for tag, (df, pcols) in parts.items():
        mine = {wide_name(tag, c): c for c in schemas[tag].names}
        exprs = [f"CAST({int(tag)} AS BIGINT) AS {TAG}"]
        for j, _ in enumerate(partition or []):
            exprs.append(f"CAST({_quoted(pcols[j])} AS {types[f'_p{j}']}) AS _p{j}")
        for name in wide.names[1 + len(partition or []):]:
            src = _quoted(mine[name]) if name in mine else "NULL"
            exprs.append(f"CAST({src} AS {types[name]}) AS {_quoted(name)}")
        framed = df.selectExpr(*exprs)
        out = framed if out is None else out.unionByName(framed)
    return out


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_typed(t) -> bool:
    """Whether ``CAST(x AS <t.simpleString()>)`` names type ``t`` exactly (nested types carry
    field names that would need quoting of their own)."""
    from pyspark.sql.types import ArrayType, MapType, StructType
    return not isinstance(t, (ArrayType, MapType, StructType))


def _pack_columns(parts, schemas, wide: pa.Schema, spark_types: dict, partition) -> DataFrame:
    """:func:`pack_frames` with Column objects, for nested types."""
    out = None
    for tag, (df, pcols) in parts.items():
        mine = {wide_name(tag, c): c for c in schemas[tag].names}
        cols = [F.lit(tag).cast("long").alias(TAG)]
        for j, f in enumerate(partition or []):
            cols.append(F.col(pcols[j]).cast(spark_types[f"_p{j}"]).alias(f"_p{j}"))
        for name in wide.names[1 + len(partition or []):]:
            src = F.col(mine[name]) if name in mine else F.lit(None)
            cols.append(src.cast(spark_types[name]).alias(name))
        framed = df.select(*cols)
        out = framed if out is None else out.unionByName(framed)
    return out


def frame_schema(df: DataFrame) -> pa.Schema:
    return arrow_schema(df.schema)


def unpack_frame(wide: DataFrame, tag: int, schema: pa.Schema) -> DataFrame:
    """Collection ``tag`` of a wide Spark frame, with its own column names."""
    return wide.filter(f"{TAG} = {int(tag)}").selectExpr(
        *[f"{_quoted(wide_name(tag, c))} AS {_quoted(c)}" for c in schema.names])


def unpack_table(wide: pa.Table, tag: int, schema: pa.Schema) -> pa.Table:
    """Collection ``tag`` of a wide Arrow table (inside a task)."""
    rows = wide.filter(pc.equal(wide.column(TAG), tag))
    return pa.table({c: rows.column(wide_name(tag, c)) for c in schema.names}).cast(schema)


def pack_tables(tables: dict[int, pa.Table], wide: pa.Schema) -> pa.Table | None:
    """One wide Arrow table of ``tables`` (tag -> table), inside a task."""
    out = []
    for tag, t in tables.items():
        if t is None or t.num_rows == 0:
            continue
        n = t.num_rows
        mine = {wide_name(tag, c): c for c in t.column_names}
        cols = []
        for f in wide:
            if f.name == TAG:
                cols.append(pa.array(np.full(n, tag, np.int64)))
            elif f.name in mine:
                cols.append(t.column(mine[f.name]).cast(f.type))
            else:
                cols.append(pa.nulls(n, f.type))
        out.append(pa.Table.from_arrays(cols, schema=wide))
    return pa.concat_tables(out) if out else None
