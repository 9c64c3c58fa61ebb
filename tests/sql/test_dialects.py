"""Texts of one query as different parties write them compile to the same dataflow (no
Spark): each pair's second text is a spelling the SQL front end maintains through the
first's plan, which tests/sql/test_models.py runs against DuckDB."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from ops.errors import PipelineError
from ops.explain.operators import summary
from ops.sql.model import load_model

SCHEMAS = {"t": pa.schema([("k", pa.int64()), ("g", pa.string()), ("d", pa.decimal128(12, 2)),
                           ("dt", pa.date32())])}

SAME = [  # (the plan's usual spelling, another party's)
    ("SELECT k, d FROM t ORDER BY d DESC, k LIMIT 3",
     "SELECT k, d FROM t ORDER BY d DESC, k FETCH FIRST 3 ROWS ONLY"),
    ("SELECT k FROM t ORDER BY k LIMIT 1", "SELECT k FROM t ORDER BY k FETCH NEXT ROW ONLY"),
    ("SELECT k FROM t WHERE dt <= date '1998-12-01' - interval '90' day",
     "SELECT k FROM t WHERE dt <= date '1998-12-01' - interval '90' day (3)"),
    ("SELECT k FROM t WHERE dt < date '1994-01-01' + interval '1' year",
     "SELECT k FROM t WHERE dt < date '1994-01-01' + interval '1' year (2)"),
    ("SELECT DISTINCT g, k FROM t", "SELECT g, k FROM t GROUP BY g, k"),
    ("SELECT g FROM (SELECT DISTINCT g FROM t) AS s WHERE g > 'a'", "SELECT g FROM t GROUP BY g HAVING g > 'a'"),
    ("SELECT g, k, sum(d) AS s FROM t GROUP BY g, k", "SELECT g, k, sum(d) AS s FROM t GROUP BY ALL"),
    ("SELECT g, k, sum(d) AS s FROM t GROUP BY g, k ORDER BY g, k, s LIMIT 2",
     "SELECT g, k, sum(d) AS s FROM t GROUP BY ALL ORDER BY ALL LIMIT 2"),
    ("SELECT g, sum(CASE WHEN k > 1 THEN d END) AS s, count(CASE WHEN k > 1 THEN 1 END) AS n, sum(d) AS a FROM t GROUP BY g",
     "SELECT g, sum(d) FILTER (WHERE k > 1) AS s, count(*) FILTER (WHERE k > 1) AS n, sum(d) AS a FROM t GROUP BY g"),
]


HELPER = "CREATE VIEW v (key, total) AS SELECT k, sum(d) FROM t GROUP BY k;\n"
SAME_MODELS = [  # whole models: a helper view dropped at the end, as TPC-H's Q15 is written
    (HELPER + "CREATE MATERIALIZED VIEW out AS SELECT key FROM v WHERE total = (SELECT max(total) FROM v);",
     HELPER + "CREATE MATERIALIZED VIEW out AS SELECT key FROM v WHERE total = (SELECT max(total) FROM v);\n"
              "DROP VIEW v;\nDROP VIEW IF EXISTS gone;"),
]


def plan(query: str) -> list[str]:
    return plan_model(f"CREATE MATERIALIZED VIEW out AS {query};")


def plan_model(text: str) -> list[str]:
    p = load_model("m.sql", "m", text, SCHEMAS.get)
    return [summary(n) for n in p.nodes]


@pytest.mark.parametrize("usual,other", SAME)
def test_other_spellings_compile_to_the_same_dataflow(usual, other):
    assert plan(other) == plan(usual)


@pytest.mark.parametrize("usual,other", SAME_MODELS)
def test_other_models_compile_to_the_same_dataflow(usual, other):
    assert plan_model(other) == plan_model(usual)


@pytest.mark.parametrize("drops,why", [
    ("DROP VIEW out;", "DROP VIEW out: a model drops only a (not materialized) view it declares"),
    ("DROP VIEW w;", "DROP VIEW w: a model drops only"),
    ("DROP VIEW v;\nCREATE VIEW w AS SELECT k FROM t;", "not DROP"),
])
def test_a_model_drops_only_its_own_views_at_its_end(drops, why):
    with pytest.raises(PipelineError, match=re.escape(why)):
        plan_model(HELPER + "CREATE MATERIALIZED VIEW out AS SELECT key FROM v;\n" + drops)
