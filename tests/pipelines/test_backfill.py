"""The backfill of ``ddcli bench backfill`` (docs/bench/backfill.json), small: sum and count
of trips by (grp, route) joined into an average, then the top 3 routes per group by it.

Two runs of a week of days each, with trips corrected later (retractions), routes whose
averages tie (the top 3 breaks ties by route), the store advanced and compacted between
them; every output at every day equals the plain-Python reference (tests/helpers/reference.py)
and ``verify`` agrees. The bench's own yardstick, DuckDB's SQL, is checked against the same
reference, so the bench's comparison cannot agree with a wrong answer.
"""

from __future__ import annotations

import random

import pyarrow as pa

from ddcli.bench.against_duckdb.backfill import PIPELINE, REFERENCE_SQL
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench

TRIPS = pa.schema([("route", pa.int64()), ("grp", pa.int64()), ("amount", pa.int64())])


def backfill_ref(i):
    trips = i["trips"]
    total = R.sum_(trips, ["grp", "route"], "amount", "total")
    n = R.count(trips, ["grp", "route"])
    avg = R.select(R.join(total, n, ["grp", "route"]), "grp", "route", avg=lambda r: float(r["total"]) / r["count"])
    return {"avg": avg, "top3": R.top_k(avg, "grp", 3, "avg", descending=True)}


def trips_of(rng, days, pool):
    """A few trips a day over 7 routes in 2 groups (amounts from a small set, so averages
    tie), and corrections: a trip of an earlier day retracted."""
    out = []
    for day in days:
        for _ in range(rng.randrange(2, 7)):
            route = rng.randrange(7)
            row = (route, route % 2, rng.choice((10, 20, 30)))
            out.append((row, (day,), 1))
            pool.append(row)
        if pool and rng.random() < 0.5:
            out.append((pool.pop(rng.randrange(len(pool))), (day,), -1))
    return out


def test_the_backfill_pipeline_equals_the_reference_at_every_day(spark, tmp_path):
    rng = random.Random(5)
    bench = Bench(tmp_path)
    path = bench.pipeline("backfill", PIPELINE)
    pool: list = []
    for r in range(2):
        bench.ingest("trips", TRIPS, trips_of(rng, range(7 * r, 7 * r + 7), pool))
        assert not bench.run(path).nothing_to_do
        bench.check(path, backfill_ref, ["avg", "top3"], verify=r == 1)
        if r == 0:
            bench.advance_and_compact("4", full=True)


def test_the_bench_duckdb_sql_equals_the_reference_at_every_day():
    """REFERENCE_SQL (the bench's check and yardstick) on insert-only trips, as the bench
    draws them, against the plain reference at every day."""
    import duckdb
    rng = random.Random(9)
    updates = trips_of(rng, range(12), [])
    updates = [u for u in updates if u[2] > 0]
    con = duckdb.connect()
    con.register("trips", pa.table({"route": [u[0][0] for u in updates], "grp": [u[0][1] for u in updates],
                                    "amount": [u[0][2] for u in updates], "time": [u[1][0] for u in updates],
                                    "diff": [u[2] for u in updates]}))
    changes = {"avg": con.sql(REFERENCE_SQL["avg"]).to_arrow_table()}
    con.register("avg_changes", changes["avg"])
    changes["top3"] = con.sql(REFERENCE_SQL["top3"]).to_arrow_table()
    for day in range(14):
        want = backfill_ref({"trips": R.accumulate(updates, TRIPS.names, (day,))})
        for out, table in changes.items():
            got = R.fold_updates(table.to_pylist(), ["grp", "route", "avg"], ["time"], (day,))
            assert got == want[out], f"{out} at day {day}: {R.describe_difference(want[out], got)}"


def test_a_wrong_output_fails_the_backfill_bench_check(tmp_path):
    """The bench's check can fail: DuckDB's own changes pass it; the same with one average
    off at one day do not."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import pytest

    from ddcli.bench.against_duckdb.backfill import check_outputs, duckdb_changes, trips_table
    path = str(tmp_path / "trips.parquet")
    pq.write_table(trips_table(6, 50, 12, 3, seed=1), path)
    expected = duckdb_changes(path)

    class Outputs:  # the store's two calls the check makes, over in-memory traces
        def __init__(self, traces):
            self.traces = traces

        def trace(self, name):
            return name

        def read_updates(self, name):
            return self.traces[name]

    assert check_outputs(Outputs(expected), expected)["avg"] > 0
    avg = expected["avg"]
    wrong = avg.set_column(avg.column_names.index("avg"), "avg",
                           pc.if_else(pa.array([i == 3 for i in range(avg.num_rows)]),
                                      pc.add(avg.column("avg"), 1.0), avg.column("avg")))
    with pytest.raises(AssertionError, match="output 'avg' differs from DuckDB's"):
        check_outputs(Outputs({**expected, "avg": wrong}), expected)
