"""TPC-H with refresh streams: the outside reference of whole workloads (docs/architecture.md).

``tpchgen-cli`` writes the base tables as Parquet (decimals, dates, strings as TPC-H types
them); each refresh deletes some orders with their lineitems, inserts as many new ones (copies
of others under new keys) and moves some customers to another segment and nation. DuckDB
keeps the same tables and answers the queries from scratch: it is the reference, and nothing
here imports the code it checks.
"""

from __future__ import annotations

import math

import os
import random
import shutil
import subprocess
from decimal import Decimal

import duckdb
import pytest

TABLES = ["lineitem", "orders", "customer", "nation", "region", "supplier", "part", "partsupp"]
CHANGING = ["orders", "lineitem", "customer"]


def generate(folder: str, scale: float) -> str:
    """The base tables of scale factor ``scale`` as Parquet files in ``folder``."""
    exe = shutil.which("tpchgen-cli")
    if exe is None:  # installed with the test extra: its absence is a broken set-up, not a skip
        pytest.fail("tpchgen-cli is not installed (pip install -e '.[test]')")
    subprocess.run([exe, "parquet", "-s", str(scale), f"--output-dir={folder}"], check=True,
                   capture_output=True)
    return folder


class Reference:
    """The TPC-H tables in DuckDB, changed by the same refreshes the store ingests."""

    def __init__(self, base: str, work: str, orders_per_refresh: int = 15, customers_per_refresh: int = 5):
        self.work = work
        self.con = duckdb.connect()
        for t in TABLES:
            self.con.execute(f"CREATE TABLE {t} AS SELECT * FROM '{os.path.join(base, t)}.parquet'")
        self.n_orders, self.n_customers = orders_per_refresh, customers_per_refresh

    def refresh(self, r: int) -> dict[str, str]:
        """Refresh ``r`` as update files at time ``r`` (table -> path), applied here too."""
        rng = random.Random(f"tpch-refresh-{r}")
        keys = [k for (k,) in self.con.sql("SELECT o_orderkey FROM orders ORDER BY 1").fetchall()]
        gone, copied = rng.sample(keys, self.n_orders), rng.sample(keys, self.n_orders)
        new_key = " ".join(f"WHEN {k} THEN {keys[-1] + 1 + i}" for i, k in enumerate(copied))
        customers = [k for (k,) in self.con.sql("SELECT c_custkey FROM customer ORDER BY 1").fetchall()]
        moved = rng.sample(customers, self.n_customers)
        sets = {
            "orders": (f"o_orderkey IN ({_list(gone)})",
                       f"SELECT * REPLACE (CASE o_orderkey {new_key} END AS o_orderkey) FROM orders "
                       f"WHERE o_orderkey IN ({_list(copied)})"),
            "lineitem": (f"l_orderkey IN ({_list(gone)})",
                         f"SELECT * REPLACE (CASE l_orderkey {new_key} END AS l_orderkey) FROM lineitem "
                         f"WHERE l_orderkey IN ({_list(copied)})"),
            "customer": (f"c_custkey IN ({_list(moved)})",
                         "SELECT * REPLACE (CASE WHEN c_mktsegment = 'BUILDING' THEN 'MACHINERY' ELSE 'BUILDING' END "
                         f"AS c_mktsegment, (c_nationkey + 7) % 25 AS c_nationkey) FROM customer "
                         f"WHERE c_custkey IN ({_list(moved)})"),
        }
        files = {}
        for table, (gone_where, inserted) in sets.items():
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE gone AS SELECT * FROM {table} WHERE {gone_where}")
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE added AS {inserted}")
            path = os.path.join(self.work, f"{table}_{r}.parquet")
            self.con.execute(f"COPY (SELECT *, {r}::BIGINT AS time, -1::BIGINT AS diff FROM gone UNION ALL "
                             f"SELECT *, {r}::BIGINT AS time, 1::BIGINT AS diff FROM added) TO '{path}'")
            self.con.execute(f"DELETE FROM {table} WHERE {gone_where}")
            self.con.execute(f"INSERT INTO {table} SELECT * FROM added")
            files[table] = path
        return files

    def answer(self, sql: str) -> list[tuple]:
        return self.con.sql(sql).fetchall()


def _list(keys) -> str:
    return ", ".join(str(int(k)) for k in keys)


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
