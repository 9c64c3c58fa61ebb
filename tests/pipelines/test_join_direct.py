"""A join whose sides are the run's inputs, in tasks that read their key ranges from the
layer files and write the outputs' layers (ops/operators/join_direct.py), against the reference.

Their write steps say the tasks wrote them. A hot key replaced at every time on both sides,
random insertions and retractions, null keys, an integer and a string key, many times per
run, several runs, the inputs advanced and compacted between, a run where only one side
changes; with a task budget of a few rows and row groups of a few rows, a first run goes
in several key ranges, and the tasks spill and stream the hot key in parts. Every output at
every time of a box around the input times equals tests/helpers/reference.py; and the
general join (a shuffle through Spark) writes the same changes.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

import storage.layer
from ops.operators import join_direct
from ops.run import evaluate
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import XS, Bench, random_changes, replaced_every_time

pytestmark = pytest.mark.usefixtures("on_spark")  # Spark's tasks are what they test

ZS = pa.schema([("k", pa.int64()), ("u", pa.int64())])
VS = pa.schema([("v", pa.string()), ("n", pa.int64())])

DIRECT = '''
def pipeline(p):
    xs = p.input("xs")
    zs = p.input("zs")
    j = xs.join(zs, on="k")
    p.output("j", j)
    p.output("j_too", j)
    p.output("semi", zs.semijoin(xs, on="k"))
    p.output("by_v", xs.join(p.input("vs"), on="v"))
'''
OUTPUTS = ["j", "j_too", "semi", "by_v"]


def direct_ref(i):
    xs, zs = i["xs"], i["zs"]
    j = R.join(xs, zs, "k")
    return {"j": j, "j_too": j, "semi": R.semijoin(zs, xs, "k"), "by_v": R.join(xs, i["vs"], "v")}


def run_times(d: int, r: int) -> list[tuple]:
    if d == 1:
        return [(t,) for t in range(12 * r, 12 * r + 12)]
    return [(a, b) for a in range(4 * r, 4 * r + 4) for b in range(3)]


def changes(rng, times, live: dict, pool: list, make, hot):
    """The hot key 0's one row replaced at each time (``hot``: its row at a time), and a
    dozen random insertions and retractions of ``make``'s rows."""
    return (replaced_every_time(times, live, "hot", hot) if hot is not None else []) + \
        random_changes(rng, times, make, pool, 12)


def x_row(rng):
    return (rng.choice([1, 2, 3, None]), rng.choice("pq"), rng.randrange(4))


def z_row(rng):
    return (rng.choice([1, 2, 3, 4, None]), rng.randrange(-1, 3))


def v_row(rng):
    return (rng.choice(["p", "q", "r", None]), rng.randrange(3))


def stream(bench: Bench, d: int, seed: int, after_run):
    """Four runs: both sides change in the first three (compacted between), only xs in the last."""
    path = bench.pipeline("direct", DIRECT)
    rng = random.Random(seed)
    live = {"xs": {}, "zs": {}, "vs": {}}
    pools = {"xs": [], "zs": [], "vs": []}
    for r in range(4):
        times = run_times(d, r)
        upper = str(12 * r + 12) if d == 1 else f"({4 * r + 4},0)"  # every input's the same
        xs = changes(rng, times, live["xs"], pools["xs"], x_row, lambda t: (0, "h", (7 * t[0] + t[-1]) % 5))
        nulls = r == 0  # a null key on every side, alive from the first run on
        xs += [((None, None, 1), times[1], 1)] if nulls else []
        bench.ingest("xs", XS, xs, upper=upper)
        if r < 3:
            zs = changes(rng, times, live["zs"], pools["zs"], z_row, lambda t: (0, (5 * t[0] + t[-1]) % 3))
            zs += [((None, 2), times[2], 1)] if nulls else []
            bench.ingest("zs", ZS, zs, upper=upper)
            vs = changes(rng, times, live["vs"], pools["vs"], v_row, None)
            vs += [((None, 3), times[2], 1)] if nulls else []
            bench.ingest("vs", VS, vs, upper=upper)
        else:  # sealed as far as xs: no output change waits beyond the frontier
            bench.store.advance("zs", upper=upper)
            bench.store.advance("vs", upper=upper)
        after_run(r, bench.run(path))
        if r < 2:
            bench.advance_and_compact(str(12 * r + 8) if d == 1 else f"({4 * r + 3},1)", full=r == 1)


@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("budget", [None, "40"])
def test_joins_of_the_runs_inputs_in_tasks_equal_the_reference_at_every_time(spark, tmp_path, monkeypatch, d, budget):
    tasks = []
    run_tasks = join_direct.run_tasks
    monkeypatch.setattr(join_direct, "run_tasks", lambda spark, n, task: (tasks.append(n), run_tasks(spark, n, task)))
    if budget is not None:  # a first run over the budget splits into key ranges; runs after it
        # (old updates to look up) take a task when at most the budget, else the general join
        monkeypatch.setenv("DDCLI_REDUCE_TASK_ROWS", budget)
        monkeypatch.setattr(storage.layer, "ROW_GROUP_ROWS", 6)
    bench = Bench(tmp_path, d)
    path = bench.pipeline("direct", DIRECT)
    runs = []

    def after_run(r, res):
        writes = {s["trace"]: s.get("in_task", False) for s in res.steps if s["step"] == "write"}
        assert set(writes) == set(OUTPUTS), writes
        direct = r == 0 or budget is None or res.rows_in <= int(budget)
        assert all(writes.values()) == direct and any(writes.values()) == direct, (r, res.rows_in, writes)
        runs.append((r, tasks[:]))
        tasks.clear()
        bench.check(path, direct_ref, OUTPUTS, verify=r == 3 and d == 2 and budget is None)  # (one oracle run)

    stream(bench, d, seed=3 + d + (budget is None), after_run=after_run)
    assert [r for r, _ in runs] == [0, 1, 2, 3]
    if budget is None:
        assert all(t == [1, 1, 1] for _, t in runs), runs
    else:
        assert all(n > 1 for n in runs[0][1]), runs  # every join of the first run in ranges
        assert any(t == [1, 1, 1] for _, t in runs[1:]), runs  # and a small run after in one task


def test_tasks_read_only_the_files_whose_keys_meet_their_range(spark, tmp_path, monkeypatch):
    """Each side ingested in three blocks of disjoint keys (0-9, 10-19 with nulls, 20-29),
    merged into layers of several files (a merge of at most 15 rows at once goes by key
    range), before one run over the budget: a task reads only the files its key range meets,
    and every output still equals the reference at every time."""
    jobs = []
    run_direct = evaluate.run_direct
    monkeypatch.setattr(evaluate, "run_direct", lambda spark, job: (jobs.append(job), run_direct(spark, job))[1])
    monkeypatch.setenv("DDCLI_REDUCE_TASK_ROWS", "30")
    monkeypatch.setenv("DDCLI_MERGE_ROWS", "15")
    monkeypatch.setattr(storage.layer, "ROW_GROUP_ROWS", 6)
    rng = random.Random(5)
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("direct", DIRECT)
    for block in range(3):
        keys = [10 * block + i for i in range(10)] + ([None] if block == 1 else [])
        t0 = 10 * block  # each block's times after the one before
        xs = [((rng.choice(keys), rng.choice("pq"), rng.randrange(3)), (t0 + rng.randrange(6),), 1) for _ in range(20)]
        zs = [((rng.choice(keys), rng.randrange(3)), (t0 + rng.randrange(6),), 1) for _ in range(20)]
        vs = [((rng.choice("pq"), rng.randrange(3)), (t0 + rng.randrange(6),), 1) for _ in range(5)]
        bench.ingest("xs", XS, xs + [(r, (t[0] + 3,), -1) for r, t, _ in xs[:5]])  # some retracted later
        bench.ingest("zs", ZS, zs)
        bench.ingest("vs", VS, vs)
    res = bench.run(path)
    assert all(s.get("in_task") for s in res.steps if s["step"] == "write")
    ranged = [job for job in jobs if job.bounds and job.column == "k"]
    assert ranged, jobs
    for job in ranged:
        files = len(job.files[0]) + len(job.files[1])
        assert files > 2 and all(set(r) <= set(range(files)) for r in job.reads)
        assert min(len(r) for r in job.reads) < files, job.reads  # some task leaves files out
    bench.check(path, direct_ref, OUTPUTS)


def test_the_general_join_writes_what_the_direct_one_does(spark, tmp_path, monkeypatch):
    def traces(folder, direct: bool):
        if not direct:
            monkeypatch.setattr(evaluate, "plan_direct", lambda *args: None)
        bench = Bench(tmp_path / folder, 1)
        got = []

        def after_run(r, res):
            in_task = {s["trace"] for s in res.steps if s["step"] == "write" and s.get("in_task")}
            assert in_task == (set(OUTPUTS) if direct else set()), res.steps
            got.append({o: sorted(map(str, bench.rows(o))) for o in OUTPUTS})

        stream(bench, 1, seed=11, after_run=after_run)
        return got

    assert traces("direct", True) == traces("general", False)


def test_time_ranges_cut_the_span_of_every_file_evenly(tmp_path):
    import pyarrow.parquet as pq

    def written(name, values, **options):
        path = str(tmp_path / name)
        pq.write_table(pa.table({"t": pa.array(values, pa.int64())}), path, row_group_size=10, **options)
        return path

    ints, late = written("ints.parquet", list(range(100))), written("late.parquet", list(range(100, 120)))
    assert join_direct.time_cuts([ints, late], "t", 4) == [30, 60, 90]
    assert join_direct.time_cuts([written("two.parquet", [5, 6])], "t", 4) == [6]
    bare = written("bare.parquet", list(range(20)), write_statistics=False)
    assert join_direct.time_cuts([ints, bare], "t", 2) == []


HOT = '''
def pipeline(p):
    p.output("j", p.input("xs").join(p.input("zs"), on="k"))
'''


@pytest.mark.parametrize("d", [1, 2])
def test_one_hot_key_over_the_budget_goes_in_ranges_of_time(spark, tmp_path, monkeypatch, d):
    """Every update of key 0: no key ranges, so the tasks take ranges of the first time
    coordinate, each starting from the live rows the earlier times leave."""
    tasks = []
    run_tasks = join_direct.run_tasks
    monkeypatch.setattr(join_direct, "run_tasks", lambda spark, n, task: (tasks.append(n), run_tasks(spark, n, task)))
    monkeypatch.setenv("DDCLI_REDUCE_TASK_ROWS", "40")
    rng = random.Random(d)
    bench = Bench(tmp_path, d)
    path = bench.pipeline("hot", HOT)
    live = {"xs": {}, "zs": {}}
    pools = {"xs": [], "zs": []}
    for r in range(2):
        times = [(t,) for t in range(30 * r, 30 * r + 30)] if d == 1 else \
            [(a, b) for a in range(8 * r, 8 * r + 8) for b in range(3)]
        upper = str(30 * r + 30) if d == 1 else f"({8 * r + 8},0)"
        xs = changes(rng, times, live["xs"], pools["xs"], lambda g: (0, g.choice("pq"), g.randrange(4)),
                     lambda t: (0, "h", (7 * t[0] + t[-1]) % 5))
        zs = changes(rng, times, live["zs"], pools["zs"], lambda g: (0, g.randrange(-1, 3)),
                     lambda t: (0, (5 * t[0] + t[-1]) % 3))
        bench.ingest("xs", XS, xs, upper=upper)
        bench.ingest("zs", ZS, zs, upper=upper)
        bench.run(path)
        bench.check(path, lambda i: {"j": R.join(i["xs"], i["zs"], "k")}, ["j"], verify=False)
    assert tasks and tasks[0] > 1, tasks  # the first run's join, in ranges of time
