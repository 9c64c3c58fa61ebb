"""Small runs evaluated in the driver (ops/run/in_driver.py), against independent references.

* A SQL model of every operator the driver evaluates (joins, semijoins and antijoins,
  grouped and global aggregates of doubles, decimals, dates and strings, DISTINCT, UNION
  ALL, EXCEPT, scalar subqueries, expressions with CASE, LIKE, SUBSTRING, EXTRACT,
  intervals, casts and division by zero) equals DuckDB at every time over three runs of
  random inserts and retractions with compaction between, in the driver (no Spark job)
  and, with ``DDCLI_DRIVER_ROWS=0``, on Spark.
* Every expression the translation accepts gives Spark's values in DuckDB on random rows
  (nulls, negative zero, NaN, infinities, decimals, dates); those it cannot promise are
  refused.
* A run the driver cannot finish (DuckDB refuses a value, an intermediate collection far
  larger than the change) is Spark's: its result, or its one error line and nothing
  written; and the independent oracle sees a bug planted in the driver's operators.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import os
import random
import shutil
import subprocess
import sys

import pyarrow as pa
import pytest

from ops.run.duckdb_expressions import duckdb_sql
from ops.verify.verify import verify_pipeline
from storage.store import Store
from tests.helpers import REPO
from tests.helpers.cli import cli, ok, one_line_error, write
from tests.helpers.operations import trace_at
from tests.sql.harness import check_model

MODEL = """
CREATE VIEW ab AS SELECT a.k, a.g, a.x, a.d, a.dt, b.y, b.s FROM a JOIN b ON a.k = b.k;
CREATE MATERIALIZED VIEW filtered AS
  SELECT k, g, x * 2 AS x2, y, CASE WHEN y > 50 THEN 'hi' ELSE 'lo' END AS band,
         extract(year FROM dt) AS yr, CAST(dt + INTERVAL 3 DAY AS DATE) AS later, substring(s, 2, 3) AS mid,
         coalesce(x, -1.5) AS cx, -d AS nd, abs(d) AS ad, d * y AS dy
  FROM ab WHERE (s LIKE 'a%' OR d BETWEEN 10 AND 500) AND g IN ('g0', 'g1', 'g2')
    AND dt < DATE '2020-01-01' + INTERVAL 1 YEAR;
CREATE MATERIALIZED VIEW grouped AS
  SELECT g, count(*) AS n, sum(x) AS sx, sum(d) AS sd, avg(d) AS ad, avg(y) AS ay, min(dt) AS lo, max(s) AS hi,
         count(DISTINCT b.k) AS nk, count(x) AS nx
  FROM a JOIN b ON a.k = b.k GROUP BY g HAVING count(*) > 1;
CREATE MATERIALIZED VIEW total AS SELECT sum(x) AS sx, sum(d) AS sd, count(*) AS n, avg(d) AS ad FROM a;
CREATE MATERIALIZED VIEW rare_total AS SELECT count(*) AS n, sum(d) AS sd FROM a WHERE x > 1e5;
CREATE MATERIALIZED VIEW exists_q AS SELECT k, g FROM a WHERE EXISTS (SELECT * FROM b WHERE b.k = a.k AND b.y > 30);
CREATE MATERIALIZED VIEW not_exists AS SELECT k, g FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k);
CREATE MATERIALIZED VIEW in_q AS SELECT k, x FROM a WHERE k IN (SELECT k FROM b WHERE y > 30);
CREATE MATERIALIZED VIEW kinds AS SELECT DISTINCT g, k FROM a;
CREATE MATERIALIZED VIEW ratios AS SELECT a.k, d / y AS per, x / d AS xd, y / (y % 1) AS inf FROM a JOIN b ON a.k = b.k;
CREATE MATERIALIZED VIEW union_all AS SELECT k, g AS name FROM a UNION ALL SELECT k, s FROM b;
CREATE MATERIALIZED VIEW only_a AS SELECT k FROM a EXCEPT SELECT k FROM b;
CREATE MATERIALIZED VIEW above_avg AS SELECT k, y FROM b WHERE y > (SELECT avg(y) FROM b);
"""

SCHEMAS = {"a": pa.schema([("k", pa.int64()), ("g", pa.string()), ("x", pa.float64()),
                           ("d", pa.decimal128(12, 2)), ("dt", pa.date32())]),
           "b": pa.schema([("k", pa.int64()), ("y", pa.int64()), ("s", pa.string())])}


def _rows_a(rng: random.Random, n: int) -> list[dict]:
    return [{"k": None if rng.random() < 0.1 else rng.randrange(10),
             "g": None if rng.random() < 0.1 else f"g{rng.randrange(4)}",
             "x": None if rng.random() < 0.1 else rng.choice([-0.0, 1.0]) * rng.uniform(-1, 1) * 10 ** rng.randrange(-3, 7),
             "d": decimal.Decimal(rng.randrange(-10**6, 10**6)) / 100,
             "dt": datetime.date(2015, 1, 1) + datetime.timedelta(days=rng.randrange(3000))} for _ in range(n)]


def _rows_b(rng: random.Random, n: int) -> list[dict]:
    return [{"k": None if rng.random() < 0.1 else rng.randrange(10), "y": rng.randrange(100),
             "s": None if rng.random() < 0.1 else rng.choice(["apple", "avocado", "banana", "été", "zed"])}
            for _ in range(n)]


@pytest.mark.parametrize("where", ["driver", "spark"])
def test_model_equals_duckdb_at_every_time_in_the_driver_and_on_spark(spark, tmp_path, monkeypatch, where):
    if where == "spark":
        monkeypatch.setenv("DDCLI_DRIVER_ROWS", "0")
    results = check_model(tmp_path, MODEL, SCHEMAS, {"a": _rows_a, "b": _rows_b}, seed=11, runs=3)
    in_driver = [any(s.get("in_driver") for s in r.steps) for r in results]
    jobs = [r.spark_jobs for r in results]
    if where == "driver":
        assert all(in_driver) and jobs == [0, 0, 0], (in_driver, jobs)
    else:
        assert not any(in_driver) and all(j > 0 for j in jobs), (in_driver, jobs)


def test_kept_layer_totals_give_duckdbs_answers_and_live_as_long_as_their_layers(tmp_path, monkeypatch):
    """Every layer keeps its per-key totals for the invertible aggregates (sum, count, avg:
    ops/reduce/summaries/layer_totals.py): the model still equals DuckDB at every time over runs and
    compaction, and garbage collection removes the totals of the layers compaction
    retired, and only those."""
    from ops.reduce.summaries import layer_totals
    from storage.layer import summarised_layer
    monkeypatch.setattr(layer_totals, "MIN_ROWS", 1)
    check_model(tmp_path, MODEL, SCHEMAS, {"a": _rows_a, "b": _rows_b}, seed=12, runs=3)
    store = Store(str(tmp_path / "store"))
    traces = tmp_path / "store" / "traces"
    kept = sorted(str(p) for p in traces.glob("*/*.totals-*"))
    assert kept, "no layer kept its totals"
    store.merge_layers(*{os.path.basename(os.path.dirname(p)) for p in kept}, full=True)  # their layers retired
    live = {p for t in store.state().traces.values() for p in store.layer_paths(t)}
    retired = [p for p in kept if summarised_layer(p) not in live]
    assert retired, "compaction retired no summarised layer: the case proves nothing"
    layer = sorted(p for p in live if p.endswith(".parquet"))[0]  # a live layer's totals stay
    shutil.copy(retired[0], layer + ".totals-0123456789ab")
    kept.append(layer + ".totals-0123456789ab")
    store.collect_garbage(0)
    left = sorted(str(p) for p in traces.glob("*/*.totals-*"))
    assert left == sorted(p for p in kept if summarised_layer(p) in live) and left, (retired, left)


# ---------------------------------------------------------------- the translation, against Spark

EXPRESSIONS = [
    "x * 2 + y - 1", "d * y", "-d", "abs(d)", "d + 0.005", "x = -0.0", "x > 1e3 OR y < 10", "NOT (y BETWEEN 3 AND 40)",
    "x IS NULL", "y IN (1, 2, 3)", "CASE WHEN y > 50 THEN 'hi' WHEN y IS NULL THEN NULL ELSE 'lo' END",
    "IF(x > 0, d, -d)", "coalesce(x, CAST(y AS DOUBLE))", "s LIKE 'a%'", "s LIKE '%an_n%'", "substring(s, 2, 3)",
    "substring(s, 3)", "extract(year FROM dt)", "extract(month FROM dt) + extract(day FROM dt)",
    "CAST(dt + INTERVAL 40 DAY AS DATE)", "dt - INTERVAL '1' MONTH", "dt + INTERVAL 1 YEAR",
    "dt < CAST('2020-02-29' AS DATE) + INTERVAL 1 YEAR", "CAST(d AS DOUBLE)", "CAST(y AS DECIMAL(12, 3))",
    "CAST(d AS DECIMAL(30, 4))", "CAST(y AS SMALLINT)",
    "CASE WHEN CAST(x AS DOUBLE) = 0 THEN CAST(d AS DOUBLE) * (CAST('Infinity' AS DOUBLE) * "
    "SIGN(ATAN2(CAST(x AS DOUBLE), -1))) ELSE CAST(d AS DOUBLE) / CAST(x AS DOUBLE) END",
    "x <=> CAST(y AS DOUBLE)", "y <> 7 AND s IS NOT NULL", "y % 7", "d % 3", "x % 2.5", "(y - 50) % 6",
]
REFUSED = ["upper(s)", "y % 0", "y % d", "d / y", "CAST(s AS INT)", "CAST(y AS STRING)", "s LIKE 'a\\\\_%'",
           "extract(dow FROM dt)", "length(s)", "substring(s, 0, 2)", "x / y", "rand()"]

TYPES = pa.schema([("x", pa.float64()), ("y", pa.int64()), ("d", pa.decimal128(12, 2)), ("s", pa.string()),
                   ("dt", pa.date32())])


def _typed_rows(n: int) -> pa.Table:
    rng = random.Random(5)
    xs = [None, -0.0, 0.0, math.nan, math.inf, -math.inf, 1e-300, -2.5e12]
    return pa.Table.from_pylist([{
        "x": rng.choice(xs) if rng.random() < 0.4 else rng.uniform(-1, 1) * 10 ** rng.randrange(-3, 8),
        "y": None if rng.random() < 0.1 else rng.randrange(-20, 100),
        "d": None if rng.random() < 0.1 else decimal.Decimal(rng.randrange(-10**8, 10**8)) / 100,
        "s": None if rng.random() < 0.1 else rng.choice(["apple", "banana", "été", "", "a", "zz top"]),
        "dt": datetime.date(1999, 1, 31) + datetime.timedelta(days=rng.randrange(9000))} for _ in range(n)],
        schema=TYPES)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, datetime.datetime) and isinstance(b, datetime.datetime):
        return a.replace(tzinfo=None) == b.replace(tzinfo=None)
    return a == b


def test_translated_expressions_give_sparks_values(spark):
    import duckdb
    from pyspark.sql import functions as F

    from pyspark.sql.pandas.types import from_arrow_schema

    from ops.spark.session import get_spark

    rows = _typed_rows(300)  # (the engine's session: another test may have stopped the fixture's)
    df = get_spark().createDataFrame(rows.to_pylist(), schema=from_arrow_schema(TYPES))
    spark_rows = df.select(*[F.expr(e).alias(f"e{i}") for i, e in enumerate(EXPRESSIONS)]).collect()  # one job
    for i, e in enumerate(EXPRESSIONS):
        sql = duckdb_sql(e, TYPES)
        assert sql is not None, e
        theirs = [r[i] for r in spark_rows]
        mine = duckdb.sql(f"SELECT ({sql}) FROM rows").fetchall()
        types = {type(v) for v in theirs if v is not None}
        got = [m[0] for m in mine]
        if datetime.date in types:  # a date compared with a timestamp DuckDB keeps as a timestamp
            got = [v.date() if isinstance(v, datetime.datetime) else v for v in got]
        bad = [(t, g) for t, g in zip(theirs, got) if not _same(t, g)]
        assert not bad, f"{e}: Spark and DuckDB differ: {bad[:3]}"
    for e in REFUSED:
        assert duckdb_sql(e, TYPES) is None, e


# ---------------------------------------------------------------- what leaves the driver


def _ingest_numbers(store: str, tmp_path, values: list[int], t: int) -> None:
    rows = "".join(f"{v},{v % 3},{t},1\n" for v in values)
    ok(cli(store, "ingest", "nums", write(tmp_path / f"n{t}.csv", "v,g,time,diff\n" + rows)))


def _run(store: str, path: str, **env):
    return cli(store, "run", path, "--json", env={"DDCLI_DRIVER_ROWS": None, **env})


def _jobs(res) -> int:
    return json.loads(res.stdout)["spark_jobs"]


def test_a_value_duckdb_refuses_takes_spark_and_its_error(spark, tmp_path):
    store = str(tmp_path / "store")
    path = write(tmp_path / "narrow.py", 'def pipeline(p):\n'
                                         '    n = p.input("nums").select("g", small="CAST(v AS INT)")\n'
                                         '    p.output("o", n.join(n.select("g", other="small"), on="g"))\n')
    _ingest_numbers(store, tmp_path, [1, 2, 3], 0)
    assert _jobs(ok(_run(store, path))) == 0
    _ingest_numbers(store, tmp_path, [2 ** 40], 1)  # no INT: DuckDB refuses it, then Spark does
    before = sorted(os.listdir(os.path.join(store, "log")))
    line = one_line_error(_run(store, path))
    assert "1099511627776" in line and "cannot be cast" in line and "nothing was written" in line, line
    assert sorted(os.listdir(os.path.join(store, "log"))) == before


def test_a_join_far_larger_than_the_change_takes_spark(spark, tmp_path):
    store = str(tmp_path / "store")
    path = write(tmp_path / "square.py", 'def pipeline(p):\n'
                                         '    n = p.input("nums")\n'
                                         '    p.output("o", n.join(n.select("g", w="v"), on="g").count(by="g"))\n')
    _ingest_numbers(store, tmp_path, list(range(30)), 0)  # 30 changes, 300 pairs: over 10 x 5
    assert _jobs(ok(_run(store, path, DDCLI_DRIVER_ROWS="5"))) > 0
    assert trace_at(Store(store), "o", (0,)) == {(0, 100): 1, (1, 100): 1, (2, 100): 1}


def test_the_oracle_sees_a_bug_in_the_drivers_operators(spark, tmp_path, monkeypatch):
    from ops.run import in_driver
    store = str(tmp_path / "store")
    _ingest_numbers(store, tmp_path, [1, 2, 3, 4], 0)
    path = write(tmp_path / "anti.py", 'def pipeline(p):\n    n = p.input("nums")\n'
                                      '    p.output("rest", n.concat(n.filter("g = 1").negate()))\n')
    monkeypatch.setitem(in_driver._EVALUATORS, "negate", in_driver._passed_on)  # the planted bug
    assert _jobs(ok(_run(store, path))) == 0
    v = verify_pipeline(Store(store), path)
    assert not v.ok, "verify agreed with a run whose negate did nothing"
    assert {d.row["v"] for d in v.differences} == {1, 4}


def _command(store: str, *args: str) -> subprocess.CompletedProcess:
    """``ddcli ARGS`` in a process of its own, without a warm engine: a cron line's run."""
    env = dict(os.environ, DDCLI_SERVICE="0", DDCLI_PROGRESS="1", DDCLI_DRIVER_ROWS="100000")
    return subprocess.run([sys.executable, "-m", "ddcli", *args, "--store", store], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_planned_pipeline_runs_a_small_change_in_a_new_process_without_starting_spark(tmp_path):
    store = str(tmp_path / "store")
    path = write(tmp_path / "per_group.py", 'def pipeline(p):\n'
                                            '    n = p.input("nums").select("g", w="v * 2")\n'
                                            '    p.output("o", n.join(n.select("g", z="w"), on="g").count(by="g"))\n')
    _ingest_numbers(store, tmp_path, [1, 2, 3, 4], 0)
    first = _command(store, "run", path, "--json")  # plans on Spark, and keeps the plan in the store
    assert first.returncode == 0, first.stderr
    assert any(s["step"] == "spark_start" for s in json.loads(first.stdout)["steps"])
    (plan,) = os.listdir(os.path.join(store, "plans"))
    _ingest_numbers(store, tmp_path, [5, 6], 1)
    second = _command(store, "run", path, "--json")
    assert second.returncode == 0, second.stderr
    rec = json.loads(second.stdout)
    assert rec["spark_jobs"] == 0 and not any(s["step"] == "spark_start" for s in rec["steps"]), rec["steps"]
    assert "starting Spark" not in second.stderr and "evaluated in the driver" in second.stderr, second.stderr
    assert "by the driver" in second.stderr, second.stderr
    assert trace_at(Store(store), "o", (1,)) == {(0, 4): 1, (1, 4): 1, (2, 4): 1}
    # a kept plan that cannot be read is planned again
    with open(os.path.join(store, "plans", plan), "w") as fh:
        fh.write("{not json")
    _ingest_numbers(store, tmp_path, [7], 2)
    third = _command(store, "run", path, "--json")
    assert third.returncode == 0, third.stderr
    assert any(s["step"] == "spark_start" for s in json.loads(third.stdout)["steps"])
    assert trace_at(Store(store), "o", (2,)) == {(0, 4): 1, (1, 9): 1, (2, 4): 1}
