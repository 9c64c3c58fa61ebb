"""Window functions in SQL models against DuckDB at every time: ROW_NUMBER, RANK and
DENSE_RANK (filtered to a top-n per partition, and not), LAG and LEAD, running SUM, COUNT
and AVG over ROWS and RANGE frames (also ending after the current row, and by value
offset: an INTERVAL over a date, a number over a double in descending order), over random
updates of a table with nulls, ties in the order (RANK's business) and doubles, decimals
and dates."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa

from tests.sql.harness import check_model

MODEL = """
CREATE MATERIALIZED VIEW numbered AS
  SELECT id, g, v,
         row_number() OVER (PARTITION BY g ORDER BY day, id) AS rn,
         rank() OVER (PARTITION BY g ORDER BY day) AS rk,
         dense_rank() OVER (PARTITION BY g ORDER BY day DESC) AS drk
  FROM t;
CREATE MATERIALIZED VIEW first_two AS
  SELECT id, g, day FROM (
    SELECT id, g, day, row_number() OVER (PARTITION BY g ORDER BY day DESC, id) AS rn FROM t) ranked
  WHERE rn <= 2;
CREATE MATERIALIZED VIEW neighbours AS
  SELECT id, lag(v) OVER (PARTITION BY g ORDER BY id) AS before,
         lead(amount, 2, 0) OVER (PARTITION BY g ORDER BY id) AS after2
  FROM t;
CREATE MATERIALIZED VIEW running AS
  SELECT id, g,
         sum(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s3,
         sum(amount) OVER (PARTITION BY g ORDER BY day) AS upto,
         sum(amount) OVER (PARTITION BY g ORDER BY day RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS from_day,
         count(*) OVER (PARTITION BY g) AS n,
         avg(v) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS mean,
         sum(amount) OVER (PARTITION BY g ORDER BY day RANGE BETWEEN INTERVAL 2 DAY PRECEDING AND CURRENT ROW) AS days3,
         count(v) OVER (PARTITION BY g ORDER BY v DESC RANGE BETWEEN 1.5 PRECEDING AND 2 FOLLOWING) AS near_v
  FROM t;
CREATE MATERIALIZED VIEW ahead AS
  SELECT id, g,
         sum(amount) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 1 PRECEDING AND 2 FOLLOWING) AS around,
         count(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS rest,
         avg(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 1 FOLLOWING AND 3 FOLLOWING) AS next3
  FROM t;
"""

SCHEMAS = {"t": pa.schema([("id", pa.int64()), ("g", pa.string()), ("day", pa.date32()), ("v", pa.float64()),
                           ("amount", pa.decimal128(10, 2))])}


def _rows(rng, n: int) -> list[dict]:
    return [{"id": rng.randrange(10**9), "g": None if rng.random() < 0.1 else rng.choice("abc"),
             "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(6)),
             "v": None if rng.random() < 0.1 else rng.choice([0.5, 1.25, -3.0, 1024.0, 0.125]) * rng.randrange(1, 9),
             "amount": decimal.Decimal(rng.randrange(-10**5, 10**5)) / 100} for _ in range(n)]


def test_window_functions_equal_duckdb_at_every_time(tmp_path):
    check_model(tmp_path, MODEL, SCHEMAS, {"t": _rows}, seed=11, first=30, later=8)
