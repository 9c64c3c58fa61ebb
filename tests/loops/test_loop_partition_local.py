"""Partition-local fixed points: which loops take the path, and that it changes nothing.

Reachability and hop counts only ever combine rows of one root, with the edges broadcast,
so their loops run inside Spark tasks, dealt by root; connected components spread labels
across nodes, so no columns deal them: cc runs resident, in tasks that exchange each
round's changes by key, while its rows are few enough for them, and round by round beyond
that. On the same random streams (sliding windows with retractions, many times per run,
several runs, compaction between them) every path must write the same output traces, and
all must equal breadth-first search and union-find at every time.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from ops.run.run import run_pipeline
from tests.helpers.graphs import EDGES, GRAPH_COLUMNS, ROOTS, Bench, graphs_ref, samples_source, sliding_window_runs

OUTPUT = {"reach": "reach", "bfs": "distances", "cc": "labels"}


def loop_paths(result) -> list[dict]:
    return [s for s in result.steps if s["step"] == "loop_path"]


def one_run(tmp_path, sample: str, seed: int, nodes: int, edges: int, step: int) -> tuple[Bench, list[dict]]:
    """``sample`` run once over one sliding window of a random graph: the bench and the
    run's loop paths."""
    bench = Bench(tmp_path)
    path = bench.pipeline(sample, samples_source(sample))
    eu, ru, upper = next(sliding_window_runs(seed, nodes=nodes, edges=edges, steps=[step]))
    bench.ingest("edges", EDGES, eu, upper=upper)
    bench.ingest("roots", ROOTS, ru, upper=upper)
    return bench, loop_paths(run_pipeline(bench.store, path))


@pytest.mark.parametrize("sample,local", [("reach", True), ("bfs", True), ("cc", False)])
def test_reach_and_bfs_run_partition_local_by_root_and_a_small_cc_in_one_task(spark, tmp_path, monkeypatch, sample, local):
    monkeypatch.setenv("DDCLI_LOOP_PATH", "auto")
    bench, [step] = one_run(tmp_path, sample, 3, nodes=12, edges=20, step=4)
    if local:
        assert step["path"] == "local" and step["by"] == ["root"], step
        assert step["broadcast_rows"] > 0  # the edges
    else:  # no partition columns, and few rows in local mode: one task, not two resident ones
        assert step["path"] == "local" and "few enough for one task" in step["not_resident"], step
        assert "by node" in step["why"] and "by label" in step["why"], step["why"]
    out = OUTPUT[sample]
    bench.check(graphs_ref, {out: GRAPH_COLUMNS[out]})


def test_cc_runs_in_one_task_when_resident_loops_may_use_one_and_a_bad_cap_is_one_line(
        spark, tmp_path, monkeypatch):
    from ops.errors import PipelineError

    monkeypatch.setenv("DDCLI_LOOP_PATH", "auto")
    monkeypatch.setenv("DDCLI_LOOP_TASKS", "1")
    bench, [step] = one_run(tmp_path, "cc", 3, nodes=12, edges=20, step=4)
    assert step["path"] == "local" and step["not_resident"] == "DDCLI_LOOP_TASKS=1", step
    bench.check(graphs_ref, {"labels": GRAPH_COLUMNS["labels"]})
    monkeypatch.setenv("DDCLI_LOOP_TASKS", "0")
    with pytest.raises(PipelineError, match="DDCLI_LOOP_TASKS must be a positive integer, not '0'"):
        one_run(tmp_path / "bad", "cc", 3, nodes=12, edges=20, step=4)


def test_cc_runs_round_by_round_when_its_rows_are_too_many_for_its_tasks(spark, tmp_path, monkeypatch):
    import ops.loops.local

    monkeypatch.setenv("DDCLI_LOOP_PATH", "auto")
    monkeypatch.setattr(ops.loops.local, "ONE_TASK_ROWS", 10)
    monkeypatch.setattr(ops.loops.route, "FEW_ROWS", 0)  # resident, however few its rows
    bench = Bench(tmp_path)
    path = bench.pipeline("cc", samples_source("cc"))
    jobs = []
    real_task_job = ops.loops.local.pack_frames  # called only when a loop's job is built
    monkeypatch.setattr(ops.loops.local, "pack_frames", lambda *a, **kw: jobs.append(1) or real_task_job(*a, **kw))
    for run, (eu, ru, upper) in enumerate(sliding_window_runs(5, nodes=12, edges=20, steps=[3, 4])):
        bench.ingest("edges", EDGES, eu, upper=upper)
        bench.ingest("roots", ROOTS, ru, upper=upper)
        jobs.clear()
        [step] = loop_paths(run_pipeline(bench.store, path))
        assert step["path"] == "round" and "more than 10 rows a task for 2 tasks" in step["why"], step
        if run:  # the stored state is over the limit: refused on the driver, no task job tried
            assert "stored state holds" in step["why"] and not jobs, (step, jobs)
    bench.check(graphs_ref, {"labels": GRAPH_COLUMNS["labels"]})


def test_resident_tasks_that_fail_together_hand_the_batch_to_rounds_and_the_answer_is_exact(
        spark, tmp_path, monkeypatch):
    """A stage Spark runs again must not read the exchange files its first run left: each
    task claims its place in the folder, and a task finding its claim taken fails them all
    (here every claim is taken before the job starts, as after a lost executor). The job
    fails, the batch runs round by round, the report says why, and cc is exact."""
    import ops.loops.local

    monkeypatch.setenv("DDCLI_LOOP_PATH", "auto")
    monkeypatch.setattr(ops.loops.route, "FEW_ROWS", 0)  # resident, however few its rows
    real = ops.loops.local._resident_job

    def claims_taken(packed, tasks, task, out_wide, folder):
        os.makedirs(folder)
        for me in range(tasks):
            open(os.path.join(folder, f"claim.{me}"), "w").close()
        return real(packed, tasks, task, out_wide, folder)

    monkeypatch.setattr(ops.loops.local, "_resident_job", claims_taken)
    bench, [step] = one_run(tmp_path, "cc", 8, nodes=12, edges=20, step=4)
    assert step["path"] == "round" and step["why"].startswith("its tasks failed together"), step
    assert "ran a second time" in step["why"], step
    bench.check(graphs_ref, {"labels": GRAPH_COLUMNS["labels"]})


def test_a_task_holding_more_than_its_row_budget_hands_the_loop_to_rounds_whose_reduces_hold_little(
        spark, tmp_path, monkeypatch):
    """A loop's task stops once it holds more rows than ``DDCLI_LOOP_TASK_ROWS``
    (a hot root), and the loop runs round by round, for that batch and the rest of the
    run; there each reduce task holds at most ``DDCLI_REDUCE_TASK_ROWS`` rows in Arrow
    (``ops/reduce/held_rows.py``), the rest spilled and reduced in shares. Exact at every time."""
    import ops.loops.local

    monkeypatch.setenv("DDCLI_LOOP_PATH", "auto")
    monkeypatch.setattr(ops.loops.route, "FEW_ROWS", 0)  # cc resident, however few its rows
    monkeypatch.setenv("DDCLI_LOOP_TASK_ROWS", "40")
    monkeypatch.setenv("DDCLI_REDUCE_TASK_ROWS", "16")
    bench = Bench(tmp_path)
    path = bench.pipeline("graphs", samples_source("reach", "bfs", "cc"))
    for r, (eu, ru, upper) in enumerate(sliding_window_runs(6, nodes=12, edges=22, steps=[6, 7])):
        bench.ingest("edges", EDGES, eu, upper=upper)
        bench.ingest("roots", ROOTS, ru, upper=upper)
        steps = loop_paths(bench.run(path))
        assert [s["path"] for s in steps] == ["round"] * 3, steps  # cc's resident tasks stop together
        assert all(s["why"].startswith("a task held ") and "more than 40 (DDCLI_LOOP_TASK_ROWS)" in s["why"]
                   for s in steps), steps
        if r == 0:
            bench.advance_and_compact((upper[0] - 3,))
    bench.check(graphs_ref, GRAPH_COLUMNS)


def test_round_by_round_when_forced_by_the_switch(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("DDCLI_LOOP_PATH", "round")
    _, [step] = one_run(tmp_path, "reach", 4, nodes=8, edges=12, step=2)
    assert step["path"] == "round" and "DDCLI_LOOP_PATH=round" in step["why"]


def history(bench: Bench, out: str) -> dict:
    """An output trace's updates, consolidated: (row, time) -> diff."""
    tr = bench.store.trace(out)
    acc = Counter()
    for r in bench.store.read_updates(tr).to_pylist():
        acc[(tuple(r[c] for c in sorted(tr.data_columns)), tuple(r[t] for t in bench.tcols))] += r["diff"]
    return {k: v for k, v in acc.items() if v}


# the path each sample's loop takes under each setting
PATHS = {"round": ["round"] * 3, "local": ["local", "local", "resident"], "resident": ["resident"] * 3}


@pytest.mark.parametrize("seed", [11])  # one stream of three runs: a second seed cost 6 min of suite
def test_every_path_writes_identical_output_traces_equal_to_bfs_and_union_find_at_every_time(
        spark, tmp_path, monkeypatch, seed):
    benches = {}
    runs = list(sliding_window_runs(seed, nodes=16, edges=30, steps=[10, 12, 12]))
    for mode in PATHS:
        monkeypatch.setenv("DDCLI_LOOP_PATH", mode)
        bench = benches[mode] = Bench(tmp_path / mode)
        path = bench.pipeline("graphs", samples_source("reach", "bfs", "cc"))
        for r, (eu, ru, upper) in enumerate(runs):
            bench.ingest("edges", EDGES, eu, upper=upper)
            bench.ingest("roots", ROOTS, ru, upper=upper)
            res = bench.run(path, batch_times=7 if r == 1 else None)  # run 2: a run in batches
            assert [s["path"] for s in loop_paths(res)] == PATHS[mode]
            if r < len(runs) - 1:
                bench.advance_and_compact((upper[0] - 5,))
        bench.check(graphs_ref, GRAPH_COLUMNS)
    for out in GRAPH_COLUMNS:
        histories = {mode: history(b, out) for mode, b in benches.items()}
        assert histories["round"] and all(h == histories["round"] for h in histories.values()), out
