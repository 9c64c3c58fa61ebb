"""As-of joins (ops/operators/asof.py) against a plain-Python reference that looks up, for every
order update, the prices at that update's own time.

Reference: the bills at time ``T`` are, over every order update ``(o, s, δ)`` with
``s <= T``, ``δ`` times each price row present at ``s`` for the order's item. So a later
price change never changes a past bill, and a retraction is priced as of its own time.
The same output is computed twice — by ``as_of_join`` and literally as
``differentiate().join(prices.moments()).integrate()`` — over random streams in several
runs where orders and prices take turns running ahead of each other (a run consumes
orders beyond the pipeline's frontier, so prices at their times arrive later).
"""

from __future__ import annotations

import os
import random
from collections import defaultdict

import pyarrow as pa

from ops.verify.verify import verify_pipeline
from tests.helpers import REPO
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench, assert_refused, random_updates

SAMPLE = os.path.join(REPO, "sample_data")
ASOF = os.path.join(SAMPLE, "pipelines", "asof.py")

ORDERS = pa.schema([("order_id", pa.int64()), ("item", pa.string())])
PRICES = pa.schema([("item", pa.string()), ("price", pa.int64())])
BILLS = ["order_id", "item", "price"]


def bills_ref(orders, prices, T) -> R.Coll:
    """Every order update at a time ``s <= T``, with the prices of its item at ``s``."""
    out = R.Coll(BILLS)
    for (oid, item), (s,), diff in orders:
        if s > T[0]:
            continue
        for (pitem, price), m in R.accumulate(prices, ["item", "price"], (s,)).rows.items():
            if pitem == item and item is not None:  # as in SQL, a null key matches nothing
                out.add((oid, item, price), diff * m)
    return out


def _rows(bench: Bench, out: str) -> dict:
    return R.consolidated(bench.rows(out), BILLS, ["time"])


# ------------------------------------------------------------------ the sample, by hand


def test_sample_bills_keep_their_price_and_retractions_are_priced_at_their_time(spark, tmp_path):
    bench = Bench(tmp_path)
    st = bench.store
    st.ingest("prices", [os.path.join(SAMPLE, "prices_1.csv")])
    st.ingest("orders", [os.path.join(SAMPLE, "orders_asof_1.csv")])
    bench.run(ASOF)
    first = {((1, "apple", 3), (1,)): 1, ((2, "pear", 5), (2,)): 1, ((3, "apple", 4), (5,)): 1}
    assert _rows(bench, "bills") == first  # apple went from 3 to 4 at time 4
    st.ingest("prices", [os.path.join(SAMPLE, "prices_2.csv")])  # pear 5 -> 6 at time 6
    st.ingest("orders", [os.path.join(SAMPLE, "orders_asof_2.csv")])
    bench.run(ASOF)
    assert _rows(bench, "bills") == {
        **first,  # later price changes never touch a bill already made
        ((4, "pear", 6), (6,)): 1,  # the change at the order's own time counts
        ((3, "apple", 4), (7,)): -1,  # cancelled, price unchanged since: the bill is gone
        ((2, "pear", 6), (7,)): -1,  # cancelled after a price change: a credit at today's price
    }
    at = lambda t: bench.output_at("bills", (t,)).project(BILLS)  # noqa: E731
    assert at(3) == {(1, "apple", 3): 1, (2, "pear", 5): 1}
    assert at(7) == {(1, "apple", 3): 1, (2, "pear", 5): 1, (2, "pear", 6): -1, (4, "pear", 6): 1}


def test_a_price_arriving_after_its_order_was_billed_corrects_the_bill_at_the_order_time(spark, tmp_path):
    bench = Bench(tmp_path)
    bench.ingest("prices", PRICES, [(("tea", 2), (0,), 1)], upper="4")
    bench.ingest("orders", ORDERS, [((1, "tea"), (5,), 1), ((2, "tea"), (7,), 1)], upper="8")
    bench.run(ASOF)  # the pipeline is complete up to 4; the orders at 5 and 7 are billed already
    assert _rows(bench, "bills") == {((1, "tea", 2), (5,)): 1, ((2, "tea", 2), (7,)): 1}
    # the orders beyond the frontier wait in the state, as blips: +1 at s and -1 at s+1
    pending = bench.state("asof")
    assert list(pending) == ["asof.as_of_pending_2"] and pending["asof.as_of_pending_2"][0] == 4
    bench.ingest("prices", PRICES, [(("tea", 2), (5,), -1), (("tea", 3), (5,), 1)], upper="9")
    bench.ingest("orders", ORDERS, [((3, "tea"), (8,), 1)], upper="9")
    bench.run(ASOF)
    assert _rows(bench, "bills") == {((1, "tea", 3), (5,)): 1, ((2, "tea", 3), (7,)): 1, ((3, "tea", 3), (8,)): 1}
    # once the frontier passes them, compaction cancels every blip: no state is left
    bench.store.compact(full=True, grace_seconds=0)
    assert bench.state("asof")["asof.as_of_pending_2"][0] == 0


# ------------------------------------------------------------------ random streams

BOTH = '''
def pipeline(p):
    orders = p.input("orders")
    prices = p.input("prices")
    p.output("bills", orders.as_of_join(prices, on="item"))
    p.output("calculus", orders.differentiate().join(prices.moments(), on="item").integrate())
'''

# (orders upper, prices upper) after each run: each input in turn runs ahead of the other
UPPERS = [(8, 4), (10, 14), (18, 18), (20, 24), (26, 26)]


def order_row(rng):
    return (rng.randrange(6), None if rng.random() < 0.1 else rng.choice("abc"))


def price_row(rng):
    return (None if rng.random() < 0.1 else rng.choice("abc"), rng.randrange(1, 5))


def test_as_of_join_equals_the_reference_at_every_time_over_runs_with_inputs_running_ahead(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("both", BOTH)
    rng, pools = random.Random(11), defaultdict(list)
    prev = (0, 0)
    for r, (ou, pu) in enumerate(UPPERS):
        for name, schema, make_row, lo, hi in (("orders", ORDERS, order_row, prev[0], ou),
                                               ("prices", PRICES, price_row, prev[1], pu)):
            times = [(t,) for t in range(lo, hi)]
            bench.ingest(name, schema, random_updates(rng, make_row, times, 3 * len(times), pools[name]),
                         upper=str(hi))
        prev = (ou, pu)
        bench.run(path)
        frontier = min(ou, pu)  # outputs are complete below it
        expect = {t: bills_ref(bench.updates["orders"], bench.updates["prices"], t)
                  for t in [(t,) for t in range(frontier)]}
        bench.check_at_every_time(["bills", "calculus"], lambda t: {"bills": expect[t], "calculus": expect[t]},
                                  times=sorted(expect))
        if r == 2:
            bench.advance_and_compact("12", full=True)
    # the as-of join keeps no orders once the frontier has passed them (compaction cancels
    # their blips), while the literal construction keeps blips in moment time and a copy
    # of prices: its state is compacted only to the frontier in ordinary units
    bench.store.compact(full=True, grace_seconds=0)
    state = bench.state("both")
    assert state["both.as_of_pending_2"][0] == 0, state


def test_verify_refuses_an_as_of_join_in_one_line(spark, tmp_path, spark_jobs):
    bench = Bench(tmp_path)
    bench.ingest("prices", PRICES, [(("tea", 2), (0,), 1)])
    bench.ingest("orders", ORDERS, [((1, "tea"), (1,), 1)])
    bench.run(ASOF)
    assert_refused(bench, ASOF, spark_jobs, ["as_of_join", "verify cannot recompute"],
                   run=lambda p: verify_pipeline(bench.store, p), jobs_ok=True)


def test_as_of_join_mistakes_are_one_line_errors(spark, tmp_path, spark_jobs):
    bench = Bench(tmp_path)
    bench.ingest("prices", PRICES, [(("tea", 2), (0,), 1)])
    bench.ingest("orders", ORDERS, [((1, "tea"), (1,), 1)])
    cases = {
        "unknown_key": ('p.input("orders").as_of_join(p.input("prices"), on="nope")', ["'nope'"]),
        "clash": ('p.input("orders").select("item", price="order_id").as_of_join(p.input("prices"), on="item")',
                  ["'price'", "rename"]),
        "key_type": ('p.input("orders").select("order_id", item="order_id").as_of_join(p.input("prices"), on="item")',
                     ["'item'", "bigint", "string"]),
        "differentiated": ('p.input("orders").differentiate().as_of_join(p.input("prices"), on="item")',
                           ["as_of_join", "already differentiated"]),
    }
    for name, (expr, must) in cases.items():
        path = bench.pipeline(name, f'def pipeline(p):\n    p.output("o", {expr})\n')
        assert_refused(bench, path, spark_jobs, must)
