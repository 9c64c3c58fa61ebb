"""The engine's floor: Spark SQL computing TPC-H's 22 queries once, in one Spark application.

Run as ``python -m ddcli.bench.tpch.spark_sql BASE_DIR [QUERY...]`` (a process of its own, so its peak
memory is its own): it starts the session ddcli's runs use (ops/spark/session.py: the same
settings), registers the base tables' Parquet files, runs each model's views as temporary
views (the DuckDB text written in Spark's dialect by sqlglot) and collects each materialized
view. It prints one JSON object: Spark's start, and per query its seconds and rows (or the
error that stopped it).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time


def spark_statements(text: str) -> tuple[list[str], list[str]]:
    """A model's statements in Spark's dialect, every view a temporary one, and the names
    of its materialized views (the query's answers)."""
    import sqlglot
    answers = re.findall(r"(?i)\bcreate\s+materialized\s+view\s+(\w+)", text)
    plain = re.sub(r"(?i)\bcreate\s+(materialized\s+)?view\b", "CREATE VIEW", text)
    statements = sqlglot.transpile(plain, read="duckdb", write="spark", comments=False)
    return [re.sub(r"(?i)\bCREATE VIEW\b", "CREATE OR REPLACE TEMPORARY VIEW", s, count=1) for s in statements], answers


def main(base: str, only: list[str]) -> dict:
    from ddcli.bench.tpch.data import TABLES, query_files
    from ops.spark.session import get_spark

    t0 = time.perf_counter()
    spark = get_spark()
    out = {"spark_start_s": round(time.perf_counter() - t0, 3), "queries": {}}
    for t in TABLES:
        spark.read.parquet(os.path.join(base, f"{t}.parquet")).createOrReplaceTempView(t)
    for path in query_files():
        query = os.path.basename(path)[:-len(".sql")]
        if only and query not in only:
            continue
        with open(path, encoding="utf-8") as fh:
            statements, answers = spark_statements(fh.read())
        t0 = time.perf_counter()
        try:
            for s in statements:
                spark.sql(s)
            rows = sum(len(spark.sql(f"SELECT * FROM {v}").collect()) for v in answers)
        except Exception as e:  # noqa: BLE001 - one query's failure is a figure, not the end of the run
            out["queries"][query] = {"error": str(e).strip().splitlines()[0][:300]}
            continue
        out["queries"][query] = {"seconds": round(time.perf_counter() - t0, 4), "rows": rows}
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2:])))
    sys.stdout.flush()
    os._exit(0)  # the JVM's shutdown is no part of the figures
