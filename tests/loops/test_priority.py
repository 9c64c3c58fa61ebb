"""Prioritized fixed points: ``enter_at`` and ``iterate(priority=…)``.

The two samples that ship — ``cc_prioritized.py`` (labels enter by their bit length) and
``sssp.py`` (shortest paths prioritized by distance) — run on random sliding windows of a
weighted graph (edges come and go, weights change) over several runs with compaction
between, and at every time the inputs hold their outputs must equal union-find and
Dijkstra on the inputs accumulated there. The same pipelines without priority run beside
them: prioritization changes the order records arrive in a loop, never the fixed point, so
both write identical output traces. Then: retractions that lengthen shortest paths, rounds
that skip empty iterations, and the errors a priority can cause.

The references read only the updates the tests generated (``tests/helpers/graphs.py``'s
harness); they never import the code they check.
"""

from __future__ import annotations

import heapq
import os
import random
from collections import deque

import pyarrow as pa
import pytest

from ops.errors import PipelineError
from ops.run.run import run_pipeline
from tests.helpers.graphs import SAMPLES, Bench, labels_ref, root_updates

WEIGHTED = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("weight", pa.int64())])
ROOTS = pa.schema([("node", pa.int64())])

# both samples as shipped, each also without its priority, as one pipeline (one run drives
# all four loops)
BOTH = f'''
import importlib.util
import os


def _sample(name):
    spec = importlib.util.spec_from_file_location("sample_" + name, os.path.join({SAMPLES!r}, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pipeline(p):
    cc, sssp = _sample("cc_prioritized"), _sample("sssp")
    cc.pipeline(p)
    sssp.pipeline(p)
    edges, roots = p.input("edges"), p.input("roots")
    p.output("labels_plain", cc.components(edges, prioritized=False), key="node")
    p.output("distances_plain", sssp.shortest_paths(edges, roots, prioritized=False), key=["root", "node"])
'''

OUTPUTS = {"labels": ("node", "label"), "labels_plain": ("node", "label"),
           "distances": ("root", "node", "dist"), "distances_plain": ("root", "node", "dist")}


# ------------------------------------------------------------------ plain references


def dijkstra(edges, root) -> dict:
    """Least total weight from ``root`` to every node it reaches (parallel edges: the lightest)."""
    succ: dict = {}
    for s, d, w in edges:
        succ.setdefault(s, []).append((d, w))
    dist, heap = {}, [(0, root)]
    while heap:
        k, n = heapq.heappop(heap)
        if n in dist:
            continue
        dist[n] = k
        for m, w in succ.get(n, ()):
            if m not in dist:
                heapq.heappush(heap, (k + w, m))
    return dist


def weighted_ref(inputs) -> dict:
    edges = set(inputs["edges"])  # a multiplicity > 1 changes neither result
    roots = {r for (r,) in inputs["roots"]}
    labels = labels_ref({(s, d) for s, d, _ in edges})
    distances = {(r, n, k): 1 for r in roots for n, k in dijkstra(edges, r).items()}
    return {"labels": labels, "labels_plain": labels, "distances": distances, "distances_plain": distances}


# ------------------------------------------------------------------ random weighted windows


def weighted_window_runs(seed: int, *, nodes: int, edges: int, steps: list[int]):
    """A random weighted graph, then per run ``steps`` moves: the oldest edge leaves at one
    time and a random new one arrives at the next; now and then an edge's weight changes
    (retracted and re-inserted with a new weight at one time) or a root comes or goes.
    Yields ``(edge updates, root updates, upper)`` per run."""
    rng = random.Random(seed)
    weight = lambda: rng.randrange(1, 6)  # noqa: E731
    window = deque((rng.randrange(nodes), rng.randrange(nodes), weight()) for _ in range(edges))
    roots = {0, rng.randrange(1, nodes)}
    t, first = 0, True
    for moves in steps:
        eu, ru = [], []
        if first:
            eu += [(e, (0,), 1) for e in window]
            ru += [((r,), (0,), 1) for r in roots]
            t, first = 1, False
        for _ in range(moves):
            old = window.popleft()
            eu.append((old, (t,), -1))
            t += 1
            new = (rng.randrange(nodes), rng.randrange(nodes), weight())
            window.append(new)
            eu.append((new, (t,), 1))
            x = rng.random()
            if x < 0.35:  # a weight changes (often down: shorter paths; or up: longer ones)
                i = rng.randrange(len(window))
                s, d, w = window[i]
                window[i] = (s, d, rng.randrange(1, 6))
                eu += [((s, d, w), (t,), -1), (window[i], (t,), 1)]
            elif x < 0.5:
                if len(roots) >= 3:
                    r = rng.choice(sorted(roots))
                    roots.discard(r)
                    ru.append(((r,), (t,), -1))
                else:
                    r = rng.choice([n for n in range(nodes) if n not in roots])
                    roots.add(r)
                    ru.append(((r,), (t,), 1))
            t += 1
        yield eu, ru, (t,)


def consolidated_updates(store, trace: str) -> list:
    """The trace's updates, consolidated: (data, time) -> diff, sorted."""
    acc: dict = {}
    for r in store.read_updates(store.trace(trace)).to_pylist():
        diff = r.pop("diff")
        k = tuple(sorted(r.items()))
        acc[k] = acc.get(k, 0) + diff
    return sorted((k, v) for k, v in acc.items() if v)


@pytest.fixture(scope="module")
def weighted_windows(spark, tmp_path_factory):
    """Two runs of both samples (and their plain versions) over one random stream, with
    ``advance --since`` and ``compact`` between runs; the loop statistics of each run."""
    bench = Bench(tmp_path_factory.mktemp("weighted"))
    path = bench.pipeline("weighted", BOTH)
    stats = []
    runs = list(weighted_window_runs(7, nodes=14, edges=24, steps=[10, 12]))
    for r, (eu, ru, upper) in enumerate(runs):
        bench.ingest("edges", WEIGHTED, eu, upper=upper)
        bench.ingest("roots", ROOTS, ru, upper=upper)
        stats.append([])
        bench.run(path, loop_stats=stats[-1])
        if r < len(runs) - 1:
            bench.advance_and_compact((upper[0] - 5,) if r % 2 == 0 else (upper[0] + 3,))
    return bench, stats


def test_cc_prioritized_and_sssp_equal_union_find_and_dijkstra_at_every_time_of_weighted_windows(weighted_windows):
    bench, _ = weighted_windows
    assert len(bench.input_times()) >= 40  # many distinct times, in two runs
    changes = {(u[0][:2], u[1]): set() for u in bench.updates["edges"]}
    for (s, d, w), t, _ in bench.updates["edges"]:
        changes[((s, d), t)].add(w)
    assert sum(len(ws) > 1 for ws in changes.values()) >= 5  # weights changed, at one time each
    assert sum(u[2] < 0 for u in bench.updates["edges"]) >= 22  # edges left the window
    bench.check(weighted_ref, OUTPUTS)


def test_prioritized_and_plain_versions_write_identical_output_traces(weighted_windows):
    bench, stats = weighted_windows
    for prioritized, plain in (("labels", "labels_plain"), ("distances", "distances_plain")):
        a, b = consolidated_updates(bench.store, prioritized), consolidated_updates(bench.store, plain)
        assert a and a == b, f"{prioritized} and {plain} differ"
    # and the loops really were prioritized: records entered at iterations far apart
    loops = {s["loop"] for run in stats for s in run}
    assert loops == {"cc_prioritized", "cc", "sssp", "sssp_plain"}, loops
    # sssp's priority (``CAST(dist AS BIGINT)``) is SQL the tasks evaluate: its whole fixed point ran inside
    # them; cc_prioritized's (``length(bin(label))``) is not, so it ran round by round
    paths = {s["loop"]: s.get("path", "round") for run in stats for s in run}
    assert paths["sssp"] == "local" and paths["cc_prioritized"] == "round", paths


# ------------------------------------------------------------------ hand-made


def weighted(changes, t) -> list:
    """``"+1,2,5 -2,3,1"`` -> updates at time ``t`` (a sign, then src,dst,weight)."""
    return [(tuple(int(x) for x in c[1:].split(",")), t, 1 if c[0] == "+" else -1) for c in changes.split()]


def test_retractions_that_lengthen_shortest_paths_are_corrected_in_later_runs(spark, tmp_path):
    """A chain 0 -> 1 -> ... -> 6 of weight 1 with a shortcut 0 -> 4 of weight 1; later runs
    remove the shortcut, raise a weight on the chain, and cut it: distances grow, then vanish."""
    bench = Bench(tmp_path)
    path = bench.pipeline("sssp", open(os.path.join(SAMPLES, "sssp.py")).read())
    chain = " ".join(f"+{i},{i + 1},1" for i in range(6))
    bench.ingest("edges", WEIGHTED, weighted(chain + " +0,4,1", (0,)), upper=(1,))
    bench.ingest("roots", ROOTS, root_updates("+0", (0,)), upper=(1,))
    bench.run(path)
    bench.advance_and_compact((1,))
    bench.ingest("edges", WEIGHTED, weighted("-0,4,1", (1,)) + weighted("-2,3,1 +2,3,10", (2,)), upper=(3,))
    bench.ingest("roots", ROOTS, [], upper=(3,))
    bench.run(path)
    bench.advance_and_compact((2,))
    bench.ingest("edges", WEIGHTED, weighted("-3,4,1", (3,)), upper=(4,))
    bench.ingest("roots", ROOTS, [], upper=(4,))
    bench.run(path)
    cols = {"distances": ("root", "node", "dist")}
    bench.check(lambda i: {"distances": weighted_ref(i)["distances"]}, cols)
    got = bench.outputs_at(cols, [(0,), (1,), (2,), (3,)])["distances"]
    assert dict(got[(0,)]) == {(0, n, k): 1 for n, k in enumerate([0, 1, 2, 3, 1, 2, 3])}
    assert dict(got[(1,)]) == {(0, n, n): 1 for n in range(7)}
    assert dict(got[(2,)]) == {(0, n, k): 1 for n, k in enumerate([0, 1, 2, 12, 13, 14, 15])}
    assert dict(got[(3,)]) == {(0, n, k): 1 for n, k in enumerate([0, 1, 2, 12])}


FRACTIONAL = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("weight", pa.float64())])


def test_fractional_weights_give_exact_distances(spark, tmp_path):
    """Weights such as 0.5 and 32.5 (a double column), prioritized and plain, against
    Dijkstra on the same numbers: no weight is rounded to a whole number on the way."""
    bench = Bench(tmp_path)
    path = bench.pipeline("weighted", BOTH)
    edges = [((s, d, w), (0,), 1) for s, d, w in [(0, 1, 0.5), (1, 2, 32.5), (0, 2, 33.25), (2, 3, 0.25),
                                                  (0, 3, 40.0)]]
    edges += [((1, 2, 32.5), (1,), -1), ((1, 2, 0.75), (1,), 1)]
    bench.ingest("edges", FRACTIONAL, edges, upper=(2,))
    bench.ingest("roots", ROOTS, root_updates("+0", (0,)), upper=(2,))
    bench.run(path)
    bench.check(weighted_ref, OUTPUTS)
    got = bench.outputs_at({"distances": ("root", "node", "dist")}, [(0,), (1,)])["distances"]
    assert dict(got[(0,)]) == {(0, 0, 0.0): 1, (0, 1, 0.5): 1, (0, 2, 33.0): 1, (0, 3, 33.25): 1}
    assert dict(got[(1,)]) == {(0, 0, 0.0): 1, (0, 1, 0.5): 1, (0, 2, 1.25): 1, (0, 3, 1.5): 1}


SEEDS = pa.schema([("g", pa.int64()), ("n", pa.int64())])

# records enter a million iterations apart: stepping through every iteration would take
# millions of rounds, skipping to the pending ones takes about two per priority
FAR_APART = '''
def pipeline(p):
    seeds = p.input("seeds")

    def grow(x):
        return x.concat(seeds.enter_at(x, "n * 1000000")).distinct()

    p.output("grown", seeds.filter("n = 0").iterate(grow, max_rounds=12, name="far_apart"))
'''


def test_rounds_skip_iterations_where_nothing_is_pending(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("far", FAR_APART)
    rows = [((g, n), (0,), 1) for g, n in [(1, 0), (2, 1), (3, 2), (4, 2), (5, 4)]]
    bench.ingest("seeds", SEEDS, rows + [((6, 3), (1,), 1), ((2, 1), (2,), -1)], upper=(3,))
    stats = []
    bench.run(path, loop_stats=stats)

    def ref(inputs):
        return {"grown": {row: 1 for row in inputs["seeds"]}}

    bench.check(ref, {"grown": ("g", "n")})
    assert stats and all(s["rounds"] <= 2 * 5 + 1 for s in stats), stats


BAD = '''
def pipeline(p):
    seeds = p.input("seeds")

    def grow(x):
        return x.concat(seeds.enter_at(x, {expr!r})).distinct()

    p.output("grown", seeds.filter("false").iterate(grow, name="picky"))
'''


@pytest.mark.parametrize("loop_path", ["round", "local"])  # checked on the driver, or inside the tasks
@pytest.mark.parametrize("expr, shown", [("n - 3", "-1"), ("CASE WHEN n = 2 THEN NULL ELSE n END", "null")],
                         ids=["negative", "null"])
def test_a_null_or_negative_iteration_is_refused_naming_the_loop_and_the_value(spark, tmp_path, digest, monkeypatch,
                                                                                 expr, shown, loop_path):
    monkeypatch.setenv("DDCLI_LOOP_PATH", loop_path)
    bench = Bench(tmp_path)
    path = bench.pipeline("bad", BAD.format(expr=expr))
    bench.ingest("seeds", SEEDS, [((1, 5), (0,), 1), ((2, 2), (0,), 1), ((3, 4), (1,), 1)], upper=(2,))
    version, before = bench.store.state().version, digest(bench.store.path)
    with pytest.raises(PipelineError) as e:
        run_pipeline(bench.store, path)
    msg = str(e.value)
    assert "\n" not in msg and "loop picky" in msg and f"is {shown};" in msg and expr in msg, msg
    assert bench.store.state().version == version and digest(bench.store.path) == before


def test_a_priority_that_is_not_an_integer_is_refused_before_spark_does_any_work(spark, tmp_path, spark_jobs):
    bench = Bench(tmp_path)
    path = bench.pipeline("text", BAD.format(expr="n / 2"))
    bench.ingest("seeds", SEEDS, [((1, 5), (0,), 1)], upper=(1,))
    jobs = spark_jobs()
    with pytest.raises(PipelineError, match=r"loop picky: enter \(text.py:\d+\): the iteration 'n / 2' is double; it must be an integer"):
        run_pipeline(bench.store, path)
    assert spark_jobs() == jobs


def test_enter_at_takes_a_loop_variable_or_a_loop_and_a_collection_from_outside_it():
    from ops.dataflow.builder import Pipeline

    p = Pipeline("declared")
    seeds = p.input("seeds")
    loop = p.loop(name="outer")
    x = loop.variable(seeds)
    by_variable, by_scope = seeds.enter_at(x, "n"), seeds.enter_at(loop, "n + 1")
    for c, expected in ((by_variable, "n"), (by_scope, "n + 1")):
        assert c.scope is loop and c.node.op == "enter" and c.node.args["priority"] == expected
    with pytest.raises(PipelineError, match=r"enter_at \(test_priority.py:\d+\): expects a loop variable or a loop"):
        seeds.enter_at("outer", "n")
    with pytest.raises(PipelineError, match=r"not from an enclosing scope of loop outer"):
        by_scope.enter_at(loop, "n")


# ------------------------------------------------------------------ nested


# Reachability with an inner loop in the outer loop's body: the inner loop closes the outer
# variable's pairs under the edges, its variable prioritized (``iterate(priority=…)``) and
# the outer variable entered into it at an iteration of its own (``enter_at``), both
# expressions of the row. The same pipeline without priorities beside it.
NESTED_PRIORITIES = '''
def reach(edges, roots, prioritized):
    start = roots.select(root="node", node="node")
    steps = edges.select(node="src", next="dst")

    def outer(x):
        def inner(y):
            entered = x.enter_at(y, "node % 3") if prioritized else x
            return y.join(steps, on="node").select("root", node="next").concat(entered).distinct()
        seeds = x.filter("node % 2 = 0")
        closed = (seeds.iterate(inner, priority="node % 4 + 1", name="inner_p") if prioritized
                  else seeds.iterate(inner, name="inner"))
        return closed.concat(start).concat(x).distinct()

    return start.iterate(outer, name="outer_p" if prioritized else "outer")


def pipeline(p):
    edges, roots = p.input("edges"), p.input("roots")
    p.output("reach_p", reach(edges, roots, True), key=["root", "node"])
    p.output("reach", reach(edges, roots, False), key=["root", "node"])
'''


def test_nested_loops_with_enter_at_and_a_prioritized_inner_variable_equal_bfs_at_every_time(spark, tmp_path):
    """An inner prioritized loop inside an outer one, over random sliding windows in two runs
    with compaction between: both outputs equal breadth-first search at every time, and the
    prioritized and plain pipelines write identical traces."""
    from tests.helpers.graphs import EDGES, reach_ref, sliding_window_runs

    bench = Bench(tmp_path)
    path = bench.pipeline("nested_p", NESTED_PRIORITIES)
    stats = []
    runs = list(sliding_window_runs(5, nodes=12, edges=20, steps=[8, 8]))
    for r, (eu, ru, upper) in enumerate(runs):
        bench.ingest("edges", EDGES, eu, upper=upper)
        bench.ingest("roots", ROOTS, ru, upper=upper)
        bench.run(path, loop_stats=stats)
        if r < len(runs) - 1:
            bench.advance_and_compact((upper[0] - 3,))

    def ref(inputs):
        pairs = reach_ref(set(inputs["edges"]), {n for (n,) in inputs["roots"]})
        return {"reach": pairs, "reach_p": pairs}

    bench.check(ref, {"reach": ("root", "node"), "reach_p": ("root", "node")})
    a, b = consolidated_updates(bench.store, "reach_p"), consolidated_updates(bench.store, "reach")
    assert a and a == b
    assert {"outer_p", "inner_p", "outer", "inner"} <= {s["loop"] for s in stats}, stats
