"""TPC-H's tables and their refreshes, as update files both engines read.

``tpchgen-cli`` writes the base tables of a scale factor as Parquet (decimals, dates and
strings as TPC-H types them), once per cache folder. :class:`Tables` keeps the same tables in
DuckDB and builds each refresh there, columnarly: it deletes some orders with their
lineitems, inserts as many new ones (copies of others under new keys, so their values follow
TPC-H's distributions) and moves some customers to another segment and nation; each refresh
is one Parquet update file per changed table (``time`` the refresh, ``diff`` -1 or +1), and
the DuckDB tables change with it, so they hold what a store holds after ingesting the files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

TABLES = ["lineitem", "orders", "customer", "nation", "region", "supplier", "part", "partsupp"]
CHANGING = ["orders", "lineitem", "customer"]  # the tables a refresh changes; the others never change
QUERIES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "queries")


class GenerationError(RuntimeError):
    """tpchgen-cli is missing or failed."""


def query_files() -> list[str]:
    """The 22 queries as SQL models (``q01.sql`` ... ``q22.sql``), in order."""
    return sorted(os.path.join(QUERIES_DIR, f) for f in os.listdir(QUERIES_DIR) if f.endswith(".sql"))


def generate(folder: str, scale: float) -> str:
    """The base tables of scale factor ``scale`` as ``folder/TABLE.parquet``; generated
    only when ``folder`` does not hold them yet (written aside, then renamed into place, so
    an interrupted generation leaves nothing half-written)."""
    if all(os.path.exists(os.path.join(folder, f"{t}.parquet")) for t in TABLES):
        return folder
    beside = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")  # installed in this environment
    exe = beside if os.access(beside, os.X_OK) else shutil.which("tpchgen-cli")
    if exe is None:
        raise GenerationError("tpchgen-cli is not installed: pip install 'ddcli[bench]'")
    parent = os.path.dirname(os.path.abspath(folder))
    os.makedirs(parent, exist_ok=True)
    aside = tempfile.mkdtemp(prefix=".tpchgen-", dir=parent)
    try:
        res = subprocess.run([exe, "parquet", "-s", str(scale), f"--output-dir={aside}"], capture_output=True,
                             text=True, stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            raise GenerationError(f"tpchgen-cli -s {scale} failed: {res.stderr.strip()[-500:]}")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(aside, folder)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return folder


def _picked(column: str, table: str, n: int, seed: str) -> str:
    """SQL for ``n`` values of ``column`` chosen at random but reproducibly (by a hash)."""
    return f"SELECT {column} AS k FROM {table} ORDER BY hash({column}, '{seed}'), {column} LIMIT {int(n)}"


class Tables:
    """The TPC-H tables in DuckDB (``con``), changed by the refreshes a store ingests."""

    def __init__(self, base: str, work: str, orders_per_refresh: int = 15, customers_per_refresh: int = 5):
        import duckdb
        self.work = work
        self.con = duckdb.connect()
        for t in TABLES:
            self.con.execute(f"CREATE TABLE {t} AS SELECT * FROM read_parquet('{os.path.join(base, t)}.parquet')")
        self.n_orders, self.n_customers = orders_per_refresh, customers_per_refresh

    def refresh(self, r: int) -> dict[str, str]:
        """Refresh ``r`` as update files at time ``r`` (table -> path), applied here too."""
        con = self.con
        con.execute(f"CREATE OR REPLACE TEMP TABLE gone AS {_picked('o_orderkey', 'orders', self.n_orders, f'gone-{r}')}")
        top = con.sql("SELECT max(o_orderkey) FROM orders").fetchall()[0][0]
        con.execute(f"CREATE OR REPLACE TEMP TABLE copied AS SELECT k, {top} + row_number() OVER (ORDER BY k) AS new_k "
                    f"FROM ({_picked('o_orderkey', 'orders', self.n_orders, f'copied-{r}')})")
        con.execute("CREATE OR REPLACE TEMP TABLE moved AS "
                    f"{_picked('c_custkey', 'customer', self.n_customers, f'moved-{r}')}")
        sets = {
            "orders": ("o_orderkey IN (SELECT k FROM gone)",
                       "SELECT o.* REPLACE (c.new_k AS o_orderkey) FROM orders o JOIN copied c ON o.o_orderkey = c.k"),
            "lineitem": ("l_orderkey IN (SELECT k FROM gone)",
                         "SELECT l.* REPLACE (c.new_k AS l_orderkey) FROM lineitem l JOIN copied c ON l.l_orderkey = c.k"),
            "customer": ("c_custkey IN (SELECT k FROM moved)",
                         "SELECT * REPLACE (CASE WHEN c_mktsegment = 'BUILDING' THEN 'MACHINERY' ELSE 'BUILDING' END "
                         "AS c_mktsegment, (c_nationkey + 7) % 25 AS c_nationkey) FROM customer "
                         "WHERE c_custkey IN (SELECT k FROM moved)"),
        }
        files = {}
        for table, (gone_where, inserted) in sets.items():
            con.execute(f"CREATE OR REPLACE TEMP TABLE removed AS SELECT * FROM {table} WHERE {gone_where}")
            con.execute(f"CREATE OR REPLACE TEMP TABLE added AS {inserted}")
            path = os.path.join(self.work, f"{table}_{r}.parquet")
            con.execute(f"COPY (SELECT *, {r}::BIGINT AS time, -1::BIGINT AS diff FROM removed UNION ALL "
                        f"SELECT *, {r}::BIGINT AS time, 1::BIGINT AS diff FROM added) TO '{path}' (FORMAT parquet)")
            con.execute(f"DELETE FROM {table} WHERE {gone_where}")
            con.execute(f"INSERT INTO {table} SELECT * FROM added")
            files[table] = path
        return files
