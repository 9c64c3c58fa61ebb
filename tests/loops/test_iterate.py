"""``iterate``: fixed points on Spark against plain graph algorithms in Python.

Every test ingests update streams it generates itself, runs a pipeline over them in several
runs (many distinct times per run, ``advance --since`` and ``compact`` on the inputs between
runs), and then checks, for every time ``t`` the inputs hold, that the output trace
accumulated at ``t`` equals a textbook computation on the inputs accumulated at ``t``:
breadth-first search for reachability and hop counts, union-find for connected components,
plain loops for the nested and mutually recursive pipelines. Never the store's own view of
the inputs: the references read only what the test generated.

A loop round costs Spark jobs, so the graphs are small (tens of nodes) and each test keeps to
two or three runs.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pyarrow as pa
import pytest

from ops.errors import PipelineError
from ops.run.run import run_pipeline
from tests.helpers import reference as R
from tests.helpers.graphs import (EDGES, GRAPH_COLUMNS, GRAPHS, REACH, ROOTS, Bench,
                                  assert_loop_state_follows_the_frontier, edge_updates, graphs_ref, parity_ref,
                                  reach_only_ref, reach_ref, root_updates, samples_source, sliding_window_runs)


def pytest_generate_tests(metafunc):
    """Every test here on the three ways a loop runs (``ops/loops/plan.py``): round
    by round on the driver; inside tasks wherever the plan allows it (``local``:
    partition-local where columns deal the loop, resident otherwise); and resident for
    every such loop (``resident``: N tasks exchanging rows by key each round). A test whose
    loops the plan never runs in tasks (``round_only``) would run the same code thrice, so
    it runs once. The two longest (``tasks_only``) leave out the round path, which costs
    a Spark job a round: tests/loops/test_loop_partition_local.py runs it on sliding windows in
    batches, and checks it writes the very traces the other paths write."""
    if "loop_path" in metafunc.fixturenames:
        paths = ["round", "local", "resident"]
        if metafunc.definition.get_closest_marker("round_only"):
            paths = ["round"]
        elif metafunc.definition.get_closest_marker("tasks_only"):
            paths = ["local", "resident"]
        metafunc.parametrize("loop_path", paths, indirect=True)


@pytest.fixture(autouse=True)
def loop_path(request, monkeypatch):
    """The test's setting of ``DDCLI_LOOP_PATH``; with ``local`` or ``resident``, some loop
    of the test's runs must really have taken that path (else the setting tested nothing new)."""
    monkeypatch.setenv("DDCLI_LOOP_PATH", request.param)
    Bench.paths_taken = []
    yield request.param
    wanted = {"local": {"local", "resident"}, "resident": {"resident"}}.get(request.param)
    if wanted and Bench.paths_taken:
        assert wanted & set(Bench.paths_taken), f"no loop ran inside tasks as {request.param}: {Bench.paths_taken}"


@pytest.mark.tasks_only
def test_reach_cc_and_bfs_equal_bfs_and_union_find_at_every_time_of_sliding_windows(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("graphs", GRAPHS)
    runs = list(sliding_window_runs(2, nodes=20, edges=40, steps=[15, 16, 16]))
    for r, (eu, ru, upper) in enumerate(runs):
        bench.ingest("edges", EDGES, eu, upper=upper)
        bench.ingest("roots", ROOTS, ru, upper=upper)
        assert len({u[1] for u in eu + ru}) >= 30  # many distinct times in one run
        bench.run(path)
        assert_loop_state_follows_the_frontier(bench.store, "graphs")
        bench.check(graphs_ref, GRAPH_COLUMNS, path=path if r == len(runs) - 1 else None)
        if r < len(runs) - 1:
            # first inside what was consumed, then ahead of the upper (the hold keeps it back)
            bench.advance_and_compact((upper[0] - 7,) if r % 2 == 0 else (upper[0] + 5,))
    assert len(bench.input_times()) >= 90


@pytest.mark.tasks_only
def test_a_run_in_batches_of_a_few_times_equals_bfs_and_union_find_at_every_time(spark, tmp_path):
    """``batch_times``: a run takes its new times a few at a time, compacting its state to
    each next batch's first time; outputs stay exact at every time, across runs too."""
    bench = Bench(tmp_path)
    path = bench.pipeline("graphs", GRAPHS)
    runs = list(sliding_window_runs(5, nodes=16, edges=30, steps=[8, 9]))
    for r, (eu, ru, upper) in enumerate(runs):
        bench.ingest("edges", EDGES, eu, upper=upper)
        bench.ingest("roots", ROOTS, ru, upper=upper)
        assert len({u[1] for u in eu + ru}) >= 16  # three batches or more
        bench.run(path, batch_times=6)
        assert_loop_state_follows_the_frontier(bench.store, "graphs")
        bench.check(graphs_ref, GRAPH_COLUMNS, path=path if r == len(runs) - 1 else None)
        if r < len(runs) - 1:
            bench.advance_and_compact((upper[0] - 3,))


# ------------------------------------------------------------------ hand-made cases


def test_removing_one_edge_of_a_long_chain_retracts_through_every_round(spark, tmp_path):
    """A chain 0 -> 1 -> ... -> 14 from root 0; cutting an edge near the start must retract
    reachability and component labels of every node after it, one round per hop, in a later
    run than the one that built them (from the loop state the store keeps)."""
    bench = Bench(tmp_path)
    path = bench.pipeline("chain", samples_source("reach", "cc"))
    outputs = {o: GRAPH_COLUMNS[o] for o in ("reach", "labels")}
    chain = [(i, i + 1) for i in range(14)]
    bench.ingest("edges", EDGES, [(e, (0,), 1) for e in chain], upper=(1,))
    bench.ingest("roots", ROOTS, root_updates("+0", (0,)), upper=(1,))
    bench.run(path)
    bench.check(graphs_ref, outputs)
    assert len(bench.outputs_at(outputs, [(0,)])["reach"][(0,)]) == 15
    bench.advance_and_compact((1,))

    # 1: cut 1 -> 2 (13 nodes lose reach and label 0); 2: a shortcut 0 -> 9; 3: the cut edge
    # comes back; 4: node 0 loses both its edges (labels of 1..14 change from 0 to 1 all
    # along the chain)
    eu = edge_updates("-1,2", (1,)) + edge_updates("+0,9", (2,)) + edge_updates("+1,2", (3,)) \
        + edge_updates("-0,1 -0,9", (4,))
    bench.ingest("edges", EDGES, eu, upper=(5,))
    bench.ingest("roots", ROOTS, [], upper=(5,))
    bench.run(path)
    bench.check(graphs_ref, outputs)
    got = bench.outputs_at(outputs, [(0,), (1,), (2,), (4,)])
    assert set(got["reach"][(0,)]) == {(0, n) for n in range(15)}
    assert set(got["reach"][(1,)]) == {(0, 0), (0, 1)}
    assert set(got["labels"][(1,)]) == {(0, 0), (1, 0)} | {(n, 2) for n in range(2, 15)}
    assert set(got["reach"][(2,)]) == {(0, 0), (0, 1)} | {(0, n) for n in range(9, 15)}
    assert set(got["reach"][(4,)]) == {(0, 0)}
    assert set(got["labels"][(4,)]) == {(n, 1) for n in range(1, 15)}


def test_several_updates_at_one_time_including_an_insert_and_a_delete_of_the_same_edge(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("graphs", GRAPHS)
    # run 1 -- 0: a triangle, 3 reached two ways; 1: both ways to 3 change at once, (4,5) is
    # inserted and deleted at the same time; 2: a second root and a duplicate edge at once;
    # 3: everything into 2 removed while (2,3) is deleted and re-inserted
    eu = (edge_updates("+1,2 +1,3 +2,3", (0,))
          + edge_updates("-1,3 -2,3 +3,4 +1,4 +4,3 +4,5 -4,5", (1,))
          + edge_updates("+1,4 +5,1 +2,3", (2,))
          + edge_updates("-1,2 -2,3 +2,3 -1,4", (3,)))
    bench.ingest("edges", EDGES, eu, upper=(4,))
    bench.ingest("roots", ROOTS, root_updates("+1", (0,)) + root_updates("+2", (2,)), upper=(4,))
    bench.run(path)
    bench.check(graphs_ref, GRAPH_COLUMNS)
    bench.advance_and_compact((2,))
    # run 2 -- 4: a root swapped while edges change at the same time; 5: every edge removed
    # and the roots with them; 6: part of the graph back, insert+delete pairs again
    eu = (edge_updates("-1,4 +1,2 +1,2 -1,2", (4,))
          + edge_updates("-1,2 -2,3 -2,3 +2,3 -3,4 -4,3 -5,1", (5,))
          + edge_updates("+3,1 +1,2 +2,3 +2,5 -2,5", (6,)))
    bench.ingest("edges", EDGES, eu, upper=(7,))
    bench.ingest("roots", ROOTS, root_updates("-1 +3", (4,)) + root_updates("-2 -3", (5,))
                 + root_updates("+3 +9", (6,)), upper=(7,))
    bench.run(path)
    bench.check(graphs_ref, GRAPH_COLUMNS, path=path)
    got = bench.outputs_at(GRAPH_COLUMNS, [(1,), (5,)])
    assert set(got["reach"][(1,)]) == {(1, n) for n in (1, 2, 3, 4)}
    assert not got["reach"][(5,)] and not got["labels"][(5,)] and not got["distances"][(5,)]


# ------------------------------------------------------------------ nested loops


NUMS = pa.schema([("k", pa.int64()), ("a", pa.int64())])
BASES = pa.schema([("k", pa.int64()), ("b", pa.int64())])

# The digital root in base b: repeat "sum of the base-b digits" until one digit is left. The
# outer loop repeats digit sums; each outer round runs an inner loop that peels one digit per
# round (rest, acc) -> (rest div b, acc + rest mod b) until rest is 0. `bases` is used inside
# the inner body, so it is entered through both loops.
NESTED = '''
def pipeline(p):
    nums = p.input("nums")
    bases = p.input("bases")

    def digit_sum(x):
        def peel(y):
            return y.join(bases, on="k").select("k", rest="rest div b", acc="acc + rest % b")
        start = x.select("k", rest="v", acc="CAST(0 AS BIGINT)")
        return start.iterate(peel, name="digits").select("k", v="acc")

    p.output("digital_roots", nums.select("k", v="a").iterate(digit_sum, name="repeat"), key="k")
'''


def digital_root(a: int, b: int) -> int:
    while a >= b:
        s = 0
        while a:
            a, s = a // b, s + a % b
        a = s
    return a


def digital_roots_ref(inputs) -> dict:
    bases = defaultdict(list)
    for (k, b), m in inputs["bases"].items():
        bases[k] += [b] * m
    out = Counter()
    for (k, a), m in inputs["nums"].items():
        assert len(bases[k]) <= 1, "the test keeps at most one base per key"
        for b in bases[k]:
            out[(k, digital_root(a, b))] += m
    return {"digital_roots": dict(out)}


@pytest.mark.round_only  # a loop holding another loop runs round by round (ops/loops/plan.py)
@pytest.mark.parametrize("batch_times", [None, 1], ids=["one_batch", "a_batch_per_time"])
def test_a_nested_loop_computes_digital_roots_by_an_inner_digit_sum_loop(spark, tmp_path, batch_times):
    bench = Bench(tmp_path)
    path = bench.pipeline("nested", NESTED)
    rng = random.Random(3)
    nums = [(k, rng.randrange(0, 700)) for k in range(8)] + [(2, 699), (5, 77)]
    bases = {k: rng.choice([4, 7, 10]) for k in range(8)}
    bench.ingest("nums", NUMS, [(x, (0,), 1) for x in nums] + [((3, 599), (1,), 2)], upper=(2,))
    bench.ingest("bases", BASES, [((k, b), (0,), 1) for k, b in bases.items() if k != 6], upper=(2,))
    bench.run(path, batch_times=batch_times)
    bench.check(digital_roots_ref, {"digital_roots": ("k", "v")})
    bench.advance_and_compact((1,))
    # 2: a number changes (retract + insert at once); 3: a base changes, key 6 gets one and key 7
    # loses its own; 4: a number arrives for a key without a base, and one with a new base
    nu = [(nums[0], (2,), -1), ((0, 666), (2,), 1), ((3, 599), (4,), -1), ((9, 50), (4,), 1),
          ((6, 12), (3,), 1), ((10, 300), (4,), 1)]
    bu = [((1, bases[1]), (3,), -1), ((1, 5), (3,), 1), ((6, 5), (3,), 1), ((7, bases[7]), (3,), -1),
          ((10, 4), (4,), 1)]
    bench.ingest("nums", NUMS, nu, upper=(5,))
    bench.ingest("bases", BASES, bu, upper=(5,))
    bench.run(path, batch_times=batch_times)
    bench.check(digital_roots_ref, {"digital_roots": ("k", "v")}, path=path)


# ------------------------------------------------------------------ mutual recursion


# even = roots + odd joined with an edge; odd = even joined with an edge: two variables of one
# loop, `even` set using `odd` before `odd` is set.
PARITY = '''
def pipeline(p):
    edges = p.input("edges")
    roots = p.input("roots")
    start = roots.select(root="node", node="node")
    steps = edges.select(node="src", next="dst")
    loop = p.loop(name="parity")
    even = loop.variable(start)
    odd = loop.variable(start.filter("false"))
    even.set(odd.join(steps, on="node").select("root", node="next").concat(start).distinct())
    odd.set(even.join(steps, on="node").select("root", node="next").distinct())
    p.output("even", loop.leave(even))
    p.output("odd", loop.leave(odd))
'''


def parity_outputs_ref(inputs) -> dict:
    even, odd = parity_ref(set(inputs["edges"]), {r for (r,) in inputs["roots"]})
    return {"even": even, "odd": odd}


def test_mutually_recursive_variables_compute_even_and_odd_walk_reachability(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("parity", PARITY)
    outputs = {"even": ("root", "node"), "odd": ("root", "node")}
    # a path 0 -> 1 -> 2 -> 3 -> 4 (parity by distance) and a few random edges
    rng = random.Random(11)
    base = [(i, i + 1) for i in range(4)] + [(rng.randrange(12), rng.randrange(12)) for _ in range(8)]
    bench.ingest("edges", EDGES, [(e, (0,), 1) for e in base] + edge_updates("+5,6 +6,5", (1,)), upper=(3,))
    bench.ingest("roots", ROOTS, root_updates("+0", (0,)) + root_updates("+5", (2,)), upper=(3,))
    bench.run(path)
    bench.check(parity_outputs_ref, outputs)
    bench.advance_and_compact((2,))
    # 3: an odd cycle (2 -> 0) makes every node on it reachable both ways; 4: the path is cut;
    # 5: the cycle goes, a root goes, another edge comes
    eu = (edge_updates("+2,0", (3,)) + edge_updates("-1,2", (4,))
          + edge_updates("-2,0 +4,7", (5,)))
    bench.ingest("edges", EDGES, eu, upper=(6,))
    bench.ingest("roots", ROOTS, root_updates("-5", (5,)), upper=(6,))
    bench.run(path)
    bench.check(parity_outputs_ref, outputs, path=path)
    got = bench.outputs_at(outputs, [(3,)])
    assert (0, 0) in got["odd"][(3,)] and (0, 1) in got["even"][(3,)]


# ------------------------------------------------------------------ null nodes

NULL_REACH = '''
def pipeline(p):
    edges = p.input("edges")
    start = p.input("roots").select(root="node", node="node")
    steps = edges.select(node="src", next="dst")
    for out, nulls_equal in (("reach", False), ("reach_nulls", True)):
        def hop(reached, nulls_equal=nulls_equal):
            return (reached.join(steps, on="node", nulls_equal=nulls_equal).select("root", node="next")
                    .concat(start).distinct())
        p.output(out, start.iterate(hop), key=["root", "node"])
'''


def null_reach_ref(inputs) -> dict:
    """BFS where a walk reaches a null node but never leaves it (SQL: a null key matches no
    edge), and BFS where null is a node like any other (``nulls_equal``)."""
    edges, roots = set(inputs["edges"]), {r for (r,) in inputs["roots"]}
    sql = {e for e in edges if e[0] is not None}
    return {"reach": reach_ref(sql, roots), "reach_nulls": reach_ref(edges, roots)}


def test_a_walk_reaches_a_null_node_but_goes_no_further_unless_nulls_are_equal(spark, tmp_path):
    bench = Bench(tmp_path)
    path = bench.pipeline("null_reach", NULL_REACH)
    outputs = {"reach": ("root", "node"), "reach_nulls": ("root", "node")}
    rng = random.Random(5)
    nodes = [0, 1, 2, 3, 4, None]
    alive: set = set()
    for r in range(2):
        eu = [(e, (0,), 1) for e in [(0, None), (None, 3)]] if r == 0 else []
        alive |= {e for e, _, _ in eu}
        for t in range(4 * r + 1, 4 * r + 4):  # edges come and go over several times a run
            for _ in range(3):
                e = (rng.choice(nodes), rng.choice(nodes))
                eu.append((e, (t,), -1 if e in alive else 1))
                alive ^= {e}
        bench.ingest("edges", EDGES, eu, upper=(4 * r + 4,))
        roots = [((0,), (0,), 1), ((None,), (0,), 1), ((2,), (1,), 1)] if r == 0 else [((0,), (5,), -1)]
        bench.ingest("roots", ROOTS, roots, upper=(4 * r + 4,))
        bench.run(path)
        bench.check(null_reach_ref, outputs, path=path if r == 1 else None)
    got = bench.outputs_at(outputs, [(0,)])
    assert (0, None) in got["reach"][(0,)] and (0, 3) not in got["reach"][(0,)]
    assert (0, 3) in got["reach_nulls"][(0,)]


# ------------------------------------------------------------------ the round guard


COUNTER = '''
def pipeline(p):
    start = p.input("seeds")

    def bump(x):
        return x.select("g", n="n + 1").concat(start).max(by="g", column="n", name="n")

    p.output("counted", start.iterate(bump, max_rounds=5, name="forever"))
'''


def test_a_loop_that_never_converges_stops_at_max_rounds_naming_the_loop_and_writes_nothing(spark, tmp_path, digest):
    bench = Bench(tmp_path)
    path = bench.pipeline("counter", COUNTER)
    bench.ingest("seeds", pa.schema([("g", pa.int64()), ("n", pa.int64())]), [((1, 0), (0,), 1)], upper=(1,))
    version, before = bench.store.state().version, digest(bench.store.path)
    with pytest.raises(PipelineError) as e:
        run_pipeline(bench.store, path)
    msg = str(e.value)
    assert "\n" not in msg.strip() and "forever" in msg and "5" in msg, msg
    assert bench.store.state().version == version
    assert "counter" not in bench.store.state().pipelines
    assert digest(bench.store.path) == before  # not even a garbage file


# ------------------------------------------------------------------ partially ordered times


def test_reach_over_two_dimensional_times_equals_bfs_at_every_time_of_the_grid(spark, tmp_path):
    """Times ``(version, k)``: each run adds a version (k = 0..3), sealed with upper
    ``(v+1, 0)``. The output at every time of the grid, including joins of input times that
    no input holds, equals BFS on the graph accumulated there."""
    bench = Bench(tmp_path, d=2)
    path = bench.pipeline("reach", REACH)
    rng = random.Random(5)
    nodes = 14
    live: list[tuple] = []  # (edge, time inserted)
    for v in range(3):
        eu, ru = [], []
        if v == 0:
            live = [((rng.randrange(nodes), rng.randrange(nodes)), (0, 0)) for _ in range(16)]
            eu += [(e, t, 1) for e, t in live]
            ru += root_updates("+0 +3", (0, 0))
        for k in range(1 if v == 0 else 0, 4):
            t = (v, k)
            for _ in range(2):
                # retract only an edge inserted at a time <= t: never negative anywhere
                old = [i for i, (_, s) in enumerate(live) if R.leq(s, t)]
                if old and rng.random() < 0.8:
                    e, _ = live.pop(rng.choice(old))
                    eu.append((e, t, -1))
                e = (rng.randrange(nodes), rng.randrange(nodes))
                live.append((e, t))
                eu.append((e, t, 1))
        ru += {0: root_updates("+5", (0, 2)), 1: root_updates("-3", (1, 1)) + root_updates("+7", (1, 3)),
               2: root_updates("+3 -0", (2, 2))}[v]
        bench.ingest("edges", EDGES, eu, upper=(v + 1, 0))
        bench.ingest("roots", ROOTS, ru, upper=(v + 1, 0))
        bench.run(path)
        grid = [(a, b) for a in range(v + 1) for b in range(6)]
        bench.check(reach_only_ref, {"reach": ("root", "node")}, grid, path=path if v == 2 else None)
        if v < 2:
            bench.advance_and_compact((v, 2))
