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

import os
import random
import textwrap
from collections import Counter, defaultdict, deque

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ops.errors import PipelineError
from ops.run.run import run_pipeline
from ops.verify.verify import verify_pipeline
from storage.lattice import Frontier, time_columns
from storage.store import Store
from tests.helpers import REPO
from tests.helpers import reference as R

SAMPLES = os.path.join(REPO, "sample_data", "pipelines")

EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
ROOTS = pa.schema([("node", pa.int64())])

# Sample pipelines as the outputs of one pipeline (one run drives all their loops); the
# samples' own files are loaded, so what is tested is exactly what ships.
SAMPLE_OUTPUTS = {"reach": "reach", "cc": "labels", "bfs": "distances"}


def samples_source(*names: str) -> str:
    return f'''
import importlib.util
import os

SAMPLES = {SAMPLES!r}


def _sample(name):
    spec = importlib.util.spec_from_file_location("sample_" + name, os.path.join(SAMPLES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pipeline(p):
    for name in {names!r}:
        _sample(name).pipeline(p)
'''


GRAPHS = samples_source("reach", "cc", "bfs")  # outputs reach, labels, distances
REACH = open(os.path.join(SAMPLES, "reach.py")).read()


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


# ------------------------------------------------------------------ plain references


def present(updates, t) -> Counter:
    """Rows of a generated stream accumulated at ``t`` (the streams never go negative)."""
    acc = Counter()
    for row, s, diff in updates:
        if R.leq(s, t):
            acc[row] += diff
    assert all(m >= 0 for m in acc.values()), f"the test's own stream is negative at {t}"
    return +acc


def _successors(edges) -> dict:
    out = defaultdict(set)
    for s, d in edges:
        out[s].add(d)
    return out


def bfs_distances(edges, root) -> dict:
    """Shortest hop count from ``root`` to every node it reaches (itself at 0)."""
    succ, dist, queue = _successors(edges), {root: 0}, deque([root])
    while queue:
        n = queue.popleft()
        for m in succ.get(n, ()):
            if m not in dist:
                dist[m] = dist[n] + 1
                queue.append(m)
    return dist


def reach_ref(edges, roots) -> dict:
    return {(r, n): 1 for r in roots for n in bfs_distances(edges, r)}


def distances_ref(edges, roots) -> dict:
    return {(r, n, k): 1 for r in roots for n, k in bfs_distances(edges, r).items()}


def labels_ref(edges) -> dict:
    """Union-find over the undirected edges: each node labelled by its component's least id."""
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s, d in edges:
        a, b = find(s), find(d)
        if a != b:
            parent[max(a, b)] = min(a, b)  # the root of every set is its least member
    return {(n, find(n)): 1 for n in list(parent)}


def parity_ref(edges, roots) -> tuple[dict, dict]:
    """Nodes reachable from each root by a walk of even / odd length (BFS on node x parity)."""
    succ = _successors(edges)
    even, odd = {}, {}
    for r in roots:
        seen, queue = {(r, 0)}, deque([(r, 0)])
        while queue:
            n, par = queue.popleft()
            for m in succ.get(n, ()):
                if (m, 1 - par) not in seen:
                    seen.add((m, 1 - par))
                    queue.append((m, 1 - par))
        for n, par in seen:
            (even if par == 0 else odd)[(r, n)] = 1
    return even, odd


def graphs_ref(inputs) -> dict:
    edges, roots = set(inputs["edges"]), {r for (r,) in inputs["roots"]}
    return {"reach": reach_ref(edges, roots), "labels": labels_ref(edges), "distances": distances_ref(edges, roots)}


def reach_only_ref(inputs) -> dict:
    return {"reach": reach_ref(set(inputs["edges"]), {r for (r,) in inputs["roots"]})}


GRAPH_COLUMNS = {"reach": ("root", "node"), "labels": ("node", "label"), "distances": ("root", "node", "dist")}


# ------------------------------------------------------------------ the harness


class Bench:
    """A store, the updates the test generated for it, and the checks."""

    def __init__(self, root, d: int = 1):
        self.root = str(root)
        os.makedirs(self.root, exist_ok=True)
        self.d = d
        self.tcols = time_columns(d)
        self.store = Store(os.path.join(self.root, "store"))
        self.schemas: dict[str, pa.Schema] = {}
        self.updates: dict[str, list] = defaultdict(list)
        self.files = 0
        self.compactions = 0

    def ingest(self, name: str, schema: pa.Schema, updates, *, upper: tuple):
        """Append ``updates`` ``[(row, time, diff)]`` and seal the trace to ``{upper}``."""
        upper_text = "(" + ",".join(map(str, upper)) + ")"
        if not updates and name in self.schemas:
            self.store.advance(name, upper=upper_text)
            return
        self.files += 1
        cols = {f.name: pa.array([u[0][i] for u in updates], f.type) for i, f in enumerate(schema)}
        for i, c in enumerate(self.tcols):
            cols[c] = pa.array([u[1][i] for u in updates], pa.int64())
        cols["diff"] = pa.array([u[2] for u in updates], pa.int64())
        path = os.path.join(self.root, f"{name}_{self.files}.parquet")
        pq.write_table(pa.table(cols), path)
        self.store.ingest(name, [path], key=[schema.names[0]], upper=upper_text)
        self.schemas[name] = schema
        self.updates[name] += [(tuple(r), tuple(t), x) for r, t, x in updates]

    def advance_and_compact(self, since: tuple):
        """Allow compaction of every input to ``since`` and compact the whole store
        (alternately geometric merges and a full compaction, garbage collected at once)."""
        text = "(" + ",".join(map(str, since)) + ")"
        for name in self.schemas:
            self.store.advance(name, since=text)
        self.store.compact(full=self.compactions % 2 == 1, grace_seconds=0)
        self.compactions += 1

    def pipeline(self, name: str, source: str) -> str:
        path = os.path.join(self.root, f"{name}.py")
        with open(path, "w") as fh:
            fh.write(textwrap.dedent(source))
        return path

    # the loop paths of every run of the current test (see the ``loop_path`` fixture)
    paths_taken: list[str] = []

    def run(self, path: str, **kw):
        res = run_pipeline(self.store, path, **kw)
        assert not res.nothing_to_do
        Bench.paths_taken += [s["path"] for s in res.steps if s["step"] == "loop_path"]
        return res

    def inputs_at(self, t) -> dict[str, Counter]:
        return {n: present(self.updates[n], t) for n in self.schemas}

    def input_times(self) -> list[tuple]:
        return sorted({u[1] for ups in self.updates.values() for u in ups})

    def outputs_at(self, outputs, times) -> dict:
        """``{output: {t: {row in the given column order: count}}}`` read from the output traces."""
        found = {}
        for out, columns in outputs.items():
            tr = self.store.trace(out)  # every output exists after a run, even if empty
            assert sorted(tr.data_columns) == sorted(columns), (out, tr.data_columns)
            rows = self.store.read_updates(tr).to_pylist()
            found[out] = {t: R.fold_updates(rows, tr.data_columns, self.tcols, t).project(columns)
                          for t in times}
        return found

    def check(self, ref, outputs: dict, times=None, *, path: str | None = None):
        """Every output at every time in ``times`` (default: every input time and one past the
        last) equals ``ref(inputs at t)[output]``; with ``path``, ``verify`` also agrees."""
        if times is None:
            times = self.input_times()
            times = times + [tuple(c + 1 for c in times[-1])]
        found = self.outputs_at(outputs, times)
        problems = []
        for out, columns in outputs.items():
            for t in times:
                expected = ref(self.inputs_at(t))[out]
                if found[out][t] != expected:
                    problems.append(f"output {out!r} at time {t}: "
                                    + R.describe_difference(R.Coll(columns, expected), R.Coll(columns, found[out][t])))
                    break  # the first failing time of each output
        assert not problems, "\n".join(problems)
        if path is not None:
            v = verify_pipeline(self.store, path)
            assert v.times, "verify checked no time"
            assert v.ok, "\n".join(x.describe() for x in v.differences)


def assert_loop_state_follows_the_frontier(store: Store, pipeline: str):
    """The loop's operator state is kept in the store with its iteration coordinates (some
    state updates are at iterations > 0) and compacted to the frontier the pipeline consumed
    (iteration coordinates at 0); the inputs are held there."""
    state = store.state()
    rec = state.pipelines[pipeline]
    d = rec["d"]
    frontier = Frontier.from_json(rec["frontier"], d)
    in_loops = []
    for name in rec["state"]:
        t = state.traces[name]
        assert t.since == Frontier([f + (0,) * (t.d - d) for f in frontier], t.d), (name, t.since, frontier)
        if t.d > d:
            in_loops.append(t)
    assert in_loops, f"pipeline {pipeline!r} keeps no state inside its loops: {rec['state']}"
    later = [t.name for t in in_loops
             if any(x > 0 for x in store.read_updates(t).column(time_columns(t.d)[-1]).to_pylist())]
    assert later, "no loop state at an iteration after the first"
    for name in rec["inputs"]:
        assert state.traces[name].holds[pipeline].since == frontier


def edge_updates(changes, t) -> list:
    """``"+1,2 -2,3"`` -> updates at time ``t`` (a sign, then src,dst)."""
    out = []
    for c in changes.split():
        s, d = c[1:].split(",")
        out.append(((int(s), int(d)), t, 1 if c[0] == "+" else -1))
    return out


def root_updates(changes, t) -> list:
    return [((int(c[1:]),), t, 1 if c[0] == "+" else -1) for c in changes.split()]


# ------------------------------------------------------------------ random sliding windows


def sliding_window_runs(seed: int, *, nodes: int, edges: int, steps: list[int]):
    """A random graph, then per run ``steps`` moves of a sliding window: remove the oldest edge
    at one time, add a random new edge at the next (an edge already present gets
    multiplicity 2); now and then a root is inserted or removed, at its own time or sharing
    one with an edge update. Yields ``(edge updates, root updates, upper)`` per run."""
    rng = random.Random(seed)
    window = deque((rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges))
    roots = {0, rng.randrange(1, nodes)}
    t = 0
    first = True
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
            new = (rng.randrange(nodes), rng.randrange(nodes))
            window.append(new)
            eu.append((new, (t,), 1))
            x = rng.random()
            if x < 0.3:
                when = t if x < 0.15 else t + 1  # shares a time with the edge, or its own
                if len(roots) >= 4 or (len(roots) >= 2 and rng.random() < 0.5):
                    r = rng.choice(sorted(roots))
                    roots.discard(r)
                    ru.append(((r,), (when,), -1))
                else:
                    r = rng.choice([n for n in range(nodes) if n not in roots])
                    roots.add(r)
                    ru.append(((r,), (when,), 1))
                t = when
            t += 1
        yield eu, ru, (t,)


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
