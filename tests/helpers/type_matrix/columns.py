"""The column types of the matrix: Arrow type, the values updates draw from (edge cases of
the type; nulls are added), and the expressions ``map`` and ``filter`` use, with their
meaning in Python."""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable
from zoneinfo import ZoneInfo

import pyarrow as pa

from tests.helpers import reference as R


UTC = dt.timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
EPOCH = dt.datetime(1970, 1, 1)


def _f32(x: float) -> float:
    """``x`` rounded to the nearest float32, as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _micros(v) -> int:
    """Microseconds since 1970 (of the wall clock for a time without zone)."""
    base = EPOCH.replace(tzinfo=UTC) if v.tzinfo is not None else EPOCH
    return (v - base) // dt.timedelta(microseconds=1)


def _plus_second(v):
    return v + dt.timedelta(seconds=1)  # a zone's times are UTC instants here (R.canonical)


def _berlin(*args) -> dt.datetime:
    """A UTC instant shown in Berlin's zone (so the two 02:30 of 27 October differ by fold)."""
    return dt.datetime(*args, tzinfo=UTC).astimezone(BERLIN)


@dataclass(frozen=True)
class ColumnType:
    """A column type of the matrix: its Arrow type, the values its updates draw from (nulls
    are added), an expression of ``map`` and one of ``filter`` with their meaning in Python."""

    name: str
    arrow: pa.DataType
    values: tuple
    map_exprs: dict[str, str]
    map_refs: dict[str, Callable]
    filter_expr: str
    filter_ref: Callable
    numeric: bool = False
    floating: bool = False


def _negative(v):
    """``-v``, exact for a decimal too (Python's ``-`` rounds a Decimal to 28 digits)."""
    return v.copy_negate() if isinstance(v, Decimal) else -v


def _numeric(name, arrow, values, *, floating=False, zero="0"):
    return ColumnType(name, arrow, values, {"y": "-c"},
                      {"y": lambda r: _negative(r["c"]) if r["c"] is not None else None},
                      f"c > {zero}", lambda r: r["c"] is not None and R.canonical(r["c"]) > 0,
                      numeric=True, floating=floating)


_DOUBLES = (0.0, -0.0, 0.1, -2.5, 1.0 / 3, 1e16, -1e16, 3e-300, 1e200, -1e200, 1.0000000000000002)

TYPES = {t.name: t for t in [
    _numeric("int64", pa.int64(), (0, 1, -1, 3, 2**40, 2**53 + 1, -(2**53 + 1), 7)),
    # finite doubles of mixed magnitudes: a sum that is not exact loses 0.1 next to 1e200
    _numeric("double", pa.float64(), _DOUBLES, floating=True),
    _numeric("double_nan_inf", pa.float64(), _DOUBLES[:6] + (float("nan"), float("inf"), float("-inf")),
             floating=True),
    _numeric("float32", pa.float32(), tuple(_f32(x) for x in (0.0, -0.0, 0.1, -1.25, 16777216.0, 3e38, 1e-30,
                                                            float("inf"))), floating=True),
    _numeric("decimal18_2", pa.decimal128(18, 2),
             tuple(Decimal(x) for x in ("0.00", "-0.01", "0.10", "2.50", "12345678901234.56",
                                        "9999999999999999.99", "-9999999999999999.99"))),
    _numeric("decimal38_10", pa.decimal128(38, 10),
             tuple(Decimal(x) for x in ("0E-10", "-0.0000000001", "0.1000000000", "1234567890123456.0123456789",
                                        "9999999999999999999999999.9999999999",
                                        "-9999999999999999999999999.9999999999"))),
    ColumnType("date", pa.date32(),
               (dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2000, 2, 29), dt.date(1900, 1, 1),
                dt.date(1, 1, 1), dt.date(2262, 4, 12), dt.date(9999, 12, 30)),
               {"y": "date_add(c, 1)"}, {"y": lambda r: r["c"] + dt.timedelta(days=1) if r["c"] is not None else None},
               "c > DATE'2000-01-01'", lambda r: r["c"] is not None and r["c"] > dt.date(2000, 1, 1)),
    # wall-clock times of Berlin's spring gap and autumn repeat: nothing may read them in a zone
    ColumnType("timestamp", pa.timestamp("us"),
               (EPOCH, dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 3, 31, 2, 30),
                dt.datetime(2024, 10, 27, 2, 30), dt.datetime(2000, 1, 1, 0, 0, 0, 1), dt.datetime(1000, 1, 1),
                dt.datetime(2262, 4, 11, 23, 47, 16, 854776)),
               {"y": "c + INTERVAL 1 SECOND"}, {"y": lambda r: _plus_second(r["c"]) if r["c"] is not None else None},
               "unix_micros(c) > 946684800000000", lambda r: r["c"] is not None and _micros(r["c"]) > 946684800000000),
    ColumnType("timestamp_tz", pa.timestamp("us", tz="Europe/Berlin"),
               (_berlin(1970, 1, 1), _berlin(1969, 12, 31, 23), _berlin(2024, 3, 31, 0, 30),
                _berlin(2024, 10, 27, 0, 30), _berlin(2024, 10, 27, 1, 30), _berlin(2000, 1, 1, 0, 0, 0, 1),
                _berlin(1900, 1, 1), _berlin(2262, 4, 11, 23, 47, 16, 854776)),
               {"y": "c + INTERVAL 1 SECOND"}, {"y": lambda r: _plus_second(r["c"]) if r["c"] is not None else None},
               "unix_micros(c) > 946684800000000", lambda r: r["c"] is not None and _micros(r["c"]) > 946684800000000),
    ColumnType("string", pa.string(), ("", "a", "A", "é", "e\u0301", "日本", "🙂", "a ", "ß", "z"),
               {"y": "concat(c, '·')", "n": "length(c)"},
               {"y": lambda r: r["c"] + "·" if r["c"] is not None else None,
                "n": lambda r: len(r["c"]) if r["c"] is not None else None},
               "c > 'm'", lambda r: r["c"] is not None and r["c"] > "m"),
    ColumnType("boolean", pa.bool_(), (True, False), {"y": "NOT c"},
               {"y": lambda r: (not r["c"]) if r["c"] is not None else None}, "c", lambda r: r["c"] is True),
]}

# the groups of types that share a pipeline (a run checks a group's cells at once)
GROUPS = {
    "integers_and_decimals": ["int64", "decimal18_2", "decimal38_10"],
    "floats": ["double", "double_nan_inf", "float32"],
    "dates_and_times": ["date", "timestamp", "timestamp_tz"],
    "text_and_booleans": ["string", "boolean"],
}
