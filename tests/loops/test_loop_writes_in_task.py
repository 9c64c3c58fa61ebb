"""A small loop that runs in one task writes its run's layers itself: one Spark job a run.

Node-set reachability (``sample_data/pipelines/reach_nodes.py``) has no column that deals
its rows to tasks, so a small run takes it in one task; that task then also writes the
output and every state trace (the loop's arrangements and the edges it entered), instead
of a second job reading its result back. It also reads the run's new edges from their
layer files itself (``ops/loops/direct.py``), through the ``select`` between the input and
the loop, so that the run needs no DataFrame job at all, nor builds a DataFrame of them. Over random sliding windows
(retractions, roots coming and going, several runs, compaction between them, one run in
batches, which writes by job as before) the output must equal breadth-first search at
every time; so must a variant whose entered edges pass a ``filter`` and a computed
``select`` and whose loop result something else reads (the task's leaves then come back
as frames).
"""

from __future__ import annotations

import pytest

from tests.helpers.graphs import EDGES, ROOTS, Bench, bfs_distances, samples_source, sliding_window_runs


def reached_ref(inputs) -> dict:
    """Every node some root reaches (a root reaches itself)."""
    edges, roots = set(inputs["edges"]), {r for (r,) in inputs["roots"]}
    return {"reached": {(n,): 1 for r in roots for n in bfs_distances(edges, r)}}


@pytest.mark.parametrize("seed", [5])
def test_node_set_reach_in_one_task_writes_its_layers_itself_and_equals_bfs_at_every_time(
        spark, tmp_path, monkeypatch, seed):
    import ops.run.run

    monkeypatch.setenv("DDCLI_LOOP_PATH", "auto")
    frames_read = []  # the new edges' layers read into a DataFrame (ops/run/deferred.py)
    read_layers = ops.run.run.read_layers
    monkeypatch.setattr(ops.run.run, "read_layers", lambda *a: frames_read.append(a) or read_layers(*a))
    bench = Bench(tmp_path)
    path = bench.pipeline("reach_nodes", samples_source("reach_nodes"))
    runs = list(sliding_window_runs(seed, nodes=14, edges=24, steps=[8, 10, 10]))
    for r, (eu, ru, upper) in enumerate(runs):
        bench.ingest("edges", EDGES, eu, upper=upper)
        bench.ingest("roots", ROOTS, ru, upper=upper)
        batched = r == 1
        frames_read.clear()
        res = bench.run(path, batch_times=4 if batched else None)
        assert bool(frames_read) == batched  # read by the task itself, no frame ever built
        [loop] = [s for s in res.steps if s["step"] == "loop_path"]
        assert loop["path"] == "local" and "few enough for one task" in loop["not_resident"], loop
        writes = {s["trace"]: s for s in res.steps if s["step"] == "write"}
        assert set(writes) == {"reached"} | set(bench.store.state().pipelines["reach_nodes"]["state"])
        in_task = {t for t, s in writes.items() if s.get("in_task")}
        [local] = [s for s in res.steps if s["step"] == "loop_local"] if not batched else [None]
        if batched:  # its batches add to what earlier ones recorded: written by a job
            assert not in_task, writes
        else:
            assert in_task == set(writes), writes
            assert res.spark_jobs == 1, res.steps
            assert local["direct"] and local["entered_from_files"] >= 1, local  # no frame in or out
        if r < len(runs) - 1:
            bench.advance_and_compact((upper[0] - 4,))
    bench.check(reached_ref, {"reached": ("node",)})


FILTERED_REACH = """
def pipeline(p):
    edges = p.input("edges")
    roots = p.input("roots")
    steps = edges.filter("src <> 0").select(node="src", next="dst + 0")

    def one_more_hop(reached):
        return reached.join(steps, on="node").select(node="next").concat(roots).distinct()

    reached = roots.iterate(one_more_hop)
    p.output("reached", reached, key=["node"])
    p.output("buckets", reached.select(bucket="node % 3").count(by="bucket"))
"""


def filtered_ref(inputs) -> dict:
    """Reach over the edges that do not leave node 0 (a root at first), and the reached nodes counted by
    ``node % 3``."""
    edges = {(a, b): k for (a, b), k in inputs["edges"].items() if a != 0}
    reached = reached_ref({"edges": edges, "roots": inputs["roots"]})["reached"]
    buckets = {}
    for (n,) in reached:
        buckets[n % 3] = buckets.get(n % 3, 0) + 1
    return {"reached": reached, "buckets": {(b, c): 1 for b, c in buckets.items()}}


@pytest.mark.parametrize("seed", [5])
def test_entered_edges_read_from_files_through_a_filter_and_a_computed_select_equal_bfs_at_every_time(
        spark, tmp_path, monkeypatch, seed):
    monkeypatch.setenv("DDCLI_LOOP_PATH", "auto")
    bench = Bench(tmp_path)
    path = bench.pipeline("filtered_reach", FILTERED_REACH)
    runs = list(sliding_window_runs(seed, nodes=12, edges=22, steps=[9, 9]))
    for r, (eu, ru, upper) in enumerate(runs):
        bench.ingest("edges", EDGES, eu, upper=upper)
        bench.ingest("roots", ROOTS, ru, upper=upper)
        res = bench.run(path)
        [local] = [s for s in res.steps if s["step"] == "loop_local"]
        assert not local["direct"], local  # a count reads the loop's result: it comes back as a frame
        assert local["entered_from_files"] >= 1, local
        if r < len(runs) - 1:
            bench.advance_and_compact((upper[0] - 3,))
    bench.check(filtered_ref, {"reached": ("node",), "buckets": ("bucket", "count")})
