"""Texts of one query as different parties write them compile to the same dataflow (no
Spark): each pair's second text is a spelling the SQL front end maintains through the
first's plan, which tests/sql/test_models.py runs against DuckDB."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ops.explain.operators import summary
from ops.sql.model import load_model

SCHEMAS = {"t": pa.schema([("k", pa.int64()), ("g", pa.string()), ("d", pa.decimal128(12, 2)),
                           ("dt", pa.date32())])}

SAME = [  # (the plan's usual spelling, another party's)
    ("SELECT k, d FROM t ORDER BY d DESC, k LIMIT 3",
     "SELECT k, d FROM t ORDER BY d DESC, k FETCH FIRST 3 ROWS ONLY"),
    ("SELECT k FROM t ORDER BY k LIMIT 1", "SELECT k FROM t ORDER BY k FETCH NEXT ROW ONLY"),
    ("SELECT DISTINCT g, k FROM t", "SELECT g, k FROM t GROUP BY g, k"),
    ("SELECT g FROM (SELECT DISTINCT g FROM t) AS s WHERE g > 'a'", "SELECT g FROM t GROUP BY g HAVING g > 'a'"),
]


def plan(query: str) -> list[str]:
    p = load_model("m.sql", "m", f"CREATE MATERIALIZED VIEW out AS {query};", SCHEMAS.get)
    return [summary(n) for n in p.nodes]


@pytest.mark.parametrize("usual,other", SAME)
def test_other_spellings_compile_to_the_same_dataflow(usual, other):
    assert plan(other) == plan(usual)
