"""Column types asked for at ingest (``--type price=decimal(15,2)``), instead of inferred.

Text files say nothing of types: ddcli infers the narrowest one every value parses as, which
makes ``12.50`` a double. A column named here is parsed as the type asked for, exactly (a
decimal from its text, never through a double), and a value that does not fit is one line
naming the file, row, column and value (storage/files/validate.py).
"""

from __future__ import annotations

import re

import pyarrow as pa

from storage.errors import StoreError

_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\Z", re.IGNORECASE)
_NAMED = {"int": pa.int64(), "bigint": pa.int64(), "double": pa.float64(), "float": pa.float64(),
          "string": pa.string(), "text": pa.string(), "boolean": pa.bool_(), "bool": pa.bool_(),
          "date": pa.date32(), "timestamp": pa.timestamp("us")}
NAMES = "int, double, string, boolean, date, timestamp, decimal(P,S)"


def parse_type(text: str) -> pa.DataType:
    """``int``, ``double``, ``string``, ``boolean``, ``date``, ``timestamp`` or
    ``decimal(P,S)`` (1 <= P <= 38, 0 <= S <= P) as an Arrow type."""
    t = _NAMED.get(text.strip().lower())
    if t is not None:
        return t
    m = _DECIMAL.match(text.strip())
    if not m:
        raise StoreError(f"type {text!r} is not one of {NAMES}")
    p, s = int(m.group(1)), int(m.group(2))
    if not 1 <= p <= 38 or s > p:
        raise StoreError(f"type {text!r}: a decimal has a precision P of 1 to 38 and a scale S of 0 to P")
    return pa.decimal128(p, s)


def parse_column_types(specs: list[str] | None) -> dict[str, pa.DataType]:
    """``["price=decimal(15,2)", "day=date"]`` as ``{column: type}``."""
    out: dict[str, pa.DataType] = {}
    for spec in specs or []:
        name, eq, text = spec.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            raise StoreError(f"--type {spec!r}: write COLUMN=TYPE, e.g. price=decimal(15,2) (types: {NAMES})")
        if name in out:
            raise StoreError(f"--type names column {name!r} twice")
        out[name] = parse_type(text)
    return out


def describe(t: pa.DataType) -> str:
    """A type as ``--type`` writes it."""
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return {v: k for k, v in reversed(list(_NAMED.items()))}.get(t, str(t))


def type_text(t: pa.DataType) -> str:
    """A type as an error names it, with what a decimal holds."""
    if pa.types.is_decimal(t):
        return f"{describe(t)} (at most {t.precision - t.scale} digits before the point and {t.scale} after)"
    return describe(t)
