"""Graphs for the loop tests: the sample pipelines as one pipeline, plain references
(breadth-first search, union-find), the harness that runs a pipeline over generated edge
streams in several runs, and random sliding windows of edges.

The references read only what a test generated, never the store's view of its inputs.
"""

from __future__ import annotations

import os
import random
import textwrap
from collections import Counter, defaultdict, deque

import pyarrow as pa
import pyarrow.parquet as pq

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
