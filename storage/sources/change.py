"""One version of a lake table as ddcli takes it, and the column types a trace keeps for it."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from storage.lake.types import lake_type


@dataclass
class Change:
    """One version of a lake table: what the trace records once it is taken, its number
    (version or sequence number; None when the table has none), its commit time in
    microseconds, its schema and its rows (data columns and ``diff``; None or empty for a
    version that changed no data)."""
    position: dict
    number: int | None
    timestamp_us: int | None
    schema: pa.Schema
    rows: pa.Table | None = None


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """The schema a trace keeps for a lake table's columns: the plain variant of each type
    (no large, view or dictionary types), as a Delta table holds it (storage/lake/types.py)."""
    return pa.schema([pa.field(f.name, lake_type(_plain(f.type))) for f in schema])


def plain_table(table: pa.Table) -> pa.Table:
    """``table`` with the plain variant of each column type (string, not string_view)."""
    want = pa.schema([pa.field(f.name, _plain(f.type)) for f in table.schema])
    return table if want == table.schema else table.cast(want)


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return pa.string()
    if pa.types.is_large_binary(t) or getattr(pa.types, "is_binary_view", lambda _: False)(t):
        return pa.binary()
    return t
