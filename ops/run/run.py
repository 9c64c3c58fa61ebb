"""``ddcli run``: push every input update not yet processed through a pipeline, once.

A run takes, for each input trace, the layers sealed since the pipeline last consumed it
(possibly many distinct times), evaluates the graph on those changes, writes one layer to
every output trace and to every state trace (the arrangements of derived collections),
and commits everything — outputs, state, holds and consumed positions — in one commit.
Killed anywhere, the previous version stays, the written files become garbage, and the
next run redoes exactly the same work.

Frontiers: the pipeline's frontier ``P`` is the lower envelope of its inputs' uppers. Its
state traces are compacted to ``P``, its outputs are complete up to ``P``, and it holds its
inputs at ``P`` (and at the layer sequence number it consumed, so compaction never mixes
layers it has seen with layers it has not).

Batches: a pipeline with loops meets every new update with the whole history of its
partners in this run, at every round, so one batch of ``n`` distinct times costs about
``n^2`` — plus a cost per round (driver work, scheduling) that small batches pay again and
again, which is why batches are large. Such a run goes through the pipeline in batches of
at most ``batch_times`` distinct times (of the first time coordinate, in order), all times
of a batch at once; between batches its operator state is compacted to the next batch's
first time, as differential dataflow compacts its traces when its frontier advances, and
that state and the batch's outputs are materialised, so the frames of the batch's rounds
are released (kept, they fill the heap and each batch is slower than the last). The run
stays one commit, and its cost grows linearly with its size.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Callable

import pyarrow as pa

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, node_key
from ops.dataflow.load import load_pipeline, trace_schemas
from ops.dataflow.operators import JOIN, OPERATORS
from ops.dataflow.precheck import precheck
from ops.errors import PipelineError
from ops.io.read import read_layers
from ops.io.write import layer_of, write_layer, write_sealed_and_pending
from ops.io.write_many import LayerWrite, write_layers
from ops.operators.arrangement import Arrangement
from ops.operators.context import EvalContext
from ops.operators.linear import union_coalesced
from ops.reduce.shared_shuffle import shared_token, write_shared
from ops.run.deferred import DeferredFrame
from ops.run.evaluate import Runtime, evaluate
from ops.run.in_driver import DriverRun, Unfit, evaluate_in_driver, plan_in_driver, write_in_driver
from ops.run.plan_cache import load_plan, plan_key, save_plan
from ops.run.progress import RunProgress, cone_of, updates
from ops.run.rebuild import Backfill, Identity, identify, plan_backfill, state_reusable
from ops.spark.errors import failed_on_data
from ops.spark.session import check_interrupt, get_spark, no_interrupts, partitions, size_partitions
from ops.spark.user_code import user_code_status
from storage.blobs import durability
from storage.errors import Conflict
from storage.lattice import Frontier, format_frontier, minimum, time_columns
from storage.layer import Layer, update_schema
from storage.sql.duck import file_list, quote
from storage.state.history import history_limit, run_entry
from storage.state.readers import describe_holder
from storage.state.trace import Trace, check_new_name
from storage.state.transitions import RunCommit, State, append_run, loop_frontier
from storage.store import Store


@dataclass
class RunResult:
    pipeline: str
    nothing_to_do: bool
    frontier: Frontier | None = None
    outputs: dict[str, int] = field(default_factory=dict)  # output trace -> rows written
    inputs: dict[str, int] = field(default_factory=dict)  # input trace -> layers consumed
    rows_in: int = 0  # new input updates the run read
    steps: list[dict] = field(default_factory=list)  # timed work: Spark start, loop rounds, writes, operators
    spark_jobs: int = 0  # Spark jobs the run started
    rebuilt: dict | None = None  # a partial rebuild: what it recomputed, whose state it kept


@dataclass
class InputView:
    """One input trace as this run sees it: what is old, what is new."""

    trace: Trace
    old: list[Layer]
    new: list[Layer]
    seq: int  # the trace's next sequence number: everything below it is consumed now


def input_views(store: Store, state: State, p: Pipeline, *, fresh: bool = False) -> dict[str, InputView]:
    """Each input as this run sees it (``fresh``: everything is new, as for a first run)."""
    views = {}
    for name in p.inputs:
        if name not in state.traces:
            known = ", ".join(sorted(n for n in state.traces if "." not in n)) or "none"
            raise PipelineError(f"input trace {name!r} does not exist in store {store.path} (traces: {known})")
        t = state.traces[name]
        hold = None if fresh else t.holds.get(p.name)
        seq0 = hold.seq if hold else 0
        views[name] = InputView(t, [l for l in t.layers if l.seq_hi <= seq0],
                                [l for l in t.layers if l.seq_lo >= seq0], t.next_seq)
    dims = {v.trace.d for v in views.values()}
    if len(dims) > 1:
        raise PipelineError(f"pipeline {p.name!r}: its inputs have different time dimensions "
                            + ", ".join(f"{n}: d={v.trace.d}" for n, v in views.items()))
    return views


def pipeline_frontier(views: dict[str, InputView]) -> Frontier:
    f = None
    for v in views.values():
        f = v.trace.upper if f is None else f.meet(v.trace.upper)
    return f


def _empty_frame(spark, schema: pa.Schema):
    """An empty frame of ``schema``, one per schema and session (frames do not change, and
    each costs ~25 ms of Py4J calls: a new pipeline's planning makes one per input)."""
    key = (spark, schema.serialize().to_pybytes())
    if key not in _EMPTY:
        if len(_EMPTY) >= _PLANNED_KEEP:
            _EMPTY.clear()
        _EMPTY[key] = spark.createDataFrame([], spark_schema(schema))
    return _EMPTY[key]


_EMPTY: dict[tuple, object] = {}


def spark_schema(schema: pa.Schema):
    """``schema`` as Spark's (built in Python: no frame, no call into the JVM)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(schema)


def node_dim(d: int, node: Node) -> int:
    """Time coordinates of a node's updates: the pipeline's, plus one per enclosing loop."""
    return d + (node.scope.depth if node.scope is not None else 0)


def _record_floor(d: int, hi: int | None, frontier: Frontier) -> int | None:
    """How far a batch's processed loop state may be advanced in its first time coordinate:
    later batches of the run read it at ``hi`` or later, later runs at the run's frontier or
    later (which the state's layers are compacted to anyway); one-dimensional times only."""
    if d != 1 or len(frontier.elements) != 1:
        return None
    p = frontier.elements[0][0]
    return p if hi is None else min(hi, p)


# the planning dry run's results in this process, by what decides them: the nodes' ids and
# fingerprints (operators, arguments, expressions, user functions' code), the files of the
# user's modules (a function may call into one the fingerprint knows by name only), the
# inputs' schemas and the session. A warm engine runs the same pipeline again and again,
# and the dry run costs some 0.3 s of Py4J calls a time.
_PLANNED: dict[tuple, dict[int, pa.Schema]] = {}
_PLANNED_KEEP = 64


def check_pipeline(spark, p: Pipeline, views: dict[str, InputView], d: int,
                   fps: dict[int, str] | None = None) -> dict[int, pa.Schema]:
    """Validate the whole graph on empty frames (no Spark job); the data schema of each node.
    With the nodes' fingerprints ``fps``, a graph this process validated already is not
    validated again."""
    key = None if fps is None else (
        spark.sparkContext.applicationId, d, tuple(sorted(fps.items())), user_code_status(),
        tuple(sorted((n, v.trace.schema.serialize().to_pybytes()) for n, v in views.items())))
    if key in _PLANNED:
        return dict(_PLANNED[key])
    schemas = _plan_schemas(spark, p, views, d)
    if key is not None:
        if len(_PLANNED) >= _PLANNED_KEEP:
            _PLANNED.clear()
        _PLANNED[key] = dict(schemas)
    return schemas


def _plan_schemas(spark, p: Pipeline, views: dict[str, InputView], d: int) -> dict[int, pa.Schema]:
    from ops.spark.arrow_types import arrow_schema, one_zone, zones_of

    ctx = EvalContext(spark, d)
    sources = {n: _empty_frame(spark, update_schema(v.trace.schema, d)) for n, v in views.items()}
    runtime = Runtime(p, lambda node: None, planning=True)
    evaluate(p, ctx, sources, runtime)
    traces = {n: v.trace.schema for n, v in views.items()}
    zone = one_zone(list(traces.values()))
    schemas = {}
    nodes = {n.id: n for n in p.nodes}  # declared after their inputs (a loop's variable may not be)
    for node_id, df in sorted(runtime.planned.items(), key=lambda item: item[0]):
        node = nodes.get(node_id)
        if df is None:
            continue
        s = arrow_schema(df.schema)
        skip = {"diff"} | {c for c in df.columns if c == "time" or c.startswith("time_")}
        s = pa.schema([s.field(c) for c in df.columns if c not in skip])
        if node is None:
            ins = []
        elif node.op == "input":
            ins = [traces[node.args["trace"]]] if node.args.get("trace") in traces else []
        else:
            ins = [schemas[i.id] for i in node.inputs if i.id in schemas]
        schemas[node_id] = zones_of(s, ins, zone)
    return schemas


BATCH_TIMES = 50_000  # pipelines with loops: distinct times per batch (see above)


def time_batches(store: Store, files: dict[str, list[str]], d: int,
                 batch_times: int) -> list[tuple[int | None, int | None, set[str]]]:
    """``[lo, hi)`` ranges of the first time coordinate, each holding at most
    ``batch_times`` distinct values of the run's new updates (``files``: each source's
    layer files), and the sources with updates in each (read with DuckDB). One batch,
    unbounded, when that is all it takes."""
    import numpy as np

    from storage.blobs.resolve import duckdb_connect

    col = time_columns(d)[0]
    firsts: dict[str, np.ndarray] = {}
    con = duckdb_connect([store.path + "/"])
    try:
        for n, paths in files.items():
            if paths:
                t = con.sql(f"SELECT DISTINCT {quote(col)} AS t FROM read_parquet({file_list(paths)}) ORDER BY t"
                            ).to_arrow_table()
                firsts[n] = np.asarray(t.column("t").to_numpy(), dtype=np.int64)
    finally:
        con.close()
    values = np.unique(np.concatenate(list(firsts.values()))) if firsts else np.zeros(0, np.int64)
    if len(values) <= batch_times:
        return [(None, None, set(firsts))]
    los = [int(x) for x in values[::batch_times]]

    def has_times(ts: np.ndarray, lo: int, hi: int | None) -> bool:  # ts sorted
        i = np.searchsorted(ts, lo)
        return i < len(ts) and (hi is None or ts[i] < hi)

    return [(lo, hi, {n for n, ts in firsts.items() if has_times(ts, lo, hi)})
            for lo, hi in zip(los, los[1:] + [None])]


def _between(df, col: str, lo: int | None, hi: int | None):
    if lo is not None:
        df = df.filter(df[col] >= lo)
    if hi is not None:
        df = df.filter(df[col] < hi)
    return df


@dataclass
class RunPlan:
    """What one run will do, decided from the store's state before Spark starts."""

    p: Pipeline
    path: str
    state: State
    views: dict[str, InputView]
    d: int
    record: dict | None  # the pipeline's record as its last run left it
    ident: Identity  # its fingerprints, changes and state traces (ops/run/rebuild.py)
    rebuild: bool  # its state and outputs (all, or the backfill's) are replaced
    frontier: Frontier  # the pipeline's frontier after this run
    old_frontier: Frontier  # and before it
    nothing_to_do: bool
    backfill: Backfill | None = None  # a partial rebuild, up to the frontier the pipeline had


def plan_run(store: Store, path: str, *, name: str | None = None, rebuild: bool = False,
             rebuild_all: bool = False) -> RunPlan:
    """Load the pipeline and decide what its run reads, writes and may refuse: its inputs'
    old and new layers, its frontiers before and after, the clashes and edits that stop it.
    ``rebuild``: recompute what changed (ops/run/rebuild.py); ``rebuild_all``: everything."""
    state = store.state(to_write=True)
    p = load_pipeline(path, name, trace_schemas(state.traces))
    for note in p.notes:
        store.warn(note)
    record = state.pipelines.get(p.name)
    ident = identify(p, path, record, state)
    if ident.changes.changed and not (rebuild or rebuild_all):
        raise PipelineError(_edited(p, record, ident))
    views = input_views(store, state, p)
    d = next(iter(views.values())).trace.d
    full = bool(record) and (rebuild_all or (rebuild and ident.changes.changed and (
        not ident.changes.known or any(p.name not in v.trace.holds for v in views.values()))))
    backfill = None
    if rebuild and ident.changes.changed and not full:
        backfill = plan_backfill(p, ident, state, state_reusable(record, d))
    if full:
        views = input_views(store, state, p, fresh=True)
    if full or backfill:
        _check_rebuild(state, p, list(p.outputs) if full else backfill.outputs)
    for out in p.outputs:
        t = state.traces.get(out)
        if t is None:
            check_new_name(out, state.traces)
        if t is not None and t.owner != p.name:
            who = f"pipeline {t.owner!r}" if t.owner else "ingest"
            raise PipelineError(f"output {out!r} of pipeline {p.name!r} clashes with trace {out!r} written by {who}")
    if backfill is not None:  # up to the frontier it had, from the history it consumed
        consumed = Frontier.from_json(record["frontier"], d)
        views = {n: InputView(v.trace, [], v.old if n in backfill.inputs else [], v.trace.holds[p.name].seq)
                 for n, v in views.items()}
        return RunPlan(p, path, state, views, d, record, ident, True, consumed, Frontier.minimum(d), False, backfill)
    new_frontier = pipeline_frontier(views)
    old_frontier = Frontier.from_json(record["frontier"], d) if record and not full else Frontier.minimum(d)
    has_new = any(v.new for v in views.values())
    idle = not has_new and bool(record) and new_frontier == old_frontier and not full
    return RunPlan(p, path, state, views, d, record, ident, full, new_frontier, old_frontier, idle)


def _edited(p: Pipeline, record: dict, ident: Identity) -> str:
    """The refusal of an edited pipeline: which operators changed, and what to do."""
    if not ident.changes.known:
        return (f"pipeline {p.name!r} was run from another version of its file ({record.get('file')}, "
                f"hash {record.get('fingerprint')}); run it with --rebuild to recompute its outputs "
                f"from its inputs' since, or under a new --name (and `ddcli drop {p.name}` to release "
                f"the old one)")
    return (f"pipeline {p.name!r} changed since its last run: {ident.changes.summary()}; run it with --rebuild "
            f"to recompute the changed operators and what depends on them (the others keep their state), "
            f"or under a new --name (and `ddcli drop {p.name}` to release the old one)")


def run_pipeline(store: Store, path: str, *, name: str | None = None, master: str | None = None,
                 progress: Callable[[str], None] | RunProgress | None = None, batch_times: int | None = None,
                 loop_stats: list | None = None, rebuild: bool = False, rebuild_all: bool = False,
                 planned: Callable[[RunPlan], None] | None = None) -> RunResult:
    """One run (see the module's docstring): plan, evaluate, write and commit.
    ``loop_stats`` (a list) receives each loop's rounds and updates. ``rebuild`` (after
    editing the pipeline's file): first recompute the operators that changed and what
    depends on them, up to the frontier the pipeline had, reusing the stored state of the
    others, in a commit of its own (ops/run/rebuild.py); then run over new input as usual.
    ``rebuild_all``: recompute everything from the inputs' since, in the run's one commit.
    The old outputs stay readable until the commit that replaces them. ``planned`` is told
    the plan once it is made (lineage events)."""
    started = time.monotonic()
    history_limit()  # a bad DDCLI_RUN_HISTORY is one line before any work
    plan = plan_run(store, path, name=name, rebuild=rebuild, rebuild_all=rebuild_all)
    if planned is not None:
        planned(plan)
    progress = progress if isinstance(progress, RunProgress) else RunProgress(progress)
    if plan.backfill is None:
        return _execute(store, plan, master, progress, batch_times, loop_stats, started)
    progress(f"rebuilding {plan.p.name!r}: {plan.ident.changes.summary()}")
    first = _execute(store, plan, master, progress, batch_times, loop_stats, started)
    first.rebuilt = plan.backfill.describe(plan.p)
    first.rows_in, first.inputs = 0, dict.fromkeys(plan.views, 0)  # it read history, no new input
    then = plan_run(store, path, name=name)  # the new input, as any run
    if then.nothing_to_do:
        return first
    res = _execute(store, then, master, progress, batch_times, loop_stats, time.monotonic())
    res.rebuilt, res.spark_jobs = first.rebuilt, res.spark_jobs + first.spark_jobs
    res.outputs = {o: n + first.outputs.get(o, 0) for o, n in res.outputs.items()}
    return res


def _execute(store: Store, plan: RunPlan, master: str | None, progress: RunProgress, batch_times: int | None,
             loop_stats: list | None, started: float) -> RunResult:
    """Evaluate, write and commit what ``plan`` decided (a backfill with nothing to
    recompute commits the new record alone, without Spark)."""
    if plan.nothing_to_do:
        return RunResult(plan.p.name, True, plan.frontier)
    precheck(plan.p, {n: v.trace.schema for n, v in plan.views.items()})  # column mistakes, before the JVM
    if plan.backfill is not None and not plan.backfill.needed:  # nothing to recompute: a new record only
        empty = RunWrites()
        store.write_and_commit("run", lambda registry: empty,
                               lambda s, w: _run_change(store, plan, {}, w, _figures(plan, started, progress, 0, w))(s),
                               guard=_committing)
        return RunResult(plan.p.name, False, plan.frontier)
    try:
        with durability.together():  # the files the driver writes, synced at once before the commit
            ev = evaluate_batches(store, plan, master=master, progress=progress, batch_times=batch_times,
                                  loop_stats=loop_stats)
            targets = run_targets(plan, ev.runtime)
            rows_in = 0 if plan.backfill is not None else ev.delta_rows  # a rebuild reads history, not new input
            written = store.write_and_commit(
                "run", lambda registry: write_targets(store, plan, ev, targets, registry, progress),
                lambda s, w: _run_change(store, plan, targets, w, _figures(plan, started, progress, rows_in, w))(s),
                merge=list(targets), patient=True, guard=_committing)
        save_plan(store, ev.plan_to_keep, ev.schemas)  # (a run that failed leaves the store as it was)
    except Exception as e:
        refused = failed_on_data(e, plan.p.nodes)
        if refused is None:
            raise
        raise refused from None
    outputs = [o for o in plan.p.outputs if o in targets]
    return RunResult(plan.p.name, False, plan.frontier,
                     {o: (written.sealed[o].rows if written.sealed[o] else 0) for o in outputs},
                     {n: len(v.new) for n, v in plan.views.items()}, rows_in=ev.delta_rows, steps=progress.steps,
                     spark_jobs=progress.jobs_so_far())


def _figures(plan: RunPlan, started: float, progress: RunProgress, rows_in: int, w: RunWrites) -> dict:
    """A run's figures for the pipeline's history, committed with the run."""
    return run_entry(when=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     seconds=time.monotonic() - started, rows_in=rows_in,
                     outputs={o: (l.rows if l else 0) for o, l in w.sealed.items() if o in plan.p.outputs},
                     inputs={n: len(v.new) for n, v in plan.views.items()}, spark_jobs=progress.jobs_so_far(),
                     frontier=format_frontier(plan.frontier), steps=progress.steps, rebuild=plan.rebuild)


@dataclass
class Evaluation:
    """A run's changes, evaluated: every batch's output frames and the operators' state."""

    spark: object
    runtime: Runtime
    schemas: dict[int, pa.Schema]  # node id -> data schema
    batch_frames: list[dict]  # per batch: output node id -> its changes
    delta_rows: int  # new input updates the run reads
    in_driver: bool = False  # evaluated and written by the driver (ops/run/in_driver.py): no frames
    plan_to_keep: str | None = None  # the key the planned schemas are kept under once the run commits


def evaluate_batches(store: Store, plan: RunPlan, *, master: str | None, progress: RunProgress,
                     batch_times: int | None, loop_stats: list | None) -> Evaluation:
    """Evaluate the pipeline on its inputs' new updates: a small run in the driver, without
    Spark when its planned schemas are kept (ops/run/in_driver.py, ops/run/plan_cache.py);
    otherwise on Spark, in batches of times when it has loops (see the module's docstring)."""
    p, views, d = plan.p, plan.views, plan.d
    backfill = plan.backfill
    boundaries = backfill.boundaries if backfill is not None else {}
    delta_rows = sum(l.rows for v in views.values() for l in v.new) + sum(t.rows() for t in boundaries.values())
    loops = any(n.op == "loop" and (backfill is None or n.id in backfill.needed) for n in p.nodes)
    key = plan_key(d, plan.ident.fps, {n: v.trace.schema for n, v in views.items()})
    kept = load_plan(store, key) if backfill is None and not plan.rebuild and not loops else None
    if kept is not None:  # planned before: a small run needs no Spark
        progress(_reading(p, views, boundaries, delta_rows))
        runtime = Runtime(p, _stored_arrangements(store, plan, kept), progress=progress, loop_stats=loop_stats,
                          schemas=kept)
        if _in_driver(store, plan, runtime, kept, delta_rows, progress):
            return Evaluation(None, runtime, kept, [dict.fromkeys(node.id for node in p.outputs.values())],
                              delta_rows, in_driver=True)
    progress("starting Spark")
    with progress.step("spark_start") as started:
        spark = get_spark(master)
    progress(f"Spark ready in {started['seconds']:.1f} s" if started["seconds"] >= 0.05 else "Spark already running")
    progress.attach(spark)
    if kept is None:
        progress(_reading(p, views, boundaries, delta_rows))
    size_partitions(spark, delta_rows, single_ok=not loops)
    schemas = check_pipeline(spark, p, views, d, plan.ident.fps)
    keep = key if kept is None else None
    runtime = Runtime(p, _stored_arrangements(store, plan, schemas), progress=progress, loop_stats=loop_stats,
                      schemas=schemas)
    runtime.exchange_root = store.exchange_folder()
    ctx = EvalContext(spark, d, delta_rows=delta_rows)
    sources = {}
    for n, v in views.items():
        if v.new:  # built when first used: a loop's or a join's task may read the files itself
            sources[n] = DeferredFrame(partial(read_layers, spark, store.read_paths(v.trace, v.new),
                                               spark_schema(update_schema(v.trace.schema, d))))
    for t in boundaries.values():  # a partial rebuild reads unchanged operators' state whole
        sources[t.name] = read_layers(spark, store.read_paths(t),
                                      spark_schema(update_schema(t.schema, t.d)))
    # batches only for one-dimensional times: with more, compacting to a batch's first time
    # could merge times the stored state must keep apart (the frontier need not be beyond it);
    # and only past a batch's number of times in updates (fewer updates hold fewer times)
    if d == 1 and loops and delta_rows > (batch_times or BATCH_TIMES):
        files = {n: store.layer_paths(v.trace, v.new) for n, v in views.items()}
        files.update({t.name: store.layer_paths(t, t.layers) for t in boundaries.values()})
        batches = time_batches(store, files, d, batch_times or BATCH_TIMES)
    else:
        batches = [(None, None, set(sources))]
    if len(batches) == 1 and backfill is None:
        if kept is None and not plan.rebuild and _in_driver(store, plan, runtime, schemas, delta_rows, progress):
            return Evaluation(spark, runtime, schemas, [dict.fromkeys(node.id for node in p.outputs.values())],
                              delta_rows, in_driver=True, plan_to_keep=keep)
        runtime.task_writes = task_writes(store, plan, runtime, schemas)
        runtime.source_files = {n: store.read_paths(v.trace, v.new) for n, v in views.items() if v.new}
    first = time_columns(d)[0]
    batch_frames: list[dict] = []
    for i, (lo, hi, inside) in enumerate(batches):
        if len(batches) > 1:
            progress(f"batch {i + 1} of {len(batches)}: times from {lo}" + (f" below {hi}" if hi is not None else ""))
            if i:  # the state of earlier batches, advanced to this batch's first time
                runtime.compact_to(lo)
        batch_sources = {n: _between(df, first, lo, hi) for n, df in sources.items() if n in inside}
        runtime.record_floor = _record_floor(d, hi, plan.frontier)
        preset = None if backfill is None else (  # boundaries read from state; what is not recomputed, nothing
            {nid: batch_sources.get(t.name) for nid, t in boundaries.items()} | dict.fromkeys(backfill.skipped))
        runtime.origin = minimum(d) if i == 0 and (plan.record is None or plan.rebuild) else None
        with progress.step("batch", batch=i + 1):
            frames = evaluate(p, ctx, batch_sources, runtime, preset)
            outs = {node.id: frames.get(node.id) for node in p.outputs.values()}
            if i < len(batches) - 1:  # materialised now, so the batch's round frames can be released
                outs = {k: (f.localCheckpoint(eager=True) if f is not None else None) for k, f in outs.items()}
        batch_frames.append(outs)
        del frames
    return Evaluation(spark, runtime, schemas, batch_frames, delta_rows, plan_to_keep=keep)


def _reading(p: Pipeline, views: dict[str, InputView], boundaries: dict, delta_rows: int) -> str:
    return f"pipeline {p.name}: reading {updates(delta_rows)} from " + ", ".join(
        [f"{len(v.new)} layer{'s' if len(v.new) != 1 else ''} of {n}" for n, v in views.items() if v.new]
        + [f"the stored state {t.name}" for t in boundaries.values()])


def _stored_arrangements(store: Store, plan: RunPlan, schemas: dict[int, pa.Schema]):
    """``stored(node)``: the arrangement earlier runs left for a node (an input's old layers,
    or the node's state trace)."""
    d, state = plan.d, plan.state

    def stored(node: Node) -> Arrangement | None:
        if node.op == "input":
            v = plan.views[node.args["trace"]]
            return Arrangement(store.read_paths(v.trace, v.old), update_schema(v.trace.schema, d),
                               sum(l.rows for l in v.old))
        st = None if plan.rebuild else state.traces.get(plan.ident.state_names[node.id])
        files = store.read_paths(st) if st else []
        return Arrangement(files, update_schema(schemas[node.id], node_dim(d, node)), st.rows() if st else 0)

    return stored


def run_targets(plan: RunPlan, runtime: Runtime) -> dict[str, tuple[Node, bool]]:
    """What a run writes: every output, and the arrangement of every derived collection
    (trace name -> (node, is it operator state)); a partial rebuild only what it recomputes."""
    backfill = plan.backfill
    targets: dict[str, tuple[Node, bool]] = {out: (node, False) for out, node in plan.p.outputs.items()
                                             if backfill is None or out in backfill.outputs}
    for node in runtime.arranged.values():
        if node.op not in ("input", "enter") and (backfill is None or node.id in backfill.needed):
            targets[plan.ident.state_names[node.id]] = (node, True)
    return targets


@dataclass
class RunWrites:
    """The layers a run wrote, by trace, and the traces as the run found (or created) them."""

    sealed: dict[str, Layer | None] = field(default_factory=dict)
    held: dict[str, Layer | None] = field(default_factory=dict)  # output -> its changes beyond the frontier
    protos: dict[str, Trace] = field(default_factory=dict)


def write_targets(store: Store, plan: RunPlan, ev: Evaluation, targets: dict[str, tuple[Node, bool]],
                  registry, progress: RunProgress) -> RunWrites:
    """Write one layer to every target (outputs also their pending changes beyond the
    frontier), each registered with the store's ``registry`` of written files. Traces
    whose frames are already partitioned by their key are written by a job of their own
    (or of the shuffle their reduces share); those tasks wrote already (a loop's one task, a
    join's of the run's inputs: ``task_writes``) by none; the rest together, in one job."""
    out = RunWrites()
    writes: dict[str, dict] = {}  # trace -> its write step
    grouped: dict[str, LayerWrite] = {}  # trace -> its share of the one job writing the rest
    shared: dict[object, dict[str, LayerWrite]] = {}  # reduces' outputs by the shuffle they share
    ran = {n.id for n in ev.runtime.ran}
    for tname, (node, is_state) in targets.items():
        job = _target_write(store, plan, ev, tname, node, is_state, out)
        if job is None:
            continue
        kind, write = job
        if kind == "grouped":
            grouped[tname] = write
        elif kind == "shared":
            shared.setdefault(shared_token(write.df), {})[tname] = write
        else:
            in_task = kind == "task"  # tasks (a loop's, a join's) or the driver wrote its files: their layers only
            where = {"in_driver" if ev.in_driver else "in_task": True} if in_task else {}
            with progress.step("write", spark=not in_task, trace=tname, state=is_state, **where) as w:
                sealed, held = (_written_in_task(*write, out.protos[tname], plan, node, is_state) if in_task
                                else write())
                out.sealed[tname] = registry.add(tname, sealed)
                if not is_state:
                    out.held[tname] = registry.add(tname, held)
                _describe_write(w, tname, targets, out.sealed, out.held, out.protos, ran)
            writes[tname] = w
            _report_write(progress, w)
    together = [(shared_writes, write_shared) for shared_writes in shared.values()]  # one job per shuffle
    if grouped:
        together.append((grouped, lambda ws: write_layers(ws, partitions=partitions(ev.spark))))
    for group, write_all in together:
        _write_together(group, write_all, targets, out, registry, writes, ran, progress)
    progress.operators(list({n.id: n for n in ev.runtime.ran}.values()), writes,
                       lambda t: cone_of(targets[t][0], ran), _counted(plan, ev.runtime, writes))
    return out


def _layout(store: Store, plan: RunPlan, schemas: dict[int, pa.Schema], tname: str, node: Node,
            is_state: bool) -> tuple[Trace, Frontier, dict]:
    """Where and how a target's layer goes: the trace as the run found (or creates) it, the
    since a state layer is compacted to, and the layer's layout (``write_layer``'s arguments)."""
    d, schema = plan.d, schemas[node.id]
    nd = node_dim(d, node)
    depth = nd - d
    existing = None if plan.rebuild else plan.state.traces.get(tname)
    key = existing.key if existing else node_key(node, schema.names)
    floor = plan.backfill.floors.get(tname) if plan.backfill is not None else None
    since = (loop_frontier(plan.frontier, depth) if is_state
             else (existing.since if existing else floor or Frontier.minimum(d)))
    proto = existing or Trace(tname, schema, key, nd, since, loop_frontier(plan.old_frontier, depth),
                              owner=plan.p.name)
    layout = dict(directory=store.trace_dir(tname), schema=update_schema(schema, nd), key=key, d=nd,
                  lower=loop_frontier(plan.old_frontier, depth), upper=loop_frontier(plan.frontier, depth),
                  seq=proto.next_seq)
    return proto, since, layout


def task_writes(store: Store, plan: RunPlan, runtime: Runtime, schemas: dict[int, pa.Schema]) -> dict:
    """The targets a loop's one task may write itself, once its fixed point is found, so that
    a small run needs no job to write them (ops/loops/local.py): an output declared on a
    loop's result with nothing pending, and the state of every arranged node; and so may the
    tasks of a join of the run's inputs (ops/operators/join_direct.py), an output declared
    on it. Keyed by
    (``output`` or ``state``, node id), each a list of ``write_table_files`` arguments with
    the trace's name; for one batch only (later batches add to what earlier ones recorded)."""
    specs: dict[tuple[str, int], list[dict]] = {}
    for tname, (node, is_state) in run_targets(plan, runtime).items():
        proto, spec = _file_spec(store, plan, schemas, tname, node, is_state)
        source = node.inputs[0] if node.op == "output" else node  # an output passes its input on
        if not is_state and (not (source.op == "leave" or OPERATORS[source.op].family == JOIN) or proto.pending):
            continue
        specs.setdefault(("state" if is_state else "output", source.id), []).append(dict(trace=tname, **spec))
    return specs


def _file_spec(store: Store, plan: RunPlan, schemas: dict[int, pa.Schema], tname: str, node: Node,
               is_state: bool) -> tuple[Trace, dict]:
    """The trace as the run found (or creates) it, and the ``write_table_files`` arguments
    of a file of its layer written by a task (or the driver)."""
    proto, since, lay = _layout(store, plan, schemas, tname, node, is_state)
    return proto, dict(directory=lay["directory"], schema=lay["schema"], key=lay["key"], d=lay["d"],
                       lower=lay["lower"], upper=lay["upper"], since=since if is_state else proto.effective_since(),
                       split=not is_state)


def _in_driver(store: Store, plan: RunPlan, runtime: Runtime, schemas: dict[int, pa.Schema], delta_rows: int,
               progress: RunProgress) -> bool:
    """Evaluate a small run in this process and write its targets' files (ops/run/in_driver.py);
    False, with nothing written, when the run takes Spark."""
    driver = plan_in_driver(plan.p, schemas, runtime.arranged, delta_rows)
    if driver is None:
        return False
    specs = {}
    for tname, (node, is_state) in run_targets(plan, runtime).items():
        proto, spec = _file_spec(store, plan, schemas, tname, node, is_state)
        if proto.pending and not is_state:  # earlier changes wait beyond the frontier: Spark merges them
            return False
        specs[tname] = (node, spec)
    d = plan.d
    run = DriverRun(schemas, d, {n: (store.read_paths(v.trace, v.new), update_schema(v.trace.schema, d))
                                 for n, v in plan.views.items() if v.new},
                    lambda node: runtime.stored(node).files, minimum(d) if plan.record is None else None)
    with progress.step("batch", spark=False, batch=1) as step:
        try:
            frames = evaluate_in_driver(driver, run)
        except Unfit as e:
            step["left_to_spark"] = str(e)
            return False
        runtime.written_in_tasks.update(write_in_driver(frames, specs))
        step["in_driver"] = True
    runtime.ran.extend(n for n in driver.nodes if OPERATORS[n.op].stateful and frames.get(n.id) is not None)
    progress("evaluated in the driver: no Spark job")
    return True


def _target_write(store: Store, plan: RunPlan, ev: Evaluation, tname: str, node: Node, is_state: bool,
                  out: RunWrites):
    """How one target is written: ``("grouped" | "shared", LayerWrite)`` to write with others,
    ``("own", write)`` for a job of its own, ``("task", files)`` when a task wrote its
    files already, None when it has no changes."""
    proto, since, layout = _layout(store, plan, ev.schemas, tname, node, is_state)
    out.protos[tname] = proto
    nd, key = layout["d"], layout["key"]
    if tname in ev.runtime.written_in_tasks:
        return "task", (ev.runtime.written_in_tasks[tname], since)
    if is_state:
        live = ev.runtime.live.get(node.id)
        df = live.processed_union() if live is not None else None
        one_frame = live is not None and len(live.processed) == 1
    else:
        present = [f[node.id] for f in ev.batch_frames if f.get(node.id) is not None]
        if proto.pending:  # what waited beyond the old frontier: sealed now, or waits on
            present.append(read_layers(ev.spark, store.layer_paths(proto, proto.pending),
                                       spark_schema(layout["schema"])))
        df = union_coalesced(present) if present else None
        one_frame = len(present) == 1
        if df is not None and plan.backfill is not None and tname in plan.backfill.from_state:
            from pyspark.sql import functions as F  # the state stands for P - 1 (ops/run/rebuild.py)
            df = df.withColumn(time_columns(nd)[0], F.lit(plan.backfill.latest).cast("long"))
    if df is None:
        out.sealed[tname] = None
        return None
    layout.update(partitions=partitions(ev.spark),
                  partitioned=one_frame and ev.runtime.key_partitioned.get(node.id) == key)
    if not layout["partitioned"]:  # written together, in one job
        return "grouped", LayerWrite(df, layout["directory"], layout["schema"], key, nd, layout["lower"],
                                     layout["upper"], since if is_state else proto.effective_since(),
                                     layout["seq"], split=not is_state, precombine=is_state and not one_frame)
    if not is_state and shared_token(df) is not None:  # a reduce's output: others may share its shuffle
        return "shared", LayerWrite(df, layout["directory"], layout["schema"], key, nd, layout["lower"],
                                    layout["upper"], proto.effective_since(), layout["seq"], split=True)
    if is_state:
        return "own", lambda: (write_layer(df, since=since, precombine=not one_frame, **layout), None)
    return "own", lambda: write_sealed_and_pending(df, since=proto.effective_since(), **layout)


def _written_in_task(files: list[dict], since: Frontier, proto: Trace, plan: RunPlan, node: Node,
                     is_state: bool) -> tuple[Layer | None, Layer | None]:
    """The (sealed, pending) layers of the files a task wrote (``META_SCHEMA`` rows)."""
    depth = node_dim(plan.d, node) - plan.d
    lower, upper = loop_frontier(plan.old_frontier, depth), loop_frontier(plan.frontier, depth)
    since = since if is_state else proto.effective_since()
    sealed = layer_of([r for r in files if not r["pending"]], lower, upper, since, proto.next_seq, proto.next_seq + 1)
    pending = layer_of([r for r in files if r["pending"]], upper, upper, since, -1, -1)
    return sealed, (None if is_state else pending)


def _write_together(group: dict[str, LayerWrite], write_all, targets: dict, out: RunWrites, registry,
                    writes: dict, ran: set, progress: RunProgress) -> None:
    """One job writing the layers of several traces; a progress step for each trace."""
    names = list(group)
    with progress.step("write", trace=names[0], state=targets[names[0]][1], together=names) as w:
        layers = write_all(list(group.values()))
        for tname, (sealed, pending) in zip(names, layers):
            out.sealed[tname] = registry.add(tname, sealed)
            if group[tname].split:
                out.held[tname] = registry.add(tname, pending)
    for i, tname in enumerate(names):  # one step per trace, the job and seconds on the first
        rec = w if i == 0 else {"step": "write", "trace": tname, "state": targets[tname][1],
                                "seconds": w["seconds"], "jobs": 0, "together": names}
        _describe_write(rec, tname, targets, out.sealed, out.held, out.protos, ran)
        if i > 0:
            progress.steps.append(rec)
        writes[tname] = rec
        _report_write(progress, rec)


def _run_change(store: Store, plan: RunPlan, targets: dict[str, tuple[Node, bool]], w: RunWrites, figures: dict):
    """The run's change of the store's metadata (:func:`storage.state.transitions.append_run`),
    after checking that the input layers it read are still there."""
    p, views, backfill = plan.p, plan.views, plan.backfill
    # inputs this pipeline held before the run: their history stayed exact for it; the
    # others (a first run) may have been compacted up to their effective since (the
    # since met with other readers' holds), and the outputs cannot know more
    unheld = [n for n, v in views.items() if plan.rebuild or p.name not in v.trace.holds]
    runs = plan.record["runs"] if plan.record else 0
    commit = RunCommit(
        pipeline=p.name, runs=runs, frontier=plan.frontier, d=plan.d,
        record={"file": os.path.abspath(plan.path), "fingerprint": plan.ident.file_hash,
                "dataflow": plan.ident.dataflow, "runs": runs + 1, "frontier": plan.frontier.to_json(), "d": plan.d,
                "inputs": plan.record["inputs"] if backfill is not None else
                {n: {"seq": v.seq, "upper": v.trace.upper.to_json()} for n, v in views.items()},
                "outputs": sorted(p.outputs), "state": sorted(plan.ident.state_names.values()),
                "operators": plan.ident.operators(p)},
        inputs={n: v.seq for n, v in views.items()}, targets={t: st for t, (_, st) in targets.items()},
        protos=w.protos, written=w.sealed, held=w.held, unheld=unheld, rebuild=plan.rebuild,
        reads=backfill.reads if backfill is not None else None, figures=figures, history_runs=history_limit(),
        released=[o for o in (plan.record or {}).get("outputs", []) if plan.rebuild and o not in p.outputs])
    boundaries = list(backfill.boundaries.values()) if backfill is not None else []

    def change(s: State) -> State:
        _check_inputs_exist(store, views, boundaries)
        return append_run(s, commit)

    return change


@contextlib.contextmanager
def _committing():
    """From the commit on, Ctrl-C waits: cut short, the user could not tell whether the run
    committed; pressed before, nothing of the run stays."""
    with no_interrupts():
        check_interrupt()
        yield


def _describe_write(w: dict, tname: str, targets: dict, written: dict, held: dict, protos: dict, ran: set) -> None:
    """A write step's figures: rows written (and pending), and the operators it computed."""
    node, is_state = targets[tname]
    w["rows"] = written[tname].rows if written[tname] else 0
    if held.get(tname):  # changes beyond the frontier, written to wait until it passes them
        w["pending_rows"] = held[tname].rows
    if not is_state and protos[tname].pending:
        w["with_earlier_pending"] = True  # not only this run's changes
    w["operators"] = [n.describe() for n in cone_of(node, ran)]


def _report_write(progress: RunProgress, w: dict) -> None:
    what = " (state)" if w["state"] else ""
    ops = f"; computed {', '.join(w['operators'])}" if w["operators"] else ""
    jobs = ("by the task that computed it" if w.get("in_task") else "by the driver" if w.get("in_driver")
            else f"{w['jobs']} Spark job{'s' if w['jobs'] != 1 else ''}")
    together = w.get("together") or []
    if len(together) > 1:  # one job wrote several traces
        jobs = f"{jobs} for {len(together)} traces" if w["jobs"] else f"in the job of {together[0]}"
    pending = f" (+{w['pending_rows']:,} pending beyond the frontier)" if w.get("pending_rows") else ""
    progress(f"wrote {w['trace']}{what}: {updates(w['rows'])}{pending} in {w['seconds']:.2f} s ({jobs}){ops}")


def _counted(plan: RunPlan, runtime, writes: dict[str, dict]):
    """An operator's rows where a written layer holds exactly its changes: its own state
    trace (an arranged result), or an output declared directly on it."""
    def counted(n: Node):
        mine = plan.ident.state_names.get(n.id)
        if n.id in runtime.arranged and mine in writes:
            return mine, writes[mine]["rows"]
        for out, o in plan.p.outputs.items():
            w = writes.get(out)
            if o.inputs[0] is n and w is not None and not w.get("with_earlier_pending"):
                return out, w["rows"] + w.get("pending_rows", 0)
        return None
    return counted


def _check_inputs_exist(store: Store, views: dict[str, InputView], states: list[Trace] = ()) -> None:
    """A commit re-checks the input layers it read (garbage collection with a short grace
    may have taken them), and the layers of the state traces a partial rebuild read."""
    for n, v in views.items():
        for path in store.layer_paths(v.trace, v.old + v.new):
            if not store.blobs.exists(path):
                raise Conflict(f"input trace {n!r}: layer file {path} was removed during the run (garbage "
                               f"collection with a short grace period?); nothing was written, run again")
    for t in states:
        for path in store.layer_paths(t, t.layers):
            if not store.blobs.exists(path):
                raise Conflict(f"state trace {t.name!r}: layer file {path} was removed during the run (a "
                               f"compaction?); nothing was written, run again")


def _check_rebuild(state: State, p: Pipeline, outputs: list[str]) -> None:
    """A rebuild rewrites its outputs' history: refuse while another pipeline reads one of
    them (that pipeline has consumed the old history)."""
    for out in outputs:
        t = state.traces.get(out)
        readers = sorted(h for h in (t.holds if t is not None else {}) if h != p.name)
        if readers:
            who = describe_holder(readers[0])
            raise PipelineError(f"output {out!r} of pipeline {p.name!r} is read by {who}, which has consumed "
                                f"its old history; drop it before rebuilding {p.name!r}, then run it again")
