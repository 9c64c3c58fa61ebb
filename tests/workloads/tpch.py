"""TPC-H with refresh streams: the outside reference of whole workloads (docs/architecture.md).

The tables and their refreshes come from the benchmark's generator (ddcli/bench/tpch/data.py:
``tpchgen-cli``'s Parquet base, refreshes that delete and insert orders with their lineitems
and move customers, each as an update file the store ingests and DuckDB applies to its copy of
the tables). DuckDB answers the queries from scratch on those tables: it is the reference, and
nothing here imports the code it checks (the generator only writes data).
"""

from __future__ import annotations

import math
from decimal import Decimal

from ddcli.bench.tpch.data import CHANGING, TABLES, Tables, generate

__all__ = ["CHANGING", "TABLES", "Reference", "generate", "same_rows"]


class Reference(Tables):
    """The TPC-H tables in DuckDB, changed by the same refreshes the store ingests."""

    def answer(self, sql: str) -> list[tuple]:
        return self.con.sql(sql).fetchall()


def same_rows(want: list[tuple], got: list[tuple], rel: float = 1e-12) -> str | None:
    """None when the two bags of rows agree (decimals and everything else exactly, doubles
    within ``rel`` of each other), else the first difference in words."""
    want, got = sorted(want, key=_order), sorted(got, key=_order)
    if len(want) != len(got):
        return f"{len(want)} rows expected, {len(got)} found: expected {want[:3]}..., found {got[:3]}..."
    for a, b in zip(want, got):
        if len(a) != len(b) or not all(_same(x, y, rel) for x, y in zip(a, b)):
            return f"expected {a}, found {b}"
    return None


def _same(x, y, rel: float) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        if x is None or y is None:
            return x is y
        if float(x) == float(y) or (math.isnan(float(x)) and math.isnan(float(y))):  # infinities, NaN
            return True
        return abs(float(x) - float(y)) <= rel * max(abs(float(x)), abs(float(y)), 1e-300)
    if isinstance(x, Decimal) or isinstance(y, Decimal):
        return x is not None and y is not None and Decimal(x) == Decimal(y)
    return x == y


def _order(row):
    return tuple((v is None, str(v) if not isinstance(v, (int, float, Decimal)) else
                  (math.isnan(float(v)), 0.0 if math.isnan(float(v)) else float(v))) for v in row)
