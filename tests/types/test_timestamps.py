"""Timestamps with a time zone and in nanoseconds through pipelines, against the reference.

A timestamp with a zone is an instant (Spark's ``TIMESTAMP``): joined on, reduced, and
written to outputs in UTC, equal as instants to what the test generated (Python compares
aware datetimes as instants). A new trace keeps nanosecond timestamps in microseconds when
they are whole microseconds, and refuses one that is not in one line at ingest.
"""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ops.dataflow.builder import Pipeline
from ops.dataflow.precheck import precheck
from ops.errors import PipelineError
from storage.errors import UpdateFileError
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench, random_updates, schedule

UTC = dt.timezone.utc
XT = pa.schema([("k", pa.int64()), ("ts", pa.timestamp("us", "America/New_York")), ("tn", pa.timestamp("ns"))])
YT = pa.schema([("k", pa.int64()), ("t2", pa.timestamp("us", "UTC"))])
# instants, the first one whose New York local time is in the year 0 (beyond Python's)
INSTANTS = [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(2020, 3, 8, 6, 59, 59, 999999, tzinfo=UTC),
            dt.datetime(2020, 3, 8, 7, tzinfo=UTC), dt.datetime(2038, 1, 19, 3, 14, 8, 5, tzinfo=UTC)]
NAIVE = [dt.datetime(1970, 1, 1), dt.datetime(2001, 9, 9, 1, 46, 40, 123456), dt.datetime(2262, 4, 11)]


def xt_row(rng):
    return (rng.randrange(3), rng.choice(INSTANTS), rng.choice(NAIVE))


def yt_row(rng):
    return (rng.randrange(3), rng.choice(INSTANTS))


PIPELINE = '''
def pipeline(p):
    xs = p.input("xs")
    ys = p.input("ys")
    p.output("j", xs.join(ys, on="k"))
    p.output("on_ts", xs.select("k", "ts").join(xs.select("ts", k2="k"), on="ts"))
    p.output("latest", xs.max(by="k", column="ts"))
    p.output("first", xs.min(by="k", column="tn"))
'''


def ref(i):
    xs, ys = i["xs"], i["ys"]
    return {"j": R.join(xs, ys, "k"),
            "on_ts": R.join(R.select(xs, "k", "ts"), R.select(xs, "ts", k2=lambda r: r["k"]), "ts"),
            "latest": R.max_(xs, "k", "ts", "max"), "first": R.min_(xs, "k", "tn", "min")}


def test_zoned_and_nanosecond_timestamps_join_and_reduce_as_the_reference_over_runs(spark, tmp_path):
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("stamps", PIPELINE)
    rng = random.Random(3)
    pools = {"xs": [], "ys": []}
    for r in range(2):
        times, upper = schedule(1, r)
        bench.ingest("xs", XT, random_updates(rng, xt_row, times, 14, pools["xs"]), upper=upper)
        bench.ingest("ys", YT, random_updates(rng, yt_row, times, 8, pools["ys"]), upper=upper)
        bench.run(path)
        bench.check(path, ref, ["j", "on_ts", "latest", "first"], verify=r == 1)
    schema = bench.store.trace("xs").schema
    assert schema.field("tn").type == pa.timestamp("us") and schema.field("ts").type == XT.field("ts").type
    assert bench.store.trace("latest").schema.field("max").type == pa.timestamp("us", "UTC")


def test_a_nanosecond_timestamp_finer_than_a_microsecond_is_refused_at_ingest_naming_row_and_column(tmp_path):
    table = pa.table({"k": [1, 2], "tn": pa.array([1_000, 1_500], pa.timestamp("ns")), "time": [0, 0]})
    pq.write_table(table, tmp_path / "fine.parquet")
    bench = Bench(tmp_path, 1)
    with pytest.raises(UpdateFileError, match=r"row 2, column tn: .*000001500 .*microsecond"):
        bench.store.ingest("fine", [str(tmp_path / "fine.parquet")], key=["k"])


def test_a_run_over_a_trace_that_kept_nanoseconds_is_refused_in_one_line_before_spark(tmp_path):
    p = Pipeline("old")
    p.output("out", p.input("old").count(by="k"))
    with pytest.raises(PipelineError, match=r"column 'tn' of trace 'old' is timestamp\[ns\].*new trace"):
        precheck(p, {"old": pa.schema([("k", pa.int64()), ("tn", pa.timestamp("ns"))])})
