"""A partition-local fixed point on Spark: one job per batch, every round inside the tasks.

For a loop that ``ops/loops/plan.py`` finds partitionable by columns ``P``, a batch runs as:

1. the broadcast collections (entered collections without ``P``: old and new updates)
   are collected once, refused above :data:`BROADCAST_ROWS` (the loop then runs round
   by round), and shipped to every task as Arrow IPC bytes in a Spark broadcast;
2. the old state of every arrangement in the loop and the batch's updates entering it,
   packed into one frame (``ops/io/wide_frame.py``), are dealt to tasks by ``P``; when a
   single task, or resident tasks (below), take the state, they read its stored layer
   files themselves with pyarrow, and only this run's updates go through Spark;
3. each task runs the rounds to the fixed point (``ops/loops/task.py``) and returns the
   leaves' changes and the arrangements' processed updates, materialised by one local
   checkpoint; its statistics come back in an accumulator, with no job of their own.
4. a loop that runs in one task, in a run of one batch, also writes the run's layers it
   holds every row of (``ops.run.run.task_writes``): each output declared on its result,
   its arrangements' state and that of the collections it enters; only the files' names
   come back, so such a run is one Spark job.

A loop that no columns deal (``P`` empty) is *resident*: its rows are dealt round-robin
to N tasks that run together (a barrier stage, N the session's task slots: on a cluster
the cores of its executors, ``ops.spark.session.slots``), each task owns the rows of every
arrangement whose read key hashes to it, and the tasks exchange each round's changes
through files (``ops/loops/exchange.py``): the state stays in the tasks across rounds, a
round costs milliseconds beyond its work, and no round is a Spark job.
``DDCLI_LOOP_PATH=resident`` runs every loop the plan allows that way (partitionable ones
too: a test setting). With one slot, on a cluster whose store is not in a folder every
executor sees (the exchange's folder is under the store there), with Spark's dynamic
allocation, or with a body whose arrangements are read by two different keys, the loop
runs in one task instead, and so it does in local mode when its stored state and the run's
new updates are few (``ops.loops.route.FEW_ROWS``). Either way its rows are at most :data:`ONE_TASK_ROWS` a task;
the tasks refuse more (before running a round) and the loop then runs round by round, for
this batch and the rest of the run. A task that fails fails them all, and so does a stage
Spark retries (the exchange's files cannot be trusted then): the batch then runs round by
round. Every task also stops once the rows it holds after a round (state, processed
updates, pending feedback, outputs) are more than :func:`task_rows` (a hot partition
value, or a fixed point that grows), and the loop then runs round by round too, whose
reduce tasks hold their rows under their own budget (``ops/reduce/held_rows.py``): a task's
memory is bounded whatever the skew.

The processed updates are recorded in the runtime's arrangements exactly as the rounds
of ``ops/loops/rounds.py`` record theirs, so the state written, later batches and later runs
(either path) see the same thing.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam
from pyspark.sql.pandas.types import from_arrow_schema

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, node_priority, scope_nodes
from ops.errors import PipelineError
from ops.io.read import layer_table
from ops.io.write import write_table_files
from ops.io.wide_frame import pack_frames, pack_tables, unpack_frame, unpack_table, wide_schema
from ops.loops.direct import SourceRead, entered_layer_table, frames_needed, read_source, source_reads
from ops.loops.exchange import Exchange, ExchangeAborted, Router
from ops.loops.plan import LoopPlan, loop_path
from ops.loops.priority import check_iteration
from ops.loops.route import (BROADCAST_ROWS, FEW_ROWS, ONE_TASK_ROWS, Engine, Resident, build_body,
                             few_rows_decision, resident_decision, stored_refusal, task_rows)
from ops.loops.task import Body, fixed_point
from ops.operators.context import EvalContext
from ops.spark.one_task import WrittenFiles, run_one_task
from ops.spark.session import is_local, partitions
from storage.lattice import time_columns
from storage.layer import update_schema

TOO_BIG = -1  # ``converged`` of a task that refused its rows, or stopped holding too many


class TaskStats(AccumulatorParam):
    """The tasks' statistics, gathered by a Spark accumulator while the loop's job runs
    (a second job reading them back cost 0.5-1 s a batch): ``(rounds, updates, converged,
    held, refused_iteration, refused_node)`` merged as max, sum, min, max, and the least
    refused iteration with its node. ``None``: no task held rows."""

    @staticmethod
    def zero(value):
        return None

    @staticmethod
    def addInPlace(a, b):
        if a is None or b is None:
            return b if a is None else a
        refused = min((x for x in (a[4:], b[4:]) if x[0] is not None), default=(None, None))
        return (max(a[0], b[0]), a[1] + b[1], min(a[2], b[2]), max(a[3], b[3])) + tuple(refused)


def evaluate_local(p: Pipeline, loop_node: Node, plan: LoopPlan, ictx: EvalContext, entered, runtime) -> dict | None:
    """The leaves' frames of one batch of ``loop_node``, computed partition-locally; None
    when the loop must run round by round after all (the reason is reported). ``entered``:
    the batch's updates entering the loop (``ops.loops.rounds.EnteredFrames``)."""
    scope = loop_node.args["scope"]
    schemas, spark = runtime.schemas, ictx.spark
    if runtime.loop_paths.get(plan.loop, {}).get("path") == "round":  # refused earlier in this run
        return None
    body = build_body(p, loop_node, plan, schemas, runtime.arranged, ictx.d)
    if isinstance(body, str):
        report(runtime, plan, body)
        return None
    started = time.monotonic()
    nodes = scope_nodes(p, scope)
    res = resident(plan, body, spark, runtime.exchange_root)
    tasks = res.tasks if isinstance(res, Resident) else 0
    limited = loop_path() == "auto"  # ``local`` and ``resident`` (tests) take the rows whatever their number
    if not plan.by and limited:
        # the stored state alone is more than the tasks may take: say so without a job that
        # ships every row to the tasks only for them to refuse them (every later run would)
        stored = sum(a.stored.rows for n in nodes if n.id in runtime.arranged
                     for a in [runtime.arrangement(n)] if a.stored is not None)
        new = ictx.delta_rows if ictx.delta_rows is not None else FEW_ROWS + 1
        res = few_rows_decision(res, stored + new, is_local(spark.sparkContext.master))
        tasks = res.tasks if isinstance(res, Resident) else 0
        refused = stored_refusal(plan, stored, tasks, ONE_TASK_ROWS)
        if refused:
            report(runtime, plan, refused)
            return None
    one_task = not tasks and not plan.by
    sourced = source_reads(p, [n for n in nodes if n.op == "enter" and entered.present(n.id)],
                           runtime.source_files, schemas, ictx.d) if one_task and runtime.source_files else {}
    ins = _task_inputs(nodes, plan, ictx, entered, runtime, tasks, sourced)
    if not ins.parts and not ins.sourced:  # nothing dealt by P: no variable state and nothing entering it
        return {l: None for l, _ in body.leaves}
    bc, rows = _broadcast(ins, spark) if ins.bparts else (None, 0)
    if isinstance(bc, str):
        report(runtime, plan, bc)
        return None
    v0 = scope.variables[0]
    pfields = [] if tasks else [schemas[v0.id].field(c) for c in plan.by]
    outs = _task_outputs(body, schemas, ictx.d)
    acc = spark.sparkContext.accumulator(None, TaskStats())
    writes = _writes_in_task(p, runtime, body, nodes) if one_task else {}
    files = spark.sparkContext.accumulator([], WrittenFiles()) if writes else None
    folder = os.path.join(res.root, f"ddcli-loop-{os.getpid()}-{time.time_ns()}") if tasks else None
    # every row read from files and every result written by the task: no frame in or out
    direct = one_task and not ins.parts and not ins.bparts and not frames_needed(p, body, writes)
    in_wide = wide_schema({t: ins.schemas[t] for t in ins.parts}, pfields)
    task = _task_function(body, ins, outs, bc, acc, in_wide, tasks=tasks, keys=res.keys if tasks else None,
                          folder=folder, row_limit=ONE_TASK_ROWS if not plan.by and limited else None,
                          floor=runtime.record_floor,  # the processed updates leave the task advanced to it
                          writes=writes, files=files, returns=not direct)
    out = None
    if direct:
        run_one_task(spark, task)
    else:
        packed = pack_frames(ins.parts, {t: ins.schemas[t] for t in ins.parts}, pfields) if ins.parts \
            else spark.createDataFrame([], from_arrow_schema(in_wide))
    if tasks:  # dealt any way: each task routes its rows to their owners first
        out = _resident_job(packed, tasks, task, outs.wide, folder)
        if isinstance(out, str):  # nothing was broadcast: every row was dealt
            report(runtime, plan, out)
            return None
    elif not direct:
        dealt = packed.repartition(partitions(spark), *[f"_p{j}" for j in range(len(pfields))]) if pfields \
            else packed.coalesce(1)
        out = dealt.mapInArrow(task, from_arrow_schema(outs.wide)).localCheckpoint(eager=True)
    if bc is not None:
        bc.unpersist()
    if not _finished(loop_node, plan, body, nodes, acc, tasks, rows, res, started, runtime, direct, len(ins.sourced)):
        return None
    if writes:  # the layer files the task wrote, by trace (none: the trace has no changes)
        written = {spec["trace"]: [] for specs in writes.values() for spec in specs}
        for trace, row in files.value:
            written[trace].append(row)
        runtime.written_in_tasks.update(written)
    by_id = {n.id: n for n in nodes}
    for (kind, nid), tag in outs.tags.items():
        if kind == "rec" and out is not None:  # (direct: the task wrote every one as its node's state)
            runtime.arrangement(by_id[nid]).record(unpack_frame(out, tag, outs.schemas[tag]))
    for n in nodes:
        if n.op == "enter" and runtime.live.get(n.id) is not None:
            runtime.live[n.id].forget_processed()
    # (direct: only outputs the task wrote read the leaves)
    return {nid: None if out is None else unpack_frame(out, tag, outs.schemas[tag])
            for (kind, nid), tag in outs.tags.items() if kind == "leave"}


def _writes_in_task(p: Pipeline, runtime, body: Body, nodes: list[Node]) -> dict[tuple[str, int], list[dict]]:
    """What a loop running in one task writes itself, from the run's targets a task may
    write (``runtime.task_writes``): each ``(kind, node id)`` of the task's tables (``leave``:
    a leave's changes, ``rec``: an arranged node's processed updates, ``enter``: the updates
    entered plainly from a top-level collection that nothing else enters, whose state they are)
    -> the writes of that table."""
    out = {}
    for leave, _ in body.leaves:
        if ("output", leave) in runtime.task_writes:
            out[("leave", leave)] = runtime.task_writes[("output", leave)]
    for t in body.nodes:
        if t.arranged and t.op != "enter" and ("state", t.id) in runtime.task_writes:
            out[("rec", t.id)] = runtime.task_writes[("state", t.id)]
    for n in nodes:
        if n.op != "enter" or node_priority(n) is not None:
            continue
        base = n.inputs[0]
        entries = [e for e in p.nodes if e.op == "enter" and e.inputs[0] is base]
        if base.scope is None and len(entries) == 1 and ("state", base.id) in runtime.task_writes:
            out[("enter", n.id)] = runtime.task_writes[("state", base.id)]
    return out


def _outer_times(t: pa.Table, d: int) -> pa.Table:
    """Updates entered into a loop back in the times of the ``d``-dimensional collection
    they came from (the iteration coordinate, 0 for them all, dropped)."""
    inner, outer = time_columns(d + 1), time_columns(d)
    columns = {c: t.column(c) for c in t.column_names if c not in inner}
    columns.update({o: t.column(i) for i, o in zip(inner, outer)})
    return pa.table(columns)


@dataclass
class TaskInputs:
    """What a loop's tasks receive, each frame under a tag of the wide frame: ``tags``
    (kind, node id) -> tag, kind ``old`` (stored and processed updates) or ``new`` (entered
    this batch); the frames dealt to tasks (``parts``) and broadcast (``bparts``), each
    ``(frame, placement columns)``; the update schema of each tag; and the stored layer
    files the tasks read themselves (an entered collection's: the outer collection's files,
    moved into the loop's times at iteration 0 as they are read)."""

    tags: dict[tuple[str, int], int] = field(default_factory=dict)
    parts: dict[int, tuple] = field(default_factory=dict)
    bparts: dict[int, tuple] = field(default_factory=dict)
    schemas: dict[int, pa.Schema] = field(default_factory=dict)
    layer_files: dict[int, list[str]] = field(default_factory=dict)
    entered_files: set[int] = field(default_factory=set)  # tags whose files hold the outer collection's times
    sourced: dict[int, SourceRead] = field(default_factory=dict)  # new updates the task reads from an input's files


def _task_inputs(nodes: list[Node], plan: LoopPlan, ictx: EvalContext, entered, runtime,
                 tasks: int, sourced: dict[int, SourceRead]) -> TaskInputs:
    """Every arranged node's old updates and every entered node's new ones, tagged; the new
    ones of ``sourced`` (enter node id -> how) read by the task from an input's files."""
    ins = TaskInputs()
    spark = ictx.spark
    for n in nodes:
        frames, files = [], []
        schema = update_schema(runtime.schemas[n.id], ictx.d)
        if n.id in runtime.arranged:
            # stored layer files the tasks read themselves (without a job that ships their
            # rows through Spark, which cost cc's tasks 3.3 s of a 9 s batch for 1.1 M rows):
            # when one task takes every row, or resident tasks each a share (they route rows anyway)
            a = runtime.arrangement(n)
            in_tasks = tasks or not plan.by
            outer = a.outer_files_for_tasks() if in_tasks and n.op == "enter" and node_priority(n) is None else None
            if outer is not None:  # entered at iteration 0, in the tasks
                files, old = outer
                ins.entered_files.add(len(ins.tags) + 1)
            else:
                files, old = a.for_tasks(ictx) if in_tasks else ([], a.whole(ictx))
            frames.append(("old", old))
        if n.op == "enter" and entered.present(n.id):  # (read from files: never built as a frame)
            frames.append(("new", None if n.id in sourced else entered[n.id]))
        for kind, df in frames:
            if df is None and not (kind == "old" and files) and not (kind == "new" and n.id in sourced):
                continue
            tag = ins.tags[(kind, n.id)] = len(ins.tags) + 1
            ins.schemas[tag] = schema
            if kind == "old" and files:
                ins.layer_files[tag] = files
            if kind == "new" and n.id in sourced:
                ins.sourced[tag] = sourced[n.id]
                continue
            if df is None:  # its stored files alone: no frame, whose empty scan would cost Python tasks
                continue
            cols = plan.placed[n.id]
            (ins.bparts if cols is None and not tasks else ins.parts)[tag] = (df.select(*schema.names), cols)
    return ins


def _broadcast(ins: TaskInputs, spark) -> tuple[object, int]:
    """The collections every task needs whole, broadcast as one Arrow stream, and their
    rows; or why they cannot be (too many rows)."""
    small = pack_frames(ins.bparts, {t: ins.schemas[t] for t in ins.bparts})
    table = small.limit(BROADCAST_ROWS + 1).toArrow() if loop_path() != "local" else small.toArrow()
    if table.num_rows > BROADCAST_ROWS and loop_path() != "local":
        return f"its broadcast collections hold more than {BROADCAST_ROWS:,} rows", table.num_rows
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return spark.sparkContext.broadcast(sink.getvalue().to_pybytes()), table.num_rows


@dataclass
class TaskOutputs:
    """What a loop's tasks return in one wide frame: each leave's changes and each arranged
    node's processed updates (``tags``: (kind, node id) -> tag, kind ``leave`` or ``rec``)."""

    tags: dict[tuple[str, int], int]
    schemas: dict[int, pa.Schema]
    wide: pa.Schema


def _task_outputs(body: Body, schemas: dict, d: int) -> TaskOutputs:
    tags: dict[tuple[str, int], int] = {}
    out_schemas: dict[int, pa.Schema] = {}
    for l, _ in body.leaves:
        tags[("leave", l)] = len(tags)
        out_schemas[tags[("leave", l)]] = update_schema(schemas[l], d - 1)
    for t in body.nodes:
        if t.arranged and t.op != "enter":
            tags[("rec", t.id)] = len(tags)
            out_schemas[tags[("rec", t.id)]] = update_schema(schemas[t.id], d)
    return TaskOutputs(tags, out_schemas, wide_schema(out_schemas))


def _task_function(body: Body, ins: TaskInputs, outs: TaskOutputs, bc, acc, in_wide: pa.Schema, *, tasks: int,
                   keys, folder: str | None, row_limit: int | None, floor, writes: dict, files, returns: bool = True):
    """The function each Spark task runs over its batches (pickled by value with what it
    closes over): the loop's rounds to the fixed point, its statistics into ``acc``, the
    layer files of ``writes`` (:func:`_writes_in_task`) written and told to ``files``; its
    results as batches of the wide frame ``outs`` (unless not ``returns``)."""
    row_budget = task_rows()
    in_wide_tags, in_broadcast_tags = set(ins.parts), set(ins.bparts)
    tags, in_schemas, layer_files, entered_files = ins.tags, ins.schemas, ins.layer_files, ins.entered_files
    sourced = ins.sourced

    def task(batches):
        ex = None
        if tasks:
            from pyspark import BarrierTaskContext
            ex = Exchange(folder, BarrierTaskContext.get().partitionId(), tasks)
            if not ex.claim():  # a stage Spark runs again: the files of the first run cannot be trusted
                ex.abort("a task of the loop ran a second time")
                raise ExchangeAborted("a task of the loop ran a second time")
        try:
            yield from task_rounds(batches, ex)
        except Exception as e:  # noqa: BLE001 - the other tasks stop waiting, the error goes on
            if ex is not None:
                ex.abort(f"{type(e).__name__}: {e}")
            raise

    def task_rounds(batches, ex: Exchange | None):
        held, n = [], 0
        for b in batches:
            held.append(b)
            n += b.num_rows
            if ex is None and row_limit is not None and n > row_limit:  # refused before any round
                acc.add((0, 0, TOO_BIG, n, None, None))
                return
        share = slice(None) if ex is None else slice(ex.me, None, tasks)  # resident tasks: a share each
        stored = {tag: [(entered_layer_table if tag in entered_files else layer_table)(f, in_schemas[tag])
                        for f in files[share]] for tag, files in layer_files.items()}
        for tag, src in sourced.items():  # (one task only: it reads every file)
            stored.setdefault(tag, []).append(read_source(src, in_schemas[tag]))
        n += sum(t.num_rows for ts in stored.values() for t in ts)
        if row_limit is not None:  # resident tasks together: every task refuses, or none
            total = n if ex is None else sum(ex.agree(n))
            if total > row_limit * max(1, tasks):
                acc.add((0, 0, TOO_BIG, total, None, None))
                return
        table = (pa.Table.from_batches(held) if held else in_wide.empty_table()).cast(in_wide)
        if n == 0 and ex is None:
            return
        small = None
        if bc is not None:
            small = pa.ipc.open_stream(pa.py_buffer(bc.value)).read_all()
        new, old = {}, {}
        for (kind, nid), tag in tags.items():
            src = table if tag in in_wide_tags else small if tag in in_broadcast_tags else None
            shipped = in_schemas[tag].empty_table() if src is None else unpack_table(src, tag, in_schemas[tag])
            t = pa.concat_tables([shipped] + stored.get(tag, []))
            (new if kind == "new" else old)[nid] = t
        got = fixed_point(body, new, old, floor, row_budget, None if ex is None else Router(ex, keys))
        bad = got.refused or (None, None)
        acc.add((got.rounds, got.updates, TOO_BIG if got.too_big else int(got.converged), got.held, bad[1], bad[0]))
        if not got.too_big and not got.refused and got.converged:
            for (kind, nid), specs in writes.items():
                table = (got.leaves if kind == "leave" else got.records if kind == "rec" else new).get(nid)
                for spec in specs if table is not None else []:
                    mine = _outer_times(table, spec["d"]) if kind == "enter" else table
                    for meta in write_table_files(mine, **{k: v for k, v in spec.items() if k != "trace"}):
                        files.add([(spec["trace"], row) for row in meta.to_pylist()])
        if not returns:
            return
        out = {}
        for (kind, nid), tag in outs.tags.items():
            if kind == "leave" and nid in got.leaves:
                out[tag] = got.leaves[nid]
            elif kind == "rec" and nid in got.records:
                out[tag] = got.records[nid]
        wide = pack_tables(out, outs.wide)
        if wide is not None:
            yield from wide.to_batches()

    return task


def _finished(loop_node: Node, plan: LoopPlan, body: Body, nodes: list[Node], acc, tasks: int, rows: int, res,
              started: float, runtime, direct: bool, sourced: int) -> bool:
    """Read the tasks' statistics: False (reported) when the tasks refused their rows,
    an error when the loop did not converge or a priority was bad; else report the path
    taken and its figures (``direct``: a plain job, no frames; ``sourced``: entered
    collections the task read from files: ops/loops/direct.py)."""
    scope = loop_node.args["scope"]
    # the accumulator holds the statistics of the job's successful tasks; a stage Spark had
    # to run again could count a task twice, which only the sum ``updates`` (a figure for
    # reports) would show: max, min and least are idempotent
    stats = dict(zip(("rounds", "updates", "converged", "held", "refused_iteration", "refused_node"),
                     acc.value or (0, 0, 1, 0, None, None)))
    if stats["refused_iteration"] is not None:  # a record's priority is null or negative
        check_iteration(stats["refused_iteration"], scope.name, {n.id: n for n in nodes}[stats["refused_node"]])
    if stats["converged"] == TOO_BIG:
        if stats["rounds"] == 0:
            why = f"no columns deal it to tasks, and it holds more than {ONE_TASK_ROWS:,} rows a task for " \
                  f"{max(1, tasks)} task{'s' if tasks > 1 else ''} ({plan.unpartitioned})"
        else:
            why = f"a task held {stats['held']:,} rows after a round, more than {task_rows():,} " \
                  f"(DDCLI_LOOP_TASK_ROWS)"
        report(runtime, plan, why)
        return False
    report(runtime, plan, "", rows, res)
    if stats["converged"] == 0:
        raise PipelineError(f"loop {scope.name} ({loop_node.where}) did not reach a fixed point within "
                            f"{body.max_rounds} rounds; raise max_rounds or check that the body converges")
    rounds, updates = int(stats["rounds"] or 0), int(stats["updates"] or 0)
    if runtime.loop_stats is not None:
        runtime.loop_stats.append({"loop": scope.name, "rounds": rounds, "updates": updates,
                                   "path": "resident" if tasks else "local",
                                   "held_rows": int(stats["held"] or 0)})
    if runtime.progress is not None:
        runtime.progress.steps.append({"step": "loop_local", "loop": scope.name, "rounds": rounds,
                                       "held_rows": int(stats["held"] or 0), "direct": direct,
                                       "entered_from_files": sourced,
                                       "seconds": round(time.monotonic() - started, 3)})
        inside = f"{tasks} resident tasks" if tasks else "tasks"
        runtime.progress(f"loop {scope.name}: {rounds} rounds inside {inside} in {time.monotonic() - started:.2f} s")
    return True


def resident(plan: LoopPlan, body: Body, spark, shared_root: str | None = None) -> Resident | str:
    """How the loop runs resident, or why it does not (empty: it is partition-local), from
    the facts of the session (:func:`ops.loops.route.resident_decision`). ``shared_root``:
    a folder every executor sees (the store's), for the exchange on a cluster; local mode
    uses the machine's temporary folder."""
    from ops.spark.session import slots

    if plan.by and loop_path() != "resident":
        return ""
    local = is_local(spark.sparkContext.master)
    dynamic = spark.conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true"
    return resident_decision(plan, body, Engine(slots(spark), local, dynamic, shared_root))


def _resident_job(packed, tasks: int, task, out_wide: pa.Schema, folder: str):
    """Run the resident loop's tasks together; the output frame, or why they failed (the
    loop then runs round by round: a retried stage's exchange cannot be trusted)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from ops.spark.session import check_interrupt

    root = os.path.dirname(folder)
    made_root = not os.path.isdir(root)  # the store's exchange folder: removed again after the job
    os.makedirs(folder, exist_ok=True)
    try:
        # a shuffle after the barrier stage: without it, every later job reading the output
        # (even from the checkpoint) is a barrier stage too, and Spark refuses those
        out = packed.repartition(tasks).mapInArrow(task, from_arrow_schema(out_wide), barrier=True)
        return out.repartition(tasks).localCheckpoint(eager=True)
    except (Py4JJavaError, PySparkException) as e:
        check_interrupt()  # Ctrl-C cancels the job: the run stops, it does not go round by round
        lines = [l.strip() for l in str(e).splitlines()]
        lines = [l for l in lines if not l.startswith("at ") and ("Error:" in l or "Exception:" in l or "Aborted:" in l)]
        ours = [l for l in lines if "ExchangeAborted" in l]  # the tasks' own reason, before Spark's wrapping
        return f"its tasks failed together ({(ours or lines or [type(e).__name__])[0][:300]})"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if made_root:
            try:
                os.rmdir(root)
            except OSError:  # not empty: a folder another run made there since
                pass


def report(runtime, plan: LoopPlan, why: str, broadcast_rows: int = 0, res: Resident | str = "") -> None:
    """One line (and step) per loop and run: which path it takes, and why (again when a
    loop that ran inside tasks must go round by round from a later batch on)."""
    taken = runtime.loop_paths.get(plan.loop)
    if taken is not None and not (why and taken["path"] in ("local", "resident")):
        return
    if why or not plan.local:
        line = f"loop {plan.loop}: round by round: {why or plan.reason}"
        runtime.loop_paths[plan.loop] = {"path": "round", "why": why or plan.reason}
    else:
        b = [str(i) for i in plan.broadcast()]
        what = f" (broadcast: {len(b)} collection{'s' if len(b) != 1 else ''}, {broadcast_rows:,} rows)" if b else ""
        line = f"loop {plan.loop}: partition-local by {', '.join(plan.by)}{what}"
        runtime.loop_paths[plan.loop] = {"path": "local", "by": list(plan.by), "broadcast_rows": broadcast_rows}
        if isinstance(res, Resident):
            line = (f"loop {plan.loop}: resident in {res.tasks} tasks that exchange each round's changes by key "
                    f"({'no columns deal it: ' + plan.unpartitioned if not plan.by else 'DDCLI_LOOP_PATH=resident'})")
            runtime.loop_paths[plan.loop] = {"path": "resident", "tasks": res.tasks,
                                             "why": plan.unpartitioned or "DDCLI_LOOP_PATH=resident"}
        elif not plan.by:
            line = (f"loop {plan.loop}: in one task, every row of it together (no columns deal it: {plan.unpartitioned}; "
                    f"not resident: {res})")
            runtime.loop_paths[plan.loop].update(why=plan.unpartitioned, not_resident=res)
    if runtime.progress is not None:
        runtime.progress.steps.append({"step": "loop_path", "loop": plan.loop, **runtime.loop_paths[plan.loop]})
        runtime.progress(line)
