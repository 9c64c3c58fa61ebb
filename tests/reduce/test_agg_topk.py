"""``agg`` (several aggregates in one reduce), reduces over the whole collection (``by=[]``)
and ``top_k`` with a direction per order column, on Spark against the plain-Python reference
(tests/helpers/reference.py): random streams with retractions and nulls, several runs, d = 1
and d = 2, and ``verify`` after the last run."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench, assert_refused
from tests.pipelines.test_operators import run_random_stream

XS = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.int64())])


def xs_row(rng):
    """Rows whose ``v`` and ``w`` are sometimes null."""
    v = None if rng.random() < 0.15 else rng.choice("pqr")
    w = None if rng.random() < 0.2 else rng.randrange(-2, 5)
    return (rng.randrange(3), v, w)


AGGS = '''
from ops.dataflow import aggregates as A


def pipeline(p):
    xs = p.input("xs")
    p.output("stats", xs.agg("k", n=A.count(), nw=A.count("w"), total=A.sum("w"), mean=A.avg("w"),
                             low=A.min("v"), high=A.max("w"), kinds=A.count_distinct("v")))
    p.output("overall", xs.agg([], n=A.count(), total=A.sum("w"), low=A.min("w")))
    p.output("n_all", xs.count(by=[]))
    p.output("top", xs.top_k(by=[], k=3, order_by=[("w", "desc"), "v"]))
    p.output("top_mixed", xs.top_k(by="k", k=2, order_by=["v", "w"], descending=[True, False]))
'''


def aggs_ref(i):
    xs = i["xs"]
    return {
        "stats": R.agg(xs, "k", n=("count", None), nw=("count", "w"), total=("sum", "w"), mean=("avg", "w"),
                       low=("min", "v"), high=("max", "w"), kinds=("count_distinct", "v")),
        "overall": R.agg(xs, [], n=("count", None), total=("sum", "w"), low=("min", "w")),
        "n_all": R.count(xs, []),
        "top": R.top_k(xs, [], 3, [("w", "desc"), "v"]),
        "top_mixed": R.top_k(xs, "k", 2, ["v", "w"], descending=[True, False]),
    }


@pytest.mark.parametrize("d", [1, 2])
def test_agg_global_reduces_and_directed_top_k_equal_the_reference(spark, tmp_path, d, monkeypatch):
    monkeypatch.setenv("DDCLI_SHUFFLE_PARTITIONS", "3")  # a global reduce must still meet in one task
    bench = Bench(tmp_path, d)
    path = bench.pipeline("aggs", AGGS)
    run_random_stream(bench, path, aggs_ref, ["stats", "overall", "n_all", "top", "top_mixed"], seed=40 + d,
                      runs=2 + (d == 1), inputs=(("xs", XS, xs_row, 30, d == 2),), verify_every_run=False)


@pytest.mark.parametrize("body,words", [
    ('xs.agg("k", total=A.sum("nope"))', ["'nope'", "not a value column"]),
    ('xs.agg("k", total=A.sum("v"))', ["total=sum('v')", "not numeric"]),
    ('xs.agg("k", k=A.count())', ["'k'", "key column"]),
    ('xs.top_k(by=[], k=2, order_by=[("zz", "desc")])', ["'zz'"]),
])
def test_agg_and_top_k_mistakes_are_one_line_before_spark(spark_jobs, tmp_path, body, words):
    bench = Bench(tmp_path, 1)
    bench.ingest("xs", XS, [((1, "p", 2), (0,), 1)])
    path = bench.pipeline("bad", f'''
from ops.dataflow import aggregates as A


def pipeline(p):
    xs = p.input("xs")
    p.output("out", {body})
''')
    assert_refused(bench, path, spark_jobs, words)


@pytest.mark.parametrize("order_by,descending", [([("w", "sideways")], False), (["w", "v"], [True]),
                                                 ([("w", "desc")], [True]), ([], False), (["w", "w"], False)])
def test_top_k_refuses_a_malformed_order_when_declared(order_by, descending):
    from ops.dataflow.builder import Pipeline
    from ops.errors import PipelineError

    xs = Pipeline().input("xs")
    with pytest.raises(PipelineError, match="top_k"):
        xs.top_k(by="k", k=2, order_by=order_by, descending=descending)


DECIMALS = pa.schema([("k", pa.int64()), ("p", pa.decimal128(9, 2)), ("w", pa.int64())])


def decimal_row(rng):
    p = None if rng.random() < 0.15 else Decimal(rng.randrange(-300, 300)) / 100
    return (rng.randrange(3), p, rng.randrange(4))


DECIMAL_PIPELINE = '''
from ops.dataflow import aggregates as A


def pipeline(p):
    xs = p.input("xs")
    p.output("lo", xs.min(by="k", column="p"))
    p.output("hi", xs.max(by="k", column="p"))
    p.output("both", xs.agg("k", low=A.min("p"), high=A.max("p"), n=A.count("p")))
    p.output("top", xs.top_k(by="k", k=2, order_by=[("p", "desc")]))
    # a fixed point of agg inside a loop: the largest w per key, then unchanged
    p.output("loop", xs.select("k", "w").iterate(lambda x: x.agg("k", w=A.max("w"))))
'''


def decimals_ref(i):
    xs = i["xs"]
    return {
        "lo": R.min_(xs, "k", "p"),
        "hi": R.max_(xs, "k", "p"),
        "both": R.agg(xs, "k", low=("min", "p"), high=("max", "p"), n=("count", "p")),
        "top": R.top_k(xs, "k", 2, [("p", "desc")]),
        "loop": R.agg(R.select(xs, "k", "w"), "k", w=("max", "w")),
    }


def test_min_max_and_top_k_of_decimals_keep_the_type_and_agg_runs_in_a_loop(spark, tmp_path):
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("decimals", DECIMAL_PIPELINE)
    run_random_stream(bench, path, decimals_ref, ["lo", "hi", "both", "top", "loop"], seed=7, runs=2,
                      inputs=(("xs", DECIMALS, decimal_row, 30, False),), verify_every_run=False)
    types = {out: bench.store.trace(out).schema for out in ("lo", "hi", "both", "top")}
    assert types["lo"].field("min").type == types["hi"].field("max").type == pa.decimal128(9, 2)
    assert types["both"].field("low").type == types["top"].field("p").type == pa.decimal128(9, 2)
