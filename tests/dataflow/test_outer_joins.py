"""The Python API's outer joins and joins on keys named differently on each side, against
DuckDB's LEFT, RIGHT and FULL OUTER JOIN at every time of random updates (nulls in keys,
keys missing on either side, retractions, two runs with compaction between)."""

from __future__ import annotations

import pyarrow as pa

from tests.sql.harness import check_model

PIPELINE = '''
def pipeline(p):
    a, b = p.input("a"), p.input("b")
    p.output("lj", a.left_join(b, on=[("ak", "bk")]))
    p.output("rj", a.right_join(b.select(k="bk", y="y"), on=[("ak", "k")]))
    p.output("fj", a.full_join(b, on=[("ak", "bk")]))
    p.output("ij", a.join(b, on=[("ak", "bk")]).select("ak", "x", "y"))
'''

# DuckDB's answers, columns as the pipeline names them (a join's key keeps the left name;
# a RIGHT or FULL join's key holds whichever side's value the row has)
REFERENCE = """
CREATE MATERIALIZED VIEW lj AS SELECT a.ak, a.x, b.y FROM a LEFT JOIN b ON a.ak = b.bk;
CREATE MATERIALIZED VIEW rj AS SELECT b.bk AS ak, a.x, b.y FROM a RIGHT JOIN b ON a.ak = b.bk;
CREATE MATERIALIZED VIEW fj AS SELECT coalesce(a.ak, b.bk) AS ak, a.x, b.y FROM a FULL JOIN b ON a.ak = b.bk;
CREATE MATERIALIZED VIEW ij AS SELECT a.ak, a.x, b.y FROM a JOIN b ON a.ak = b.bk;
"""

SCHEMAS = {"a": pa.schema([("ak", pa.int64()), ("x", pa.string())]),
           "b": pa.schema([("bk", pa.int64()), ("y", pa.float64())])}


def _a(rng, n):
    return [{"ak": None if rng.random() < 0.15 else rng.randrange(8), "x": rng.choice(["p", "q", None])}
            for _ in range(n)]


def _b(rng, n):
    return [{"bk": None if rng.random() < 0.15 else rng.randrange(4, 12), "y": rng.choice([0.5, 2.25, None])}
            for _ in range(n)]


def test_outer_joins_equal_duckdb_at_every_time(tmp_path):
    check_model(tmp_path, REFERENCE, SCHEMAS, {"a": _a, "b": _b}, seed=3, first=12, later=5, pipeline=PIPELINE)
