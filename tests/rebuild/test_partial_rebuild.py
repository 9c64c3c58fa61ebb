"""An edited pipeline runs on when its dataflow did not change, and ``--rebuild`` recomputes
only the operators that changed and what depends on them (ops/run/rebuild.py).

Checked against the plain reference (tests/helpers/reference.py) at every time the output
answers (beyond its since), with random updates, retractions, several runs before and after
the rebuild and compaction between them; the state traces a rebuild must not touch keep
their very layers.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from ops.dataflow.changes import file_hash
from ops.explain.explain import explain_pipeline
from ops.verify.verify import verify_pipeline
from storage.errors import StoreError
from storage.lattice import Frontier
from storage.sql.query import as_of
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import XS, YS, Bench, assert_refused, random_updates, run_since, xs_row, ys_row

PIPE = '''
def pipeline(p):
    xs = p.input("xs")
    ys = p.input("ys")
    kept = xs.filter("w > 0")
    pairs = kept.join(ys.select("k", "u"), on="k")
    p.output("per_v", pairs.count(by="v"))
    scaled = pairs.select("k", "v", x="u * 2")
    p.output("total", scaled.sum(by="v", column="x"))
'''

# the same dataflow, edited by hand: a docstring, comments, blank lines, a call split in two
PIPE_COMMENTED = '''
"""Pairs of xs and ys by key: how many per v, and their scaled u summed per v."""


def pipeline(p):
    # the two inputs
    xs = p.input("xs")
    ys = p.input("ys")

    kept = xs.filter("w > 0")  # only positive weights
    pairs = kept.join(ys.select("k", "u"),
                      on="k")
    p.output("per_v", pairs.count(by="v"))
    scaled = pairs.select("k", "v", x="u * 2")
    p.output("total", scaled.sum(by="v", column="x"))
'''

# the middle operator changed: u scaled by 3
PIPE_SCALED = PIPE_COMMENTED.replace('x="u * 2"', 'x="u * 3"')

# and an operator declared before all the others: every operator's id (and line) moves
PIPE_FIRST = PIPE_SCALED.replace('    xs = p.input("xs")\n',
                                 '    p.output("first", p.input("ys").distinct())\n    xs = p.input("xs")\n')


def ref(factor: int):
    def evaluate(inputs) -> dict:
        kept = R.filter_(inputs["xs"], lambda r: r["w"] > 0)
        pairs = R.join(kept, R.select(inputs["ys"], "k", "u"), on="k")
        scaled = R.select(pairs, "k", "v", x=lambda r: r["u"] * factor)
        return {"per_v": R.count(pairs, "v"), "total": R.sum_(scaled, "v", "x"),
                "first": R.distinct(inputs["ys"])}
    return evaluate


def line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


class Stream:
    """Random updates of xs and ys, six epochs a run, both sealed to the same upper."""

    def __init__(self, bench: Bench, seed: int, lag: bool = False):
        self.bench, self.rng, self.lag = bench, random.Random(seed), lag
        self.pools: dict[str, list] = {"xs": [], "ys": []}
        self.runs = 0

    def ingest(self) -> None:
        r, self.runs = self.runs, self.runs + 1
        times = [(t,) for t in range(6 * r, 6 * r + 6)]
        # lagging: ys is sealed only to 6r + 4, so a run consumes xs beyond the frontier
        ys_upper = str(6 * r + 4) if self.lag else str(6 * r + 6)
        self.bench.ingest("xs", XS, random_updates(self.rng, xs_row, times, 40, self.pools["xs"]), upper=str(6 * r + 6))
        ys_times = [t for t in times if t[0] < int(ys_upper)]
        self.bench.ingest("ys", YS, random_updates(self.rng, ys_row, ys_times, 30, self.pools["ys"]), upper=ys_upper)

    def compact(self) -> None:
        self.bench.advance_and_compact(run_since(1, self.runs - 1), full=self.runs % 2 == 0)


def check(bench: Bench, path: str, factor: int, outputs=("per_v", "total")) -> None:
    """Every output at every time it answers (beyond its since) equals the reference; verify agrees."""
    times = R.box(bench.times())
    expected = {t: ref(factor)(bench.inputs_at(t)) for t in times}
    for out in outputs:
        since = bench.store.trace(out).since
        mine = [t for t in times if since.beyond(t)]
        assert mine, f"{out} answers no time"
        bench.check_at_every_time([out], lambda t: expected[t], times=mine)
    v = verify_pipeline(bench.store, path, name="pairs")
    assert v.ok and v.times, "\n".join(x.describe() for x in v.differences)


def layer_ids(bench: Bench) -> dict[str, list[str]]:
    return {n: [l.id for l in t.all_layers()] for n, t in bench.store.state().traces.items()}


def write_steps(res) -> set[str]:
    return {s["trace"] for s in res.steps if s["step"] == "write"}


def test_comment_edits_run_on_and_a_rebuild_recomputes_only_the_changed_operator_and_downstream(tmp_path, spark_jobs):
    bench = Bench(tmp_path)
    stream = Stream(bench, seed=37)
    path = bench.pipeline("pairs", PIPE)
    for _ in range(2):
        stream.ingest()
        assert not bench.run(path).nothing_to_do
        stream.compact()
    states = sorted(bench.state("pairs"))
    assert len(states) == 4, states  # kept, ys' select, pairs, scaled

    # comments, a docstring, blank lines, lines moving: no rebuild; the record follows the file
    path = bench.pipeline("pairs", PIPE_COMMENTED)
    stream.ingest()
    res = bench.run(path)
    assert not res.nothing_to_do and res.rebuilt is None
    rec = bench.store.state().pipelines["pairs"]
    assert rec["fingerprint"] == file_hash(path)
    assert sorted(bench.state("pairs")) == states
    check(bench, path, factor=2)

    # the middle operator changed: refused before Spark, naming it, nothing written
    path = bench.pipeline("pairs", PIPE_SCALED)
    line = line_of(PIPE_SCALED, 'x="u * 3"')
    assert_refused(bench, path, spark_jobs, ["--rebuild", f"changed select (pairs.py:{line})",
                                             f"reduce (pairs.py:{line + 1})"])
    # explain says the same, operator by operator, without Spark
    ex = explain_pipeline(bench.store, path, name="pairs")
    change = {o.where: o.change for o in ex.operators}
    assert change[f"pairs.py:{line}"] == "changed" and change[f"pairs.py:{line + 1}"] == "affected", change
    assert list(change.values()).count("changed") == 1 and "unchanged" in change.values(), change
    assert ex.next_run.startswith("refuses to run") and f"changed select (pairs.py:{line})" in ex.next_run
    before = layer_ids(bench)
    frontier = Frontier.from_json(rec["frontier"], 1)
    res = bench.run(path, rebuild=True)
    assert res.rebuilt["recomputed"] == [f"select (pairs.py:{line})", f"reduce (pairs.py:{line + 1})"]
    # only the changed select's state and the output it feeds were rewritten ...
    (scaled,) = write_steps(res) - {"total"}
    assert scaled in states and res.rebuilt["reused_state"] == [n for n in states if ".join_" in n]
    after = layer_ids(bench)
    assert after[scaled] != before[scaled] and after["total"] != before["total"]
    # ... the other operators' state and the other output kept their very layers
    assert {n: after[n] for n in states if n != scaled} == {n: before[n] for n in states if n != scaled}
    assert after["per_v"] == before["per_v"] and sorted(bench.state("pairs")) == states
    # the recomputed output answers from the latest complete time on (the state was compacted to the frontier)
    assert bench.store.trace("total").since == Frontier([(frontier.elements[0][0] - 1,)], 1)
    check(bench, path, factor=3)

    # later runs are incremental again, with compaction between them
    for _ in range(2):
        stream.ingest()
        res = bench.run(path)
        assert res.rebuilt is None and not res.nothing_to_do
        stream.compact()
    check(bench, path, factor=3)

    # an operator declared before all the others: the others' state is found by fingerprint
    path = bench.pipeline("pairs", PIPE_FIRST)
    assert_refused(bench, path, spark_jobs, [f"new distinct (pairs.py:{line_of(PIPE_FIRST, 'distinct')})"])
    ex = explain_pipeline(bench.store, path, name="pairs")
    assert f"pairs.py:{line_of(PIPE_FIRST, 'distinct')}" in [o.where for o in ex.operators if o.change == "new"]
    assert "changed" not in [o.change for o in ex.operators] and ex.removed == []
    before = layer_ids(bench)
    res = bench.run(path, rebuild=True)
    assert res.rebuilt["recomputed"] == [f"distinct (pairs.py:{line_of(PIPE_FIRST, 'distinct')})"]
    assert write_steps(res) == {"first"} and sorted(bench.state("pairs")) == states
    assert {n: layer_ids(bench)[n] for n in states + ["per_v", "total"]} == {n: before[n] for n in states + ["per_v", "total"]}
    stream.ingest()
    bench.run(path)
    check(bench, path, factor=3, outputs=("per_v", "total", "first"))


def test_inputs_consumed_past_the_frontier_make_a_rebuild_read_the_inputs(tmp_path):
    """With ys sealed behind xs, the state holds updates at and beyond the frontier, so it
    cannot stand for the latest complete time: the rebuild recomputes from the inputs, and
    the output is exact from where their history is (compacted up to the pipeline's hold)."""
    bench = Bench(tmp_path)
    stream = Stream(bench, seed=5, lag=True)
    path = bench.pipeline("pairs", PIPE)
    for _ in range(2):
        stream.ingest()
        bench.run(path)
        stream.compact()
    since = bench.store.trace("total").since
    for n in ("xs", "ys"):
        since = since.join(bench.store.trace(n).effective_since())
    path = bench.pipeline("pairs", PIPE_SCALED)
    res = bench.run(path, rebuild=True)
    assert res.rebuilt["reused_state"] == []
    assert f"join (pairs.py:{line_of(PIPE_SCALED, 'kept.join')})" in res.rebuilt["recomputed"]
    total = bench.store.trace("total")
    assert total.since == since
    # here the inputs were compacted up to the frontier: the output answers from it, once
    # the frontier passes it; the latest complete time is refused, not answered empty
    assert total.since == total.upper
    with pytest.raises(StoreError, match="earliest time that works is 10"):
        as_of(bench.store, "total")
    stream.ingest()
    bench.run(path)
    check(bench, path, factor=3)
    assert as_of(bench.store, "total").num_rows == len(ref(3)(bench.inputs_at((15,)))["total"].rows)


def _forget_fingerprints(bench: Bench, name: str) -> None:
    """Make the pipeline's record look as a store written before fingerprints left it."""
    def change(s, _):
        out = s.with_traces({})
        out.pipelines[name] = {k: v for k, v in s.pipelines[name].items() if k not in ("operators", "dataflow")}
        return out
    bench.store.write_and_commit("legacy", lambda registry: None, change)


def test_stores_written_before_fingerprints_run_on_and_an_edit_rebuilds_everything(tmp_path, spark_jobs):
    bench = Bench(tmp_path)
    stream = Stream(bench, seed=11)
    path = bench.pipeline("pairs", PIPE)
    stream.ingest()
    bench.run(path)
    _forget_fingerprints(bench, "pairs")
    states = sorted(bench.state("pairs"))

    # the same file: its state traces are found by their old names (else the outputs are wrong)
    stream.ingest()
    res = bench.run(path)
    assert res.rebuilt is None and sorted(bench.state("pairs")) == states
    assert write_steps(res) & set(states), "the run added to the state it found"
    assert "operators" in bench.store.state().pipelines["pairs"], "the record is written anew"
    check(bench, path, factor=2)

    # another file, and a record that cannot tell what changed: refused, then all recomputed
    _forget_fingerprints(bench, "pairs")
    path = bench.pipeline("pairs", PIPE_SCALED)
    assert_refused(bench, path, spark_jobs, ["another version of its file", "--rebuild"])
    res = bench.run(path, rebuild=True)
    assert res.rebuilt is None and {"total", "per_v"} <= write_steps(res)
    check(bench, path, factor=3)


REACH = '''
def pipeline(p):
    edges = p.input("edges")
    roots = p.input("roots")
    start = roots.select(root="node", node="node")
    steps = edges.select(node="src", next="dst")

    def one_more_hop(reached):
        return (reached.join(steps, on="node").select("root", node="next")
                .concat(start).distinct())

    reach = start.iterate(one_more_hop)
    p.output("reach", reach, key=["root", "node"])
    p.output("sizes", reach.count(by="root").select("root", n="count * 1"))
'''
# the loop's body changed (a filter every row passes: the same answers, another dataflow)
REACH_BODY = REACH.replace(".concat(start).distinct())", '.concat(start).distinct().filter("node >= 0"))')
# and then the operator after the loop
REACH_AFTER = REACH_BODY.replace('n="count * 1"', 'n="count * 10"')


def test_a_loop_whose_body_changed_is_recomputed_from_the_stored_state_it_reads(tmp_path):
    from tests.helpers.graphs import Bench as GraphBench
    from tests.helpers.graphs import reach_ref

    edges_schema = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
    roots_schema = pa.schema([("node", pa.int64())])
    bench, rng = GraphBench(tmp_path), random.Random(9)

    def ingest(r: int) -> None:
        times = range(3 * r, 3 * r + 3)
        es = [((rng.randrange(10), rng.randrange(10)), (rng.choice(times),), 1) for _ in range(14)]
        es += [(row, (3 * r + 2,), -1) for row, t, _ in es[:2] if t[0] < 3 * r + 2]  # some edges go again
        bench.ingest("edges", edges_schema, es, upper=(3 * r + 3,))
        bench.ingest("roots", roots_schema, [((rng.randrange(10),), (3 * r,), 1)], upper=(3 * r + 3,))

    def check(scale: int) -> None:
        def ref(inputs):
            reach = reach_ref(list(inputs["edges"]), [r for (r,) in inputs["roots"]])
            sizes = {}
            for root, _ in reach:
                sizes[root] = sizes.get(root, 0) + 1
            return {"reach": reach, "sizes": {(root, n * scale): 1 for root, n in sizes.items()}}
        times = bench.input_times() + [(bench.input_times()[-1][0] + 1,)]
        for out, columns in (("reach", ["root", "node"]), ("sizes", ["root", "n"])):
            since = bench.store.trace(out).since
            bench.check(ref, {out: columns}, [t for t in times if since.beyond(t)])

    path = bench.pipeline("reach", REACH)
    for r in range(2):
        ingest(r)
        bench.run(path)
    check(scale=1)
    path = bench.pipeline("reach", REACH_BODY)
    res = bench.run(path, rebuild=True)
    loop = f"loop (reach.py:{line_of(REACH, 'iterate')})"
    assert loop in res.rebuilt["recomputed"] and res.rebuilt["replaced_outputs"] == ["reach", "sizes"]
    assert res.rebuilt["reused_state"] == ["reach.select_3"], "the edges' select is read, not recomputed"
    check(scale=1)
    path = bench.pipeline("reach", REACH_AFTER)
    before = layer_ids(bench)
    res = bench.run(path, rebuild=True)
    assert loop not in res.rebuilt["recomputed"] and res.rebuilt["replaced_outputs"] == ["sizes"]
    assert [n for n in res.rebuilt["reused_state"] if ".leave_" in n], "the loop's result is read, not recomputed"
    assert before["reach"] == layer_ids(bench)["reach"]
    ingest(2)
    bench.run(path)
    check(scale=10)
    v = verify_pipeline(bench.store, path)
    assert v.ok and v.times, "\n".join(x.describe() for x in v.differences)

