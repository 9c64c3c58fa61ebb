"""Joins over runs of many times each, on Spark, against the plain-Python reference.

A hot key whose value is replaced at every time on both sides (the shape of two aggregates
joined by key), other keys with random insertions and retractions, a null key; 30 or so
distinct times per run, three runs, the inputs' since advanced and the store compacted
between them. Every output accumulated at every time of a box around the input times must
equal tests/reference.py evaluated on the inputs the test generated; ``verify`` agrees.
With a task budget of a few dozen rows (``DDCLI_REDUCE_TASK_ROWS``) the tasks hold their
rows in DuckDB and stream the hot key through time; with the default one, small runs look
their keys' stored old updates up inside the tasks.
"""

from __future__ import annotations

import random

import pytest

from tests.helpers import reference as R
from tests.helpers.pipeline_bench import XS, YS, Bench, random_changes, replaced_every_time

pytestmark = pytest.mark.usefixtures("on_spark")  # Spark's tasks are what they test

JOINS = '''
def pipeline(p):
    xs = p.input("xs")
    ys = p.input("ys")
    p.output("j", xs.join(ys.select("k", "u"), on="k"))
    p.output("semi", xs.semijoin(ys, on="k"))
    p.output("anti", xs.antijoin(ys, on="k"))
'''


def joins_ref(i):
    xs, ys = i["xs"], i["ys"]
    return {"j": R.join(xs, R.select(ys, "k", "u"), "k"), "semi": R.semijoin(xs, ys, "k"),
            "anti": R.antijoin(xs, ys, "k")}


def run_times(d: int, r: int) -> list[tuple]:
    """The times of run ``r``: 30 epochs for d = 1; 8 epochs × 4 iterations for d = 2."""
    if d == 1:
        return [(t,) for t in range(30 * r, 30 * r + 30)]
    return [(a, b) for a in range(8 * r, 8 * r + 8) for b in range(4)]


def x_row(rng):
    return (rng.choice([1, 2, 3, None]), rng.choice("pqr"), rng.randrange(5))


def y_row(rng):
    return (rng.choice([1, 2, 3, 4, None]), rng.choice("pqr"), rng.randrange(-1, 3))


@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("budget", [None, "40"])
def test_joins_over_runs_of_many_times_equal_the_reference_at_every_time(spark, tmp_path, monkeypatch, d, budget):
    if budget is not None:
        monkeypatch.setenv("DDCLI_REDUCE_TASK_ROWS", budget)
    rng = random.Random(d * 7 + (budget is None))
    bench = Bench(tmp_path, d)
    path = bench.pipeline("joins", JOINS)
    live: dict = {}
    pools: dict = {"xs": [], "ys": []}
    last = 3
    for r in range(last):
        times = run_times(d, r)
        upper = None if d == 1 else f"({8 * r + 8},0)"
        # the hot key on both sides: one value replaced at every time
        xs = replaced_every_time(times, live, "xs", lambda t: (0, "h", (7 * t[0] + t[-1]) % 5))
        ys = replaced_every_time(times, live, "ys", lambda t: (0, "h", (5 * t[0] + t[-1]) % 3))
        xs += random_changes(rng, times, x_row, pools["xs"], 40)
        ys += random_changes(rng, times, y_row, pools["ys"], 40)
        bench.ingest("xs", XS, xs, upper=upper)
        bench.ingest("ys", YS, ys, upper=upper)
        assert not bench.run(path).nothing_to_do
        bench.check(path, joins_ref, ["j", "semi", "anti"], verify=r == last - 1)
        if r < last - 1:
            since = str(30 * r + 20) if d == 1 else f"({8 * r + 5},1)"
            bench.advance_and_compact(since, full=r % 2 == 1)
