"""SQL models against DuckDB at every time: one model of many views (WITH, derived tables,
USING and CROSS joins, outer joins, GROUP BY with several aggregates and HAVING, global aggregates over
an empty input (one row: counts 0, the rest NULL), subqueries of every kind, set operations,
DISTINCT, ORDER BY ... LIMIT, WITH RECURSIVE, division by zero as IEEE divides, a date shifted
by an interval as a timestamp) over random tables of mixed column types
(nulls in keys and values, doubles of mixed magnitudes, decimals, dates, strings) changed
by inserts and retractions over two runs of two times each, with compaction between. After every run,
each view's trace at every time equals DuckDB running the same statements on the tables as
they were then."""

from __future__ import annotations

import datetime
import decimal
import random

import pyarrow as pa

from tests.sql.harness import check_model

MODEL = """
-- every construct the SQL front end maintains, one view each
CREATE VIEW ab AS SELECT a.k, a.g, a.x, a.d, b.y, b.s FROM a JOIN b ON a.k = b.k;
CREATE MATERIALIZED VIEW filtered AS
  SELECT a.k, g, x * 2 AS x2, y, CASE WHEN y > 50 THEN 'hi' ELSE 'lo' END AS band,
         extract(year FROM dt) AS yr, CAST(dt + INTERVAL 3 DAY AS DATE) AS later, upper(s) AS us
  FROM a, b WHERE a.k = b.k AND (s LIKE 'a%' OR d BETWEEN 10 AND 500) AND g IN ('g0', 'g1', 'g2');
CREATE MATERIALIZED VIEW grouped AS
  SELECT g, count(*) AS n, sum(x) AS sx, sum(d) AS sd, avg(y) AS ay, min(dt) AS lo, max(s) AS hi,
         count(DISTINCT b.k) AS nk, count(x) AS nx
  FROM a JOIN b ON a.k = b.k GROUP BY g HAVING count(*) > 1;
CREATE MATERIALIZED VIEW by_expr AS
  SELECT y % 3 AS bucket, sum(d) * 2 AS twice, count(*) AS n FROM ab GROUP BY y % 3;
CREATE MATERIALIZED VIEW total AS SELECT sum(x) AS sx, count(*) AS n, max(dt) AS hi FROM a;
CREATE MATERIALIZED VIEW left_j AS SELECT a.k, a.x, b.y FROM a LEFT JOIN b ON a.k = b.k AND b.y > 20;
CREATE MATERIALIZED VIEW left_residual AS
  SELECT a.k, a.g, b.y FROM a LEFT JOIN b ON a.k = b.k AND b.y > a.x;
CREATE MATERIALIZED VIEW full_j AS SELECT a.k AS ak, b.k AS bk, a.g, b.s FROM a FULL OUTER JOIN b ON a.k = b.k;
CREATE MATERIALIZED VIEW right_j AS SELECT a.g, b.k, b.y FROM a RIGHT JOIN b ON a.k = b.k;
CREATE MATERIALIZED VIEW full_using AS SELECT * FROM a FULL JOIN b USING (k);
CREATE MATERIALIZED VIEW right_using AS SELECT k, a.g, b.y FROM a RIGHT JOIN b USING (k) WHERE b.y > 10;
CREATE MATERIALIZED VIEW exists_q AS
  SELECT k, g FROM a WHERE EXISTS (SELECT * FROM b WHERE b.k = a.k AND b.y > a.x);
CREATE MATERIALIZED VIEW not_exists AS SELECT k, g FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k);
CREATE MATERIALIZED VIEW in_q AS SELECT k, x FROM a WHERE k IN (SELECT k FROM b WHERE y > 30);
CREATE MATERIALIZED VIEW not_in AS SELECT k, x FROM a WHERE k NOT IN (SELECT k FROM b WHERE y > 80);
CREATE MATERIALIZED VIEW above_avg AS SELECT k, y FROM b WHERE y > (SELECT avg(y) FROM b);
CREATE MATERIALIZED VIEW key_max AS
  SELECT k, y FROM b WHERE y >= (SELECT max(b2.y) FROM b AS b2 WHERE b2.k = b.k);
CREATE MATERIALIZED VIEW with_count AS SELECT k, g, (SELECT count(*) FROM b) AS nb FROM a;
CREATE MATERIALIZED VIEW unioned AS SELECT k FROM a UNION SELECT k FROM b;
CREATE MATERIALIZED VIEW union_all AS SELECT k, g AS name FROM a UNION ALL SELECT k, s FROM b;
CREATE MATERIALIZED VIEW both_sides AS SELECT k FROM a INTERSECT SELECT k FROM b;
CREATE MATERIALIZED VIEW only_a AS SELECT k FROM a EXCEPT SELECT k FROM b;
CREATE MATERIALIZED VIEW kinds AS SELECT DISTINCT g, k FROM a;
CREATE MATERIALIZED VIEW top3 AS SELECT k, y, s FROM b ORDER BY y DESC, k, s LIMIT 3;
CREATE MATERIALIZED VIEW with_cte AS
  WITH big AS (SELECT k, y FROM b WHERE y > 40)
  SELECT s.k, s.total, a.g FROM (SELECT k, sum(y) FROM big GROUP BY k) AS s(k, total) JOIN a USING (k);
CREATE MATERIALIZED VIEW corr_select AS SELECT k, g, (SELECT max(y) FROM b WHERE b.k = a.k) AS top_y FROM a;
CREATE MATERIALIZED VIEW crossed AS
  SELECT a.k AS ak, t.n FROM a CROSS JOIN (SELECT count(*) AS n FROM b) t WHERE a.g = 'g1';
CREATE MATERIALIZED VIEW ratios AS
  SELECT a.k, x / (y % 3) AS by_zero, d / y AS per, (x / y) / d AS nested,
         dt + INTERVAL 1 MONTH AS next_month, dt - INTERVAL '2' DAY AS before
  FROM a JOIN b ON a.k = b.k ORDER BY a.k;
-- global aggregates have one row at every time, also over no rows: c is empty at the first
-- time, has rows at the second, none from the third on (retracted in the second run)
CREATE MATERIALIZED VIEW c_total AS
  SELECT count(*) AS n, sum(v) AS sv, sum(p) AS sp, avg(p) AS ap, min(dt) AS lo, max(s) AS hi,
         count(DISTINCT s) AS ns, count(v) AS nv FROM c;
CREATE MATERIALIZED VIEW c_having AS SELECT count(*) AS n FROM c HAVING count(*) > 0;
CREATE MATERIALIZED VIEW rare_total AS SELECT count(*) AS n, sum(d) AS sd, max(g) AS hi FROM a WHERE x > 1e5;
CREATE MATERIALIZED VIEW below_c AS SELECT k, y FROM b WHERE y < (SELECT 20 * avg(v) FROM c);
CREATE MATERIALIZED VIEW with_nc AS SELECT k, g, (SELECT count(*) FROM c) AS nc FROM a WHERE g = 'g2';
CREATE MATERIALIZED VIEW reach AS
  WITH RECURSIVE r(n) AS (
    SELECT k FROM a WHERE g = 'g0'
    UNION
    SELECT b.y % 10 FROM r JOIN b ON b.k = r.n)
  SELECT n FROM r;
"""

def _rows_a(rng: random.Random, n: int) -> list[dict]:
    return [{"k": None if rng.random() < 0.1 else rng.randrange(10),
             "g": None if rng.random() < 0.1 else f"g{rng.randrange(4)}",
             "x": None if rng.random() < 0.1 else rng.uniform(-1, 1) * 10 ** rng.randrange(-3, 7),
             "d": decimal.Decimal(rng.randrange(-10**6, 10**6)) / 100,
             "dt": datetime.date(1990, 1, 1) + datetime.timedelta(days=rng.randrange(20000))} for _ in range(n)]


def _rows_b(rng: random.Random, n: int) -> list[dict]:
    return [{"k": None if rng.random() < 0.1 else rng.randrange(10),
             "y": rng.randrange(100),
             "s": None if rng.random() < 0.1 else rng.choice(["apple", "avocado", "banana", "été", "zed"])}
            for _ in range(n)]


def _rows_c():
    """A maker for table c: rows at its second time only (the harness then retracts them all)."""
    calls = []

    def make(rng: random.Random, n: int) -> list[dict]:
        calls.append(n)
        if len(calls) != 2:
            return []
        return [{"v": rng.choice([None, 0.5, 2.0 ** 40, -3.25]), "p": decimal.Decimal(rng.randrange(-999, 999)) / 100,
                 "dt": datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(9)),
                 "s": rng.choice([None, "x", "y"])} for _ in range(3)]
    return make


SCHEMAS = {"a": pa.schema([("k", pa.int64()), ("g", pa.string()), ("x", pa.float64()),
                           ("d", pa.decimal128(12, 2)), ("dt", pa.date32())]),
           "b": pa.schema([("k", pa.int64()), ("y", pa.int64()), ("s", pa.string())]),
           "c": pa.schema([("v", pa.float64()), ("p", pa.decimal128(9, 2)), ("dt", pa.date32()), ("s", pa.string())])}


def test_sql_model_equals_duckdb_at_every_time(tmp_path):
    check_model(tmp_path, MODEL, SCHEMAS, {"a": _rows_a, "b": _rows_b, "c": _rows_c()}, seed=7)
