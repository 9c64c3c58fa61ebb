"""Columns no clause of a query names are dropped where their FROM item enters (no Spark):
joins and reduces then arrange and store only what the query reads. A star the query
selects keeps every column (its output needs them); a star inside EXISTS, or count(*),
keeps none. The answers stay DuckDB's: tests/sql/test_models.py and test_in_driver.py
run models with unused columns against it."""

from __future__ import annotations

import pyarrow as pa

from ops.explain.schemas import planned_schemas
from ops.sql.model import load_model

SCHEMAS = {"a": pa.schema([("k", pa.int64()), ("x", pa.int64()), ("junk_a", pa.string())]),
           "b": pa.schema([("k", pa.int64()), ("y", pa.decimal128(12, 2)), ("junk_b", pa.string())])}


def columns_read(query: str) -> set[str]:
    """The input columns that reach the operators past the inputs' first projection: those
    a join, a reduce or the output receives (renamed copies, ``b__k``, count as theirs)."""
    p = load_model("m.sql", "m", f"CREATE MATERIALIZED VIEW o AS {query};", SCHEMAS.get)
    schemas = planned_schemas(p, {n: s for n, s in SCHEMAS.items()})
    seen: set[str] = set()
    for n in p.nodes:
        if n.op in ("join", "semijoin", "antijoin", "reduce", "distinct", "output"):
            for i in n.inputs:
                seen |= {c.split("__")[-1] for c in schemas[i.id].names}
    return seen & {"k", "x", "y", "junk_a", "junk_b"}


def test_unnamed_columns_are_dropped_where_tables_enter():
    joined = ("SELECT a.k, sum(y) AS s, count(*) AS n FROM a JOIN b ON a.k = b.k "
              "WHERE EXISTS (SELECT * FROM b b2 WHERE b2.k = a.k AND b2.y > 0) GROUP BY a.k")
    assert columns_read(joined) == {"k", "y"}
    assert columns_read("SELECT count(*) AS n FROM a") <= {"k"}, "a count of rows keeps one column"
    # junk_b is read by the subquery's filter, before its rows reach the semijoin
    assert columns_read("SELECT x FROM a WHERE k IN (SELECT k FROM b WHERE junk_b = 'z')") == {"k", "x"}


def test_a_star_the_query_selects_keeps_every_column():
    assert {"junk_a", "junk_b"} <= columns_read("SELECT * FROM a JOIN b USING (k)")
    assert "junk_a" in columns_read("SELECT a.* FROM a WHERE x > 1")
