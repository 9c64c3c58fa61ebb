"""The Pathway column of ``ddcli bench reach --loop-paths``: the stream it
replays, its output changes against a plain reference, the comparison, and the one-line
skip when Pathway is not installed. No Spark."""

from __future__ import annotations

import collections

import pyarrow as pa
import pytest

from ddcli.bench import pathway as bench_pathway
from ddcli.bench.reach import SlidingGraph


def _reach(edges: collections.Counter, roots: range) -> set[tuple[int, int]]:
    out = set()
    adj = collections.defaultdict(set)
    for (a, b), n in edges.items():
        if n > 0:
            adj[a].add(b)
    for r in roots:
        seen, todo = {r}, [r]
        while todo:
            for b in adj[todo.pop()]:
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        out |= {(r, x) for x in seen}
    return out


def _components(edges: collections.Counter) -> set[tuple[int, int]]:
    """``(node, label)``: every node on a live edge, labelled with the smallest node id of
    its component, the edges taken both ways (a plain union-find, not a fixed point)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for (a, b), n in edges.items():
        if n > 0:
            parent.setdefault(a, a), parent.setdefault(b, b)
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)
    return {(x, find(x)) for x in parent}


def _reference_changes(stream: pa.Table, roots: range, query: str = "reach") -> pa.Table:
    """Output changes of ``query`` (reach or cc) at every time of ``stream``, by recomputing
    from scratch."""
    rows = stream.to_pylist()
    edges: collections.Counter = collections.Counter()
    before: set = set()
    cols = ["root", "node"] if query == "reach" else ["node", "label"]
    out = {cols[0]: [], cols[1]: [], "time": [], "diff": []}
    for t in sorted({r["time"] for r in rows}):
        for r in rows:
            if r["time"] == t:
                edges[(r["src"], r["dst"])] += r["diff"]
        now = _reach(edges, roots) if query == "reach" else _components(edges)
        for (a, b), d in [(x, 1) for x in now - before] + [(x, -1) for x in before - now]:
            out[cols[0]].append(a), out[cols[1]].append(b), out["time"].append(t), out["diff"].append(d)
        before = now
    return pa.table({k: pa.array(v, pa.int64()) for k, v in out.items()})


def test_edge_stream_removals_name_the_oldest_live_instance():
    g = SlidingGraph(20, 30, 3)
    ini = g.initial()
    s = bench_pathway.edge_stream(ini, [g.step(10), g.step(16)]).to_pylist()
    live = {}
    for r in s:
        if r["diff"] > 0:
            assert r["eid"] not in live
            live[r["eid"]] = (r["src"], r["dst"])
        else:
            assert live.pop(r["eid"]) == (r["src"], r["dst"])
            assert r["eid"] == min(list(live) + [r["eid"]])  # first in, first out
    assert len(live) == 30


def test_compare_advances_times_to_since_and_counts_mismatches():
    a = pa.table({"root": [0, 0, 0], "node": [1, 1, 2], "time": [1, 5, 6], "diff": [1, -1, 1]})
    b = pa.table({"root": [0, 0], "node": [2, 1], "time": [6, 2], "diff": [1, 1]})
    assert not bench_pathway.compare(a, b, ["root", "node"], 0)["same"]
    got = bench_pathway.compare(a, pa.table({"root": [0], "node": [2], "time": [6], "diff": [1]}), ["root", "node"], 5)
    assert got["same"] and got["ddcli_changes"] == 1


@pytest.mark.skipif(bench_pathway.available() is None, reason="Pathway is not installed (pip install 'ddcli[bench]')")
def test_pathway_reach_equals_a_from_scratch_reference_at_every_time(tmp_path):
    g = SlidingGraph(25, 40, 11)
    ini, warm, batch = g.initial(), g.step(6), g.step(30)
    roots = range(3)
    ref = _reference_changes(pa.concat_tables([ini, warm, batch]), roots)
    got = bench_pathway.bench_pathway("reach", ini, warm, batch, roots=3, work=str(tmp_path), ours=ref, since=0)
    assert got["same"], got
    assert got["pathway_changes"] == got["ddcli_changes"] > 0


def test_the_cc_reference_labels_components_by_their_smallest_node():
    edges = collections.Counter({(5, 3): 1, (3, 9): 1, (7, 8): 1, (8, 8): 1, (1, 2): 0})
    assert _components(edges) == {(3, 3), (5, 3), (9, 3), (7, 7), (8, 7)}


@pytest.mark.skipif(bench_pathway.available() is None, reason="Pathway is not installed (pip install 'ddcli[bench]')")
def test_pathway_cc_equals_a_from_scratch_reference_at_every_time(tmp_path):
    g = SlidingGraph(30, 24, 5)  # sparse: several components that merge and split as edges slide
    ini, warm, batch = g.initial(), g.step(6), g.step(40)
    ref = _reference_changes(pa.concat_tables([ini, warm, batch]), range(0), "cc")
    got = bench_pathway.bench_pathway("cc", ini, warm, batch, roots=3, work=str(tmp_path), ours=ref, since=0)
    assert got["same"], got
    assert got["pathway_changes"] == got["ddcli_changes"] > 0
    splits = ref.filter(pa.compute.less(ref["diff"], 0)).num_rows
    assert splits > 0  # the stream removes labels too, not only adds them


def test_bench_says_in_one_line_when_pathway_is_missing(monkeypatch, tmp_path):
    from ddcli.bench import loops as bench_loops

    monkeypatch.setattr(bench_pathway, "available", lambda: None)
    said = []
    res = bench_loops.bench_loop_paths(samples=(), work=str(tmp_path), log=said.append)
    assert said == [res["pathway_skipped"]] and "not installed" in said[0]
    assert res["pathway_runs"] == [] and res["ddcli_over_pathway"] == {}
