"""Which column types a Delta Lake table can hold, and the Delta schema of a trace.

Delta Lake has signed integers of 8 to 64 bits, float and double, decimal up to 38 digits,
string, binary, boolean, date and timestamps in microseconds (``timestamp``: instants in
UTC; ``timestamp_ntz``: without a zone). A trace's layer files are the Delta table's data
files, so their types must be among those:

* :func:`lake_type` is the type a *new* trace gets for a column (storage/files/validate.py
  asks when the first ingest infers the schema): unsigned integers widen to the next signed
  type (``uint64`` becomes ``int64``; a value beyond it is refused, naming its row),
  timestamps in seconds, milliseconds or nanoseconds become microseconds (Spark's and
  Delta's unit; a nanosecond value that is not a whole microsecond is refused, naming its
  row), fixed-size binary plain binary, small decimals ``decimal128``. Nothing is lost.
* :func:`delta_problem` says why an existing trace cannot be a Delta table (a type made
  before that rule, or one Delta has no counterpart for: nanosecond timestamps, times of
  day, durations, decimals beyond 38 digits); such a trace simply has no Delta table.
* :func:`delta_arrow_schema` is the schema the Delta table declares: a timestamp with a
  time zone is declared in UTC (Parquet stores such timestamps as UTC instants anyway).
"""

from __future__ import annotations

import pyarrow as pa

from storage.lattice import time_columns

_WIDER = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64(), pa.uint64(): pa.int64()}


def lake_type(t: pa.DataType) -> pa.DataType:
    """The type a new trace stores a column of type ``t`` as (``t`` itself when Delta can
    hold it, or when nothing lossless would fit: :func:`delta_problem` names those)."""
    if t in _WIDER:
        return _WIDER[t]
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms", "ns"):
        return pa.timestamp("us", tz=t.tz)  # from ns only when exact: a finer value is refused
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_decimal(t) and not isinstance(t, pa.Decimal128Type) and t.precision <= 38:
        return pa.decimal128(t.precision, t.scale)
    return t


def delta_problem(schema: pa.Schema) -> str | None:
    """Why a trace of this schema cannot be a Delta table, or None when it can."""
    for f in schema:
        why = _type_problem(f.type)
        if why:
            return f"column {f.name!r} has type {f.type}, {why}"
    return None


def _type_problem(t: pa.DataType) -> str | None:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_unsigned_integer(t):
        return "and Delta Lake has no unsigned integers"
    if pa.types.is_timestamp(t) and t.unit == "ns":
        return "and Delta Lake keeps timestamps to the microsecond"
    if pa.types.is_decimal(t) and t.precision > 38:
        return "and Delta Lake decimals have at most 38 digits"
    if pa.types.is_time(t) or pa.types.is_duration(t) or pa.types.is_interval(t):
        return "which Delta Lake has no type for"
    if pa.types.is_nested(t) or pa.types.is_null(t) or pa.types.is_float16(t):
        return "which ddcli does not publish to Delta Lake"
    return None


def _declared(t: pa.DataType) -> pa.DataType:
    """The Delta-side type of a column whose type has no :func:`_type_problem`."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_decimal(t):
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_date(t):
        return pa.date32()
    return t


def delta_arrow_schema(schema: pa.Schema, d: int) -> pa.Schema:
    """The columns of a trace's Delta table: its data columns, its time columns, ``diff``."""
    fields = [pa.field(f.name, _declared(f.type)) for f in schema]
    fields += [pa.field(c, pa.int64()) for c in time_columns(d)] + [pa.field("diff", pa.int64())]
    return pa.schema(fields)
