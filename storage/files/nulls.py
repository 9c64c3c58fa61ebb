"""Nulls in CSV update files: which text stands for a missing value.

CSV has no null. ddcli reads an empty field of a non-text column as null (there is no
empty number or date), and for text columns, where the empty string is a value, a marker:
``\\N`` by default (what PostgreSQL's COPY and MySQL write), or any text given with
``ingest --null STR``, which then means null in every column. Without a way to say null,
a CSV file could never retract a row whose text column is null (a Parquet file's null
``tailnum``, say): the retraction would match nothing.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_NULL = "\\N"
_NOT_DATA = re.compile(r"(time|time_\d+|diff)\Z")


def apply_null_marker(table: pa.Table, marker: str | None) -> pa.Table:
    """``table`` (every column text, as read from CSV) with ``marker`` values made null in
    the data columns. Time and diff columns are left alone (they have their own rules)."""
    marker = DEFAULT_NULL if marker is None else marker
    for i, name in enumerate(table.column_names):
        if _NOT_DATA.match(name):
            continue
        col = table.column(i)
        if not pa.types.is_string(col.type):
            continue
        is_null = pc.equal(col, marker)
        if pc.any(is_null).as_py():
            table = table.set_column(i, name, pc.if_else(is_null, pa.scalar(None, col.type), col))
    return table
