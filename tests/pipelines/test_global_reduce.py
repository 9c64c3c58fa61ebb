"""A reduce over all rows (``by=[]``, SQL's aggregate without GROUP BY) has one key: with
several shuffle partitions its rows still meet in one task, and later runs find its stored
arrangement (no table of touched keys to register)."""

from __future__ import annotations

import random

from tests.helpers import reference as R
from tests.helpers.pipeline_bench import XS, Bench, random_updates, run_since, schedule, xs_row

GLOBAL = """
def pipeline(p):
    xs = p.input("xs")
    p.output("n", xs.count([]))
    p.output("total", xs.sum([], "w", name="total"))
    p.output("least", xs.min([], "v", name="least"))
"""


def test_a_reduce_without_key_is_one_row_over_several_partitions_and_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCLI_SHUFFLE_PARTITIONS", "4")
    bench = Bench(tmp_path)
    path = bench.pipeline("global", GLOBAL)
    ref = lambda i: {"n": R.count(i["xs"], []), "total": R.sum_(i["xs"], [], "w", "total"),  # noqa: E731
                     "least": R.min_(i["xs"], [], "v", "least")}
    rng, pool = random.Random("global-reduce"), []
    for r in range(3):
        times, upper = schedule(1, r)
        bench.ingest("xs", XS, random_updates(rng, xs_row, times, 60, pool), upper=upper)
        assert not bench.run(path).nothing_to_do
        bench.check(path, ref, ["n", "total", "least"], verify=r == 2)
        if r < 2:
            bench.advance_and_compact(run_since(1, r), full=r == 1)
