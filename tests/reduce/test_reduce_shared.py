"""One shuffle for the reduces of a run that group one input by one key (ops/reduce/shared_shuffle.py).

Four outputs reduced by the same key are written by one Spark job whose tasks run every
reduce's kernel on the same shuffled input; the outputs equal the plain reference at every
time, on the first run (no old updates) and on later runs (each task looks its keys' old
updates up in the stored files). A reduce by another key keeps its own job.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench

pytestmark = pytest.mark.usefixtures("on_spark")  # Spark's tasks are what they test

FOUR = '''
def pipeline(p):
    xs = p.input("xs")
    p.output("cnt", xs.count(by="k"))
    p.output("total", xs.sum(by="k", column="w", name="total"))
    p.output("lo", xs.min(by="k", column="w"))
    p.output("top", xs.top_k(by="k", k=2, order_by="w", descending=True))
    p.output("by_v", xs.count(by="v"))
'''
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.int64())])


def four_ref(i):
    xs = i["xs"]
    return {"cnt": R.count(xs, "k"), "total": R.sum_(xs, "k", "w", name="total"), "lo": R.min_(xs, "k", "w"),
            "top": R.top_k(xs, "k", 2, "w", descending=True), "by_v": R.count(xs, "v")}


def _write_jobs(result) -> dict[tuple[str, ...], int]:
    """Spark jobs per write step, by the traces the step wrote."""
    return {tuple(s.get("together") or [s["trace"]]): s["jobs"] for s in result.steps
            if s["step"] == "write" and s["jobs"]}


def test_reduces_by_one_key_are_written_by_one_job_and_stay_exact_over_runs(spark, tmp_path):
    rng = random.Random(11)
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("four", FOUR)
    pool: list = []
    for r in range(3):
        updates = []
        for _ in range(120):
            t = (10 * r + rng.randrange(10),)
            if pool and rng.random() < 0.25:
                updates.append((rng.choice(pool), t, -1))
            else:
                row = (rng.randrange(5), rng.choice("pq"), rng.randrange(-5, 30))
                pool.append(row)
                updates.append((row, t, 1))
        bench.ingest("xs", SCHEMA, updates)
        result = bench.run(path)
        jobs = _write_jobs(result)
        # the four reduces by k: one job for all of them; the count by v: a job of its own
        assert jobs == {("cnt", "total", "lo", "top"): 1, ("by_v",): 1}, jobs
        bench.check(path, four_ref, ["cnt", "total", "lo", "top", "by_v"], verify=r == 2)
