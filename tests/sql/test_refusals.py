"""What a SQL model cannot maintain is refused before Spark starts: one line naming the
file, line and column and why, exit 2, nothing written."""

from __future__ import annotations

import os

import pytest

from tests.helpers.cli import ddcli, ok, one_line_error

# (the query, then where the error points within it: its line, and its column on line 1
# counted from the query's start; the query follows "CREATE MATERIALIZED VIEW out AS ")
REFUSED = [
    ("SELECT k, random() AS r FROM t", 1, 11, "RANDOM() cannot be maintained"),
    ("SELECT k FROM t\n  WHERE d < current_date", 2, 9, "CURRENT_DATE cannot be maintained"),
    ("SELECT k FROM t LIMIT 3", 1, 23, "LIMIT without ORDER BY"),
    ("SELECT k FROM t ORDER BY k LIMIT 2 OFFSET 1", 1, None, "OFFSET is not supported"),
    ("SELECT k FROM u", 1, 15, "no input trace, view or CTE named 'u'"),
    ("SELECT nope FROM t", 1, 8, "no column 'nope'"),
    ("SELECT k, count(*) FROM t GROUP BY k", None, None, "output column 'count' is a reserved name"),
    ("SELECT k FROM t WHERE k NOT IN (SELECT k FROM t AS t2 WHERE t2.v = t.v)", 1, 23, "NOT IN with a correlated"),
    ("SELECT stddev(v) AS s FROM t", 1, 8, "aggregate STDDEV(v)"),
    ("SELECT k FROM t ORDER BY k NULLS FIRST LIMIT 1", 1, 26, "NULLS FIRST"),
    ("SELECT k, sum(v) OVER (ORDER BY d, k RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) AS s FROM t", 1, 36,
     "a RANGE frame with an offset needs exactly one ORDER BY column"),
    ("SELECT k, sum(v) OVER (ORDER BY k RANGE BETWEEN v PRECEDING AND CURRENT ROW) AS s FROM t", 1, 49,
     "a RANGE frame's offset is a constant number >= 0 or an INTERVAL"),
    ("SELECT k, sum(v) OVER (ORDER BY k RANGE BETWEEN -1 PRECEDING AND CURRENT ROW) AS s FROM t", 1, None,
     "a RANGE frame's offset is a constant number >= 0 or an INTERVAL"),
    ("SELECT k, sum(v) OVER (ORDER BY d RANGE BETWEEN INTERVAL 1 MONTH PRECEDING AND CURRENT ROW) AS s FROM t", 1, None,
     "an INTERVAL offset of a RANGE frame is in days, hours, minutes or seconds"),
    ("SELECT k FROM t ORDER BY k FETCH FIRST 2 ROWS WITH TIES", 1, 40, "WITH TIES"),
    ("SELECT k, count(*) AS n FROM t GROUP BY ROLLUP (k)", 1, None, "ROLLUP, CUBE and GROUPING SETS"),
]
PREFIX = "CREATE MATERIALIZED VIEW out AS "


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("refusals")
    data = folder / "t.csv"
    data.write_text("k,v,d,time,diff\n1,2.5,2020-01-01,0,1\n")
    path = str(folder / "store")
    ok(ddcli(path, "ingest", "t", str(data), "--type", "d=date"))
    return path


@pytest.mark.parametrize("query,line,col,why", REFUSED)
def test_refused_in_one_line_with_its_place(tmp_path, store, query, line, col, why):
    model = tmp_path / "m.sql"
    model.write_text(f"{PREFIX}{query};\n")
    before = sorted(os.listdir(store))
    err = one_line_error(ddcli(store, "run", str(model)))
    col = col + len(PREFIX) if col and line == 1 else col
    place = f"m.sql:{line}:{col}: " if col else f"m.sql:{line}:" if line else "m.sql:"
    assert err.startswith(f"error: {place}") and why in err, err
    assert sorted(os.listdir(store)) == before


@pytest.mark.parametrize("query,why", [
    ("SELECT k, sum(v) OVER (ORDER BY v RANGE BETWEEN INTERVAL 1 DAY PRECEDING AND CURRENT ROW) AS s FROM t",
     "an interval offset orders by a date or timestamp, but its order column 'v' is double"),
    ("SELECT k, sum(v) OVER (ORDER BY concat(k, 'x') RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t",
     "offset orders by a number, date or timestamp, but its order column"),
])
def test_a_range_offset_over_an_order_of_the_wrong_type_is_refused(tmp_path, store, query, why):
    """The order column's type is known once the plan is: the error names the model's line."""
    model = tmp_path / "m.sql"
    model.write_text(f"{PREFIX}{query};\n")
    before = sorted(os.listdir(store))
    err = one_line_error(ddcli(store, "run", str(model)))
    assert err.startswith("error: reduce (m.sql:1): ") and why in err, err
    assert sorted(os.listdir(store)) == before


def test_syntax_error_names_line_and_column(tmp_path, store):
    model = tmp_path / "m.sql"
    model.write_text("CREATE MATERIALIZED VIEW out AS\nSELECT k FROM t WHERE (k > ;\n")
    err = one_line_error(ddcli(store, "run", str(model)))
    assert err.startswith("error: m.sql:2:") and "syntax error" in err, err


def test_a_model_holds_views_only(tmp_path, store):
    model = tmp_path / "m.sql"
    model.write_text("CREATE VIEW v AS SELECT k FROM t;\nINSERT INTO t VALUES (1);\n")
    err = one_line_error(ddcli(store, "run", str(model)))
    assert err.startswith("error: m.sql:2:") and "a model holds CREATE [MATERIALIZED] VIEW" in err, err


def test_views_in_a_circle(tmp_path, store):
    model = tmp_path / "m.sql"
    model.write_text("CREATE VIEW a AS SELECT k FROM b;\nCREATE VIEW b AS SELECT k FROM a;\n"
                     "CREATE MATERIALIZED VIEW out AS SELECT k FROM a;\n")
    err = one_line_error(ddcli(store, "run", str(model)))
    assert "views refer to each other in a circle" in err, err


def test_explain_shows_the_operators_of_a_model(tmp_path, store):
    model = tmp_path / "m.sql"
    model.write_text("CREATE MATERIALIZED VIEW out AS\n"
                     "SELECT k, sum(v) AS total FROM t WHERE v > 0 GROUP BY k;\n")
    res = ok(ddcli(store, "explain", str(model)))
    for op in ("input", "filter", "reduce", "output"):
        assert op in res.stdout, res.stdout


def test_a_bare_order_by_is_accepted_and_said_to_be_ignored(tmp_path, store):
    model = tmp_path / "sorted.sql"
    model.write_text("CREATE MATERIALIZED VIEW out AS\nSELECT k, v FROM t\nORDER BY v DESC;\n")
    res = ok(ddcli(store, "explain", str(model)))
    flat = " ".join(res.stdout.split())  # the explanation wraps long lines
    assert "sorted.sql:3:10: view out: ORDER BY without LIMIT is ignored: a collection has no order" in flat, res.stdout
