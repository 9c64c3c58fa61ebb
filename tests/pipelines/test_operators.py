"""Every pipeline operator on Spark against the plain-Python reference (tests/helpers/reference.py).

The backbone of the correctness checks (docs/architecture.md): random update streams (insertions, retractions of rows that
were and were not inserted, exact repeats, many distinct times per run; d = 1, and d = 2 for
the operators whose output times depend on the input times), split into several runs with
``advance --since`` on the inputs and ``compact`` between them. After every run

(a) every output trace, accumulated at every time of a box that covers all input times and
    reaches past them, equals the reference evaluated on the inputs the test generated,
    accumulated at that time (never on what the store holds); and
(b) ``verify`` (the engine's own from-scratch evaluation) finds no difference.

Pipelines group the operators of one family as several outputs of one file: each output is
checked on its own and named in the failure, and one run exercises them all (a run costs
seconds of Spark, so the file keeps to a few well-chosen streams).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ops.errors import PipelineError
from ops.verify.verify import verify_pipeline
from storage.errors import StoreError
from storage.store import Store
from tests.helpers import REPO
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import (XS, YS, Bench, random_updates, run_since, schedule, xs_row, xs_row_null,
                                          ys_row, ys_row_null)

# ------------------------------------------------------------------ random streams over several runs


def run_random_stream(bench: Bench, path: str, ref, outputs, *, seed: int, runs: int = 3,
                      inputs=(("xs", XS, xs_row, 30, False),), after_run=None, verify_every_run: bool = True):
    """Ingest a random stream per input in ``runs`` runs; check after every run; between
    runs advance every input's since and compact the whole store (alternately geometric
    merges and full compaction, collecting garbage at once).

    ``verify`` costs about a Spark job per output, more than the run itself, so the d = 1
    cases ask it once, after the last run (``verify_every_run=False``): output traces only
    grow, so that still checks the times of every run. The reference check runs every time."""
    rng = random.Random(seed)
    pools = defaultdict(list)
    d = bench.d
    for r in range(runs):
        for name, schema, make_row, n, lag in inputs:
            times, upper = schedule(d, r, lag)
            bench.ingest(name, schema, random_updates(rng, make_row, times, n, pools[name]), upper=upper)
        res = bench.run(path)
        assert not res.nothing_to_do
        bench.check(path, ref, outputs, verify=verify_every_run or r == runs - 1)
        if after_run:
            after_run(r)
        if r < runs - 1:
            bench.advance_and_compact(run_since(d, r), full=r % 2 == 1)


def assert_state_follows_the_frontier(store: Store, pipeline: str):
    """State traces are compacted to the consumed frontier, and inputs held there."""
    state = store.state()
    rec = state.pipelines[pipeline]
    for name in rec["state"]:
        t = state.traces[name]
        assert name.startswith(pipeline + "."), name
        assert t.since.to_json() == rec["frontier"], (name, t.since, rec["frontier"])
    for name in rec["inputs"]:
        assert state.traces[name].holds[pipeline].since.to_json() == rec["frontier"]


# ------------------------------------------------------------------ linear operators

LINEAR = '''
def pipeline(p):
    xs = p.input("xs")
    ys = p.input("ys")
    p.output("sel", xs.map("k", vw="concat(v, cast(w as string))", k2="k * 2 + w"))
    p.output("filt", xs.filter("w % 2 = 0 and v <> 'q'"))
    p.output("flat", xs.flat_map("x", "sequence(0, w % 3)", keep=["k"]))
    p.output("flat_all", xs.flat_map("x", "array(v, upper(v))"))
    p.output("cons", xs.concat(ys.negate()).consolidate())
'''


def linear_ref(i):
    xs, ys = i["xs"], i["ys"]
    return {
        "sel": R.select(xs, "k", vw=lambda r: r["v"] + str(r["w"]), k2=lambda r: r["k"] * 2 + r["w"]),
        "filt": R.filter_(xs, lambda r: r["w"] % 2 == 0 and r["v"] != "q"),
        "flat": R.flat_map(xs, "x", lambda r: list(range(0, r["w"] % 3 + 1)), keep=["k"]),
        "flat_all": R.flat_map(xs, "x", lambda r: [r["v"], r["v"].upper()]),
        # concat, negate and consolidate at once: xs - ys
        "cons": R.consolidate(R.concat(xs, R.negate(ys))),
    }


def test_linear_operators_equal_the_reference_at_every_time_over_runs(spark, tmp_path):
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("linear", LINEAR)
    outputs = ["sel", "filt", "flat", "flat_all", "cons"]
    run_random_stream(bench, path, linear_ref, outputs, seed=1, verify_every_run=False,
                      inputs=(("xs", XS, xs_row, 30, False), ("ys", XS, xs_row, 20, False)))
    # linear operators keep no state
    assert bench.store.state().pipelines["linear"]["state"] == []


# ------------------------------------------------------------------ join family

JOINS = '''
def pipeline(p):
    xs = p.input("xs")
    ys = p.input("ys")
    yk = ys.select("k", "u")
    p.output("j", xs.join(yk, on="k"))
    p.output("j2", xs.join(ys, on=["k", "v"]))
    p.output("semi", xs.semijoin(ys, on="k"))
    p.output("anti", xs.antijoin(ys, on="k"))
    p.output("j_nulls", xs.join(yk, on="k", nulls_equal=True))
    p.output("anti_nulls", xs.antijoin(ys, on="k", nulls_equal=True))
    shared = yk.filter("u > 0").arrange(by="k")
    p.output("ja", xs.select("k", "v").join(shared, on="k"))
    p.output("jb", xs.filter("w >= 2").select("k", w2="w * 10").join(shared, on="k"))
'''


def joins_ref(i):
    xs, ys = i["xs"], i["ys"]
    yk = R.select(ys, "k", "u")
    shared = R.arrange(R.filter_(yk, lambda r: r["u"] > 0), "k")
    return {
        "j": R.join(xs, yk, "k"),
        "j2": R.join(xs, ys, ["k", "v"]),
        "semi": R.semijoin(xs, ys, "k"),
        "anti": R.antijoin(xs, ys, "k"),
        "j_nulls": R.join(xs, yk, "k", nulls_equal=True),
        "anti_nulls": R.antijoin(xs, ys, "k", nulls_equal=True),
        "ja": R.join(R.select(xs, "k", "v"), shared, "k"),
        "jb": R.join(R.select(R.filter_(xs, lambda r: r["w"] >= 2), "k", w2=lambda r: r["w"] * 10), shared, "k"),
    }


@pytest.mark.parametrize("d", [1, 2])
def test_join_semijoin_antijoin_and_a_shared_arrangement_equal_the_reference(spark, tmp_path, d):
    bench = Bench(tmp_path, d)
    path = bench.pipeline("joins", JOINS)

    def after_run(r):
        assert_state_follows_the_frontier(bench.store, "joins")
        state = bench.store.state().pipelines["joins"]["state"]
        # one arranged copy of `shared` for both joins; inputs are arrangements already
        assert sum(".arrange_" in s for s in state) == 1, state
        assert not any(".input_" in s or ".filter_" in s for s in state), state

    run_random_stream(bench, path, joins_ref, ["j", "j2", "semi", "anti", "j_nulls", "anti_nulls", "ja", "jb"], seed=10 + d,
                      inputs=(("xs", XS, xs_row_null, 30, False), ("ys", YS, ys_row_null, 25, True)),
                      after_run=after_run,
                      verify_every_run=d == 2)


# ------------------------------------------------------------------ reduce family

REDUCES = '''
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def spread(rows):
    """Per key: max(w) - min(w) over the rows present, with multiplicity = how many they are."""
    present = rows.filter(pc.greater(rows["_count"], 0))
    if present.num_rows == 0:
        return pa.table({"spread": pa.array([], pa.int64()), "_count": pa.array([], pa.int64())})
    lo, hi = pc.min(present["w"]).as_py(), pc.max(present["w"]).as_py()
    return pa.table({"spread": pa.array([hi - lo], pa.int64()),
                     "_count": pa.array([present.num_rows], pa.int64())})


def pipeline(p):
    xs = p.input("xs")
    p.output("cnt", xs.count(by="k"))
    p.output("cnt_kv", xs.count(by=["k", "v"]))
    p.output("total", xs.sum(by="k", column="w"))
    p.output("lo", xs.min(by="k", column="w"))
    p.output("hi", xs.max(by="k", column="v", name="top_v"))
    p.output("nd", xs.select("k", "v").count_distinct(by="k", name="nv"))
    p.output("dist", xs.select("v", "w").distinct())
    p.output("thr", xs.select("v").threshold(lambda c: np.where(c >= 2, np.minimum(c, 3) - 1, 0)))
    p.output("top", xs.top_k(by="k", k=3, order_by="w", descending=True))
    p.output("custom", xs.reduce_per_key(by="k", fn=spread))
'''


def spread_ref(rows):
    present = [(r, m) for r, m in rows if m > 0]
    if not present:
        return {}
    ws = [r["w"] for r, _ in present]
    return {(max(ws) - min(ws),): len(present)}


def reduces_ref(i):
    xs = i["xs"]
    return {
        "cnt": R.count(xs, "k"),
        "cnt_kv": R.count(xs, ["k", "v"]),
        "total": R.sum_(xs, "k", "w"),
        "lo": R.min_(xs, "k", "w"),
        "hi": R.max_(xs, "k", "v", name="top_v"),
        "nd": R.count_distinct(R.select(xs, "k", "v"), "k", name="nv"),
        "dist": R.distinct(R.select(xs, "v", "w")),
        "thr": R.threshold(R.select(xs, "v"), lambda c: min(c, 3) - 1 if c >= 2 else 0),
        "top": R.top_k(xs, "k", 3, "w", descending=True),
        "custom": R.reduce_per_key(xs, "k", spread_ref, ["spread"]),
    }


@pytest.mark.parametrize("d,partitions,lookup", [(1, "1", True), (2, "3", True), (1, "2", False)],
                         ids=["d1-one-partition-task-lookups", "d2-three-partitions-task-lookups",
                              "d1-two-partitions-spark-reads"])
def test_reduce_family_equals_the_reference_at_every_time_over_runs(spark, tmp_path, d, partitions, lookup,
                                                                     monkeypatch):
    # one partition: no shuffle at all; several: key-partitioned, writer fused with the reduce;
    # old state read by key inside the reduce's tasks, or by Spark (big deltas)
    monkeypatch.setenv("DDCLI_SHUFFLE_PARTITIONS", partitions)
    if not lookup:
        monkeypatch.setattr("ops.run.evaluate.SPLIT_ROWS", 0)
    bench = Bench(tmp_path, d)
    path = bench.pipeline("reduces", REDUCES)
    run_random_stream(bench, path, reduces_ref,
                      ["cnt", "cnt_kv", "total", "lo", "hi", "nd", "dist", "thr", "top", "custom"], seed=20 + d, inputs=(("xs", XS, xs_row_null, 40, d == 2),),
                      after_run=lambda r: assert_state_follows_the_frontier(bench.store, "reduces"),
                      verify_every_run=d == 2)


# ------------------------------------------------------------------ batching never coarsens

BATCHING = '''
def pipeline(p):
    xs = p.input("xs")
    ys = p.input("ys")
    j = xs.join(ys.select("k", "u"), on="k")
    p.output("per_v", j.sum(by="v", column="u"))
    p.output("pairs", j.select("v", "u").distinct())
    p.output("first", xs.top_k(by="v", k=2, order_by="w"))
'''


def batching_ref(i):
    xs, ys = i["xs"], i["ys"]
    j = R.join(xs, R.select(ys, "k", "u"), "k")
    return {"per_v": R.sum_(j, "v", "u"), "pairs": R.distinct(R.select(j, "v", "u")),
            "first": R.top_k(xs, "v", 2, "w")}


@pytest.mark.parametrize("d", [1, 2])
def test_one_run_of_all_updates_equals_the_same_updates_over_many_runs(spark, tmp_path, d, monkeypatch):
    # many touched keys: read old state with Spark's semi-join, not the keyed DuckDB read
    monkeypatch.setattr("ops.operators.arrangement.KEY_LOOKUP_LIMIT", 2)
    monkeypatch.setattr("ops.run.evaluate.SPLIT_ROWS", 0)
    rng = random.Random(30 + d)
    runs = 4
    inputs = {"xs": (XS, xs_row, 15, False), "ys": (YS, ys_row, 12, True)}
    quiet = {(1, "xs"), (2, "ys")}  # runs in which an input gets no update at all
    per_run = [{name: [] if (r, name) in quiet else random_updates(rng, make_row, schedule(d, r, lag)[0], n, [])
                for name, (_, make_row, n, lag) in inputs.items()} for r in range(runs)]

    once = Bench(tmp_path / "once", d)
    path_once = once.pipeline("batching", BATCHING)
    for name, (schema, _, _, lag) in inputs.items():
        once.ingest(name, schema, [u for run in per_run for u in run[name]], upper=schedule(d, runs - 1, lag)[1])
    once.run(path_once)

    many = Bench(tmp_path / "many", d)
    path_many = many.pipeline("batching", BATCHING)
    for r, run in enumerate(per_run):
        for name, (schema, _, _, lag) in inputs.items():
            upper = schedule(d, r, lag)[1]
            if run[name]:
                many.ingest(name, schema, run[name], upper=upper, fmt="csv" if r % 2 else "parquet")
            elif upper is not None:
                many.store.advance(name, upper=upper)  # seal the times, with no update in them
        many.run(path_many)
        if r < runs - 1:
            many.advance_and_compact(run_since(d, r), full=r % 2 == 0)

    outputs = ["per_v", "pairs", "first"]
    for t in R.box(once.times()):
        for out in outputs:
            a, b = once.output_at(out, t), many.output_at(out, t)
            assert a == b, f"output {out!r} at {t}: one run vs many runs: {R.describe_difference(a, b)}"
    many.check(path_many, batching_ref, outputs)


# ------------------------------------------------------------------ the reduce seed example of docs/architecture.md

SEED_UPDATES = [  # (s,), time, diff
    (("a",), (0, 0), 1), (("b",), (0, 0), 3), (("cc",), (0, 0), 2),
    (("a",), (0, 1), -1), (("b",), (0, 1), -3),
    (("a",), (1, 0), -1), (("b",), (1, 0), -1),
    (("a",), (1, 1), 1), (("b",), (1, 1), 2),
]
SEED_EXPECTED = {  # ((length, distinct), time): diff
    ((1, 2), (0, 0)): 1, ((2, 1), (0, 0)): 1,
    ((1, 2), (0, 1)): -1,
    ((1, 1), (1, 0)): 1, ((1, 2), (1, 0)): -1,
    ((1, 2), (1, 1)): 1,
}
STRINGS = pa.schema([("s", pa.string())])
LENGTH_COUNT = os.path.join(REPO, "sample_data", "pipelines", "length_count.py")


def seed_ref(i):
    by_length = R.select(i["strings"], "s", length=lambda r: len(r["s"]))
    return {"length_counts": R.count_distinct(by_length, "length", name="distinct")}


def _seed_output(bench: Bench) -> dict:
    tr = bench.store.trace("length_counts")
    return R.consolidated(bench.store.read_updates(tr).to_pylist(), ["length", "distinct"], bench.tcols)


def test_design_seed_example_distinct_strings_per_length_gives_the_exact_differences(spark, tmp_path):
    bench = Bench(tmp_path, 2)
    bench.ingest("strings", STRINGS, SEED_UPDATES, upper="(2,0)")
    bench.run(LENGTH_COUNT)
    # the change at (1,1) comes from the join of (0,1) and (1,0): no input update is there
    assert _seed_output(bench) == SEED_EXPECTED
    bench.check(LENGTH_COUNT, seed_ref, ["length_counts"])


def test_design_seed_example_split_along_each_coordinate_gives_the_same_differences(spark, tmp_path):
    # first the times (a,0) — sealed by the frontier (0,1) — then the rest, sealed later
    bench = Bench(tmp_path, 2)
    bench.ingest("strings", STRINGS, [u for u in SEED_UPDATES if u[1][1] == 0], upper="(0,1)")
    bench.run(LENGTH_COUNT)
    bench.store.advance("strings", since="(0,1)")
    bench.store.compact(full=True, grace_seconds=0)
    # the rest arrives unsealed (pending in the trace): a run must not see it yet
    bench.ingest("strings", STRINGS, [u for u in SEED_UPDATES if u[1][1] == 1])
    assert bench.run(LENGTH_COUNT).nothing_to_do
    bench.store.advance("strings", upper="(2,2)")
    assert not bench.run(LENGTH_COUNT).nothing_to_do
    assert _seed_output(bench) == SEED_EXPECTED
    bench.check(LENGTH_COUNT, seed_ref, ["length_counts"])


# ------------------------------------------------------------------ pipelines and runs

COUNT_BY_K = '''
def pipeline(p):
    p.output("by_k", p.input("xs").count(by="k"))
'''
SUM_BY_K = '''
def pipeline(p):
    p.output("by_k", p.input("xs").select("k", "w").sum(by="k", column="w"))
'''
DISTINCT_V = '''
def pipeline(p):
    p.output("vs", p.input("xs").select("v", "w").distinct())
'''


def test_an_output_may_give_up_its_history_and_later_runs_stay_exact(spark, tmp_path):
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("sums", SUM_BY_K)
    ref = lambda i: {"by_k": R.sum_(R.select(i["xs"], "k", "w"), "k", "w")}  # noqa: E731
    rng, pool = random.Random(41), []
    for r in range(3):
        bench.ingest("xs", XS, random_updates(rng, xs_row, schedule(1, r)[0], 30, pool))
        bench.run(path)
        if r == 1:
            before = bench.store.trace("by_k").rows()
            with pytest.raises(StoreError, match="upper moves with its runs"):
                bench.store.advance("by_k", upper="100")
            with pytest.raises(StoreError, match="state is compacted by its runs"):
                bench.store.advance("sums.select_1", since="9")
            bench.store.advance("by_k", since="9")
            bench.store.compact(full=True, grace_seconds=0)
            assert bench.store.trace("by_k").rows() < before  # history before 9 is merged
    bench.check(path, ref, ["by_k"], beyond=lambda t: t[0] >= 9)


def test_a_second_pipeline_over_the_same_inputs_has_its_own_state_and_holds(spark, tmp_path):
    bench = Bench(tmp_path, 1)
    p1 = bench.pipeline("first", SUM_BY_K)
    p2 = bench.pipeline("second", DISTINCT_V)
    ref1 = lambda i: {"by_k": R.sum_(R.select(i["xs"], "k", "w"), "k", "w")}  # noqa: E731
    ref2 = lambda i: {"vs": R.distinct(R.select(i["xs"], "v", "w"))}  # noqa: E731
    rng, pool = random.Random(40), []

    def more(r):
        bench.ingest("xs", XS, random_updates(rng, xs_row, schedule(1, r)[0], 30, pool))

    more(0)
    bench.run(p1)
    more(1)
    bench.store.advance("xs", since="9")  # held back by `first` at 6
    bench.store.compact(full=True, grace_seconds=0)
    assert bench.store.trace("xs").effective_since().to_json() == [[6]]
    bench.run(p2)  # its first run sees the input compacted to 6: exact from there on
    more(2)
    bench.run(p1)
    bench.store.advance("xs", since="15")
    bench.store.compact(full=True, grace_seconds=0)
    xs = bench.store.trace("xs")
    assert {n: h.since.to_json() for n, h in xs.holds.items()} == {"first": [[18]], "second": [[12]]}
    assert xs.effective_since().to_json() == [[12]]  # the slower pipeline holds compaction back
    bench.run(p2)

    bench.check(p1, ref1, ["by_k"])
    bench.check(p2, ref2, ["vs"], beyond=lambda t: t[0] >= 6)
    state = bench.store.state()
    own = {n: [t for t in state.traces if t.startswith(n + ".")] for n in ("first", "second")}
    # both declare a node "select_1": their arrangements of it are separate traces
    assert own == {"first": ["first.select_1"], "second": ["second.select_1"]}
    assert sorted(own["first"]) == sorted(state.pipelines["first"]["state"])
    assert sorted(own["second"]) == sorted(state.pipelines["second"]["state"])
    assert state.traces["by_k"].owner == "first" and state.traces["vs"].owner == "second"


def test_a_run_with_no_new_input_does_nothing(spark, tmp_path, spark_jobs):
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("counting", COUNT_BY_K)
    bench.ingest("xs", XS, random_updates(random.Random(50), xs_row, schedule(1, 0)[0], 20, []))
    first = bench.run(path)
    assert not first.nothing_to_do and first.outputs["by_k"] > 0
    bench.store.advance("xs", since="3")  # moving since is no new input
    bench.store.compact(full=True, grace_seconds=0)
    version, jobs = bench.store.state().version, spark_jobs()
    again = bench.run(path)
    assert again.nothing_to_do
    assert bench.store.state().version == version
    assert spark_jobs() == jobs


def test_verify_reports_an_output_that_differs_from_the_from_scratch_evaluation(spark, tmp_path):
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("counting", COUNT_BY_K)
    bench.ingest("xs", XS, [((1, "p", 0), (0,), 1), ((1, "q", 0), (2,), 1), ((2, "p", 0), (3,), 1)])
    bench.run(path)
    assert verify_pipeline(bench.store, path).ok
    # a wrong output, committed as a valid layer (checksums and all, so only the
    # from-scratch evaluation can tell): one more (k=1, count=1) from time 0 on
    tr = bench.store.trace("by_k")
    old = tr.layers[0]
    table = pq.read_table(bench.store.layer_paths(tr, [old])[0])
    extra = pa.table({"k": [1], "count": [1], "time": [0], "diff": [1]}, schema=table.schema)
    wrong = bench.store.write_layer(tr, pa.concat_tables([table, extra]), lower=old.lower, upper=old.upper,
                                    seq_lo=old.seq_lo, seq_hi=old.seq_hi)

    def swap(s):
        t = s.traces["by_k"]
        s.traces["by_k"] = t.with_(layers=[wrong if l.id == old.id else l for l in t.layers])
        return s
    bench.store.commit(swap)
    v = verify_pipeline(bench.store, path)
    assert not v.ok
    first = v.differences[0]
    assert (first.output, first.time, first.row, first.expected, first.found) == ("by_k", (0,), {"k": 1, "count": 1}, 1, 2)
    assert "by_k" in first.describe() and "expected count 1, found 2" in first.describe()


# ------------------------------------------------------------------ pipeline errors

NAMES = pa.schema([("k", pa.string()), ("name", pa.string())])

ERRORS = {
    "unknown_input": ('xs = p.input("nope")\np.output("o", xs)', ["'nope'", "does not exist"]),
    "unknown_select_column": ('p.output("o", p.input("xs").select("k", "nope"))', ["'nope'"]),
    "unknown_column_in_expression": ('p.output("o", p.input("xs").select(z="nope + 1"))', ["nope"]),
    "unknown_join_key": ('p.output("o", p.input("xs").join(p.input("ys"), on="nope"))', ["'nope'"]),
    "unknown_reduce_key": ('p.output("o", p.input("xs").count(by="nope"))', ["'nope'"]),
    "join_key_type_mismatch": ('p.output("o", p.input("xs").join(p.input("names"), on="k"))', ["'k'", "bigint", "string"]),
    "output_is_an_input": ('xs = p.input("xs")\np.output("xs", xs.negate())', ["'xs'", "input"]),
    "output_is_another_trace": ('p.output("names", p.input("xs").negate())', ["'names'"]),
    "unknown_reducer_column": ('p.output("o", p.input("xs").sum(by="k", column="nope"))', ["'nope'"]),
    "data_column_named_diff": ('p.output("o", p.input("xs").select("k", diff="w"))', ["'diff'", "reserved"]),
    "concat_of_different_columns": ('xs = p.input("xs")\np.output("o", xs.concat(xs.select("k")))', ["concat", "columns"]),
    "join_sides_share_a_column": ('p.output("o", p.input("xs").join(p.input("ys"), on="k"))', ["'v'"]),
}


@pytest.fixture
def error_bench(tmp_path):
    bench = Bench(tmp_path, 1)
    bench.ingest("xs", XS, [((1, "p", 2), (0,), 1)])
    bench.ingest("ys", YS, [((1, "p", 0), (0,), 1)])
    bench.ingest("names", NAMES, [(("1", "one"), (0,), 1)])
    return bench


def _assert_refused(bench: Bench, path: str, spark_jobs, must_contain) -> str:
    version, jobs = bench.store.state().version, spark_jobs()
    with pytest.raises(PipelineError) as e:
        bench.run(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.strip(), msg
    for s in must_contain:
        assert s in msg, (s, msg)
    assert bench.store.state().version == version  # nothing written
    assert spark_jobs() == jobs  # refused before Spark did any work
    return msg


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_pipeline_mistakes_are_one_line_errors_before_spark_work(spark, error_bench, spark_jobs, case):
    body, must_contain = ERRORS[case]
    source = "def pipeline(p):\n" + textwrap.indent(body, "    ") + "\n"
    path = error_bench.pipeline(case, source)
    _assert_refused(error_bench, path, spark_jobs, must_contain)


def test_a_pipeline_error_is_the_only_thing_printed(tmp_path):
    """A user's bad SQL expression gives one PipelineError line and nothing on stderr
    (PySpark logs every AnalysisException as a multi-kilobyte JSON record by default)."""
    bench = Bench(tmp_path, 1)
    bench.ingest("xs", XS, [((1, "p", 2), (0,), 1)])
    path = bench.pipeline("bad_expr", 'def pipeline(p):\n    p.output("o", p.input("xs").select(z="nope + 1"))\n')
    script = textwrap.dedent(f"""
        from ops.errors import PipelineError
        from ops.run.run import run_pipeline
        from storage.store import Store
        try:
            run_pipeline(Store({bench.store.path!r}), {path!r})
        except PipelineError as e:
            print(e)
    """)
    env = dict(os.environ, PYTHONPATH=REPO, DDCLI_SHUFFLE_PARTITIONS="2")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.strip().splitlines()) == 1 and "nope" in proc.stdout, proc.stdout
    noise = [line for line in proc.stderr.splitlines() if line.strip() and "incubator modules" not in line]
    assert not noise, "\n".join(noise)[:600]


def test_a_syntax_error_names_the_file_and_line(spark, error_bench, spark_jobs):
    path = error_bench.pipeline("broken", 'def pipeline(p):\n    xs = p.input("xs")\n    p.output("o",, xs)\n')
    _assert_refused(error_bench, path, spark_jobs, [f"{path}:3", "syntax"])


def test_a_pipeline_that_raises_names_the_line_and_the_error(spark, error_bench, spark_jobs):
    path = error_bench.pipeline("raising", 'def pipeline(p):\n    xs = p.input("xs")\n'
                                           '    raise ValueError("no outputs today")\n')
    _assert_refused(error_bench, path, spark_jobs, [f"{path}:3", "ValueError", "no outputs today"])
