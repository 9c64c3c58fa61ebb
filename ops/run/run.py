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

import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from ops.operators.arrangement import Arrangement
from ops.operators.context import EvalContext
from ops.run.evaluate import Runtime, evaluate, node_key
from ops.io.read import read_layers
from ops.operators.linear import union_coalesced
from ops.dataflow.load import load_pipeline
from ops.dataflow.builder import Node, Pipeline, PipelineError
from ops.run.progress import RunProgress, cone_of, updates
from ops.reduce.shared_shuffle import shared_token, write_shared
from ops.io.write import write_layer, write_sealed_and_pending
from ops.io.write_many import LayerWrite, write_layers
from storage import faults
from storage.blobs.local import LocalBlobs
from storage.lattice import Frontier, time_columns
from storage.layer import Layer
from storage.log.commit import Conflict
from storage.store import State, Store
from storage.state.trace import Trace, check_new_name


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


@dataclass
class InputView:
    """One input trace as this run sees it: what is old, what is new."""

    trace: Trace
    old: list[Layer]
    new: list[Layer]
    seq: int  # the trace's next sequence number: everything below it is consumed now


def state_trace_name(pipeline: str, node: Node) -> str:
    return f"{pipeline}.{node.name}"


def fingerprint(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


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


def update_schema(data: pa.Schema, d: int) -> pa.Schema:
    return pa.schema(list(data) + [pa.field(t, pa.int64()) for t in time_columns(d)] + [pa.field("diff", pa.int64())])


def _empty_frame(spark, schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema
    return spark.createDataFrame([], from_arrow_schema(schema))


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


def loop_frontier(f: Frontier, depth: int) -> Frontier:
    """A frontier of outer times moved into loops: iteration coordinates stay at 0."""
    return Frontier([t + (0,) * depth for t in f], f.d + depth)


def check_pipeline(spark, p: Pipeline, views: dict[str, InputView], d: int) -> dict[int, pa.Schema]:
    """Validate the whole graph on empty frames (no Spark job); the data schema of each node."""
    from pyspark.sql.pandas.types import to_arrow_schema

    ctx = EvalContext(spark, d)
    sources = {n: _empty_frame(spark, update_schema(v.trace.schema, d)) for n, v in views.items()}
    runtime = Runtime(p, lambda node: None, planning=True)
    evaluate(p, ctx, sources, runtime)
    schemas = {}
    for node_id, df in runtime.planned.items():
        if df is None:
            continue
        s = to_arrow_schema(df.schema)
        skip = {"diff"} | {c for c in df.columns if c == "time" or c.startswith("time_")}
        schemas[node_id] = pa.schema([s.field(c) for c in df.columns if c not in skip])
    return schemas


BATCH_TIMES = 50_000  # pipelines with loops: distinct times per batch (see above)


def time_batches(store: Store, views: dict[str, InputView], d: int,
                 batch_times: int) -> list[tuple[int | None, int | None, set[str]]]:
    """``[lo, hi)`` ranges of the first time coordinate, each holding at most
    ``batch_times`` distinct values of the run's new updates, and the inputs with updates
    in each (read with DuckDB). One batch, unbounded, when that is all it takes."""
    import numpy as np

    from storage.blobs.base import duckdb_connect

    col = time_columns(d)[0]
    firsts: dict[str, np.ndarray] = {}
    con = duckdb_connect([store.path + "/"])
    try:
        for n, v in views.items():
            if v.new:
                quoted = ", ".join("'" + f.replace("'", "''") + "'" for f in store.layer_paths(v.trace, v.new))
                t = con.sql(f'SELECT DISTINCT "{col}" AS t FROM read_parquet([{quoted}]) ORDER BY t').to_arrow_table()
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


def run_pipeline(store: Store, path: str, *, name: str | None = None, master: str | None = None,
                 progress: Callable[[str], None] | RunProgress | None = None, batch_times: int | None = None,
                 loop_stats: list | None = None, rebuild: bool = False) -> RunResult:
    """One run (see the module's docstring). ``loop_stats`` (a list) receives each loop's
    rounds and updates. ``rebuild``: recompute the pipeline from its inputs' since, as if it
    had never run, and replace its state and outputs in the run's one commit (for an edited
    pipeline file; the old outputs stay readable until then)."""
    p = load_pipeline(path, name)
    state = store.state()
    views = input_views(store, state, p, fresh=rebuild)
    d = next(iter(views.values())).trace.d
    record = state.pipelines.get(p.name)
    fp = fingerprint(path)
    if record and record.get("fingerprint") != fp and not rebuild:
        raise PipelineError(f"pipeline {p.name!r} was run from another version of its file ({record.get('file')}, "
                            f"hash {record.get('fingerprint')}); run it with --rebuild to recompute its outputs "
                            f"from its inputs' since, or under a new --name (and `ddcli drop {p.name}` to release "
                            f"the old one)")
    if rebuild:
        _check_rebuild(state, p)
    for out in p.outputs:
        t = state.traces.get(out)
        if t is None:
            check_new_name(out, state.traces)
        if t is not None and t.owner != p.name:
            who = f"pipeline {t.owner!r}" if t.owner else "ingest"
            raise PipelineError(f"output {out!r} of pipeline {p.name!r} clashes with trace {out!r} written by {who}")

    new_frontier = pipeline_frontier(views)
    old_frontier = Frontier.from_json(record["frontier"], d) if record and not rebuild else Frontier.minimum(d)
    has_new = any(v.new for v in views.values())
    if not has_new and record and new_frontier == old_frontier and not rebuild:
        return RunResult(p.name, True, new_frontier)

    from ops.dataflow.precheck import precheck
    precheck(p, {n: v.trace.schema for n, v in views.items()})  # column mistakes, before the JVM

    from ops.spark.session import check_interrupt, get_spark, no_interrupts, partitions, size_partitions
    progress = progress if isinstance(progress, RunProgress) else RunProgress(progress)
    progress("starting Spark")
    with progress.step("spark_start") as started:
        spark = get_spark(master)
    progress(f"Spark ready in {started['seconds']:.1f} s" if started["seconds"] >= 0.05 else "Spark already running")
    progress.attach(spark)
    delta_rows = sum(l.rows for v in views.values() for l in v.new)
    size_partitions(spark, delta_rows, single_ok=not any(n.op == "loop" for n in p.nodes))
    schemas = check_pipeline(spark, p, views, d)
    runs = record["runs"] if record else 0

    def stored(node: Node) -> Arrangement | None:
        if node.op == "input":
            v = views[node.args["trace"]]
            return Arrangement(store.read_paths(v.trace, v.old), update_schema(v.trace.schema, d),
                               sum(l.rows for l in v.old))
        st = None if rebuild else state.traces.get(state_trace_name(p.name, node))
        files = store.read_paths(st) if st else []
        return Arrangement(files, update_schema(schemas[node.id], node_dim(d, node)), st.rows() if st else 0)

    runtime = Runtime(p, stored, progress=progress, loop_stats=loop_stats, schemas=schemas)
    if isinstance(store.blobs, LocalBlobs):  # on a cluster the store's folder is one every executor sees
        runtime.exchange_root = store.blobs.join(store.path, "exchange")
    ctx = EvalContext(spark, d, delta_rows=delta_rows)
    sources = {}
    for n, v in views.items():
        if v.new:
            sources[n] = read_layers(spark, store.read_paths(v.trace, v.new),
                                     _empty_frame(spark, update_schema(v.trace.schema, d)).schema)
    # batches only for one-dimensional times: with more, compacting to a batch's first time
    # could merge times the stored state must keep apart (the frontier need not be beyond it)
    in_batches = d == 1 and any(n.op == "loop" for n in p.nodes)
    batches = time_batches(store, views, d, batch_times or BATCH_TIMES) if in_batches else [(None, None, set(sources))]
    first = time_columns(d)[0]
    batch_frames: list[dict] = []
    for i, (lo, hi, inside) in enumerate(batches):
        if len(batches) > 1:
            progress(f"batch {i + 1} of {len(batches)}: times from {lo}" + (f" below {hi}" if hi is not None else ""))
            if i:  # the state of earlier batches, advanced to this batch's first time
                runtime.compact_to(lo)
        batch_sources = {n: _between(df, first, lo, hi) for n, df in sources.items() if n in inside}
        runtime.record_floor = _record_floor(d, hi, new_frontier)
        with progress.step("batch", batch=i + 1):
            frames = evaluate(p, ctx, batch_sources, runtime)
            outs = {node.id: frames.get(node.id) for node in p.outputs.values()}
            if i < len(batches) - 1:  # materialised now, so the batch's round frames can be released
                outs = {k: (f.localCheckpoint(eager=True) if f is not None else None) for k, f in outs.items()}
        batch_frames.append(outs)
        del frames

    # what this run writes: every output, and the arrangement of every derived collection
    targets: dict[str, tuple[Node, bool]] = {}
    for out, node in p.outputs.items():
        targets[out] = (node, False)
    for node in runtime.arranged.values():
        if node.op not in ("input", "enter"):
            targets[state_trace_name(p.name, node)] = (node, True)
    written: dict[str, Layer | None] = {}
    held: dict[str, Layer | None] = {}  # output -> its changes beyond the frontier, pending
    protos: dict[str, Trace] = {}
    writes: dict[str, dict] = {}  # trace -> its write step
    grouped: dict[str, LayerWrite] = {}  # trace -> its share of the one job writing the rest
    shared: dict[object, dict[str, LayerWrite]] = {}  # reduces' outputs by the shuffle they share
    ran = {n.id for n in runtime.ran}
    for tname, (node, is_state) in targets.items():
        schema = schemas[node.id]
        nd = node_dim(d, node)
        depth = nd - d
        existing = None if rebuild else state.traces.get(tname)
        key = existing.key if existing else node_key(node, schema.names)
        since = loop_frontier(new_frontier, depth) if is_state else (existing.since if existing else Frontier.minimum(d))
        proto = existing or Trace(tname, schema, key, nd, since, loop_frontier(old_frontier, depth), owner=p.name)
        protos[tname] = proto
        if is_state:
            live = runtime.live.get(node.id)
            df = live.processed_union() if live is not None else None
            one_frame = live is not None and len(live.processed) == 1
        else:
            present = [f[node.id] for f in batch_frames if f.get(node.id) is not None]
            if proto.pending:  # what waited beyond the old frontier: sealed now, or waits on
                present.append(read_layers(spark, store.layer_paths(proto, proto.pending),
                                           _empty_frame(spark, update_schema(schema, nd)).schema))
            df = union_coalesced(present) if present else None
            one_frame = len(present) == 1
        if df is None:
            written[tname] = None
            continue
        layout = dict(directory=store.trace_dir(tname), schema=update_schema(schema, nd), key=key, d=nd,
                      lower=loop_frontier(old_frontier, depth), upper=loop_frontier(new_frontier, depth),
                      seq=proto.next_seq, partitions=partitions(spark),
                      partitioned=one_frame and runtime.key_partitioned.get(node.id) == key)
        if not layout["partitioned"]:  # written together below, in one job
            grouped[tname] = LayerWrite(df, layout["directory"], layout["schema"], key, nd, layout["lower"],
                                        layout["upper"], since if is_state else proto.effective_since(),
                                        layout["seq"], split=not is_state, precombine=is_state and not one_frame)
            continue
        token = None if is_state else shared_token(df)
        if token is not None:  # a reduce's output: others may share its shuffle (ops/reduce/shared_shuffle.py)
            shared.setdefault(token, {})[tname] = LayerWrite(df, layout["directory"], layout["schema"], key, nd,
                                                             layout["lower"], layout["upper"],
                                                             proto.effective_since(), layout["seq"], split=True)
            continue
        with progress.step("write", trace=tname, state=is_state) as w:
            if is_state:
                written[tname] = write_layer(df, since=since, precombine=not one_frame, **layout)
            else:
                written[tname], held[tname] = write_sealed_and_pending(df, since=proto.effective_since(), **layout)
            _describe_write(w, tname, targets, written, held, protos, ran)
        writes[tname] = w
        _report_write(progress, w)
    together = [(shared_writes, write_shared) for shared_writes in shared.values()]  # one job per shuffle
    if grouped:
        together.append((grouped, lambda ws: write_layers(ws, partitions=partitions(spark))))
    for group, write_all in together:
        names = list(group)
        with progress.step("write", trace=names[0], state=targets[names[0]][1], together=names) as w:
            layers = write_all(list(group.values()))
            for tname, (sealed, pending) in zip(names, layers):
                written[tname] = sealed
                if group[tname].split:
                    held[tname] = pending
        for i, tname in enumerate(names):  # one step per trace, the job and seconds on the first
            rec = w if i == 0 else {"step": "write", "trace": tname, "state": targets[tname][1],
                                    "seconds": w["seconds"], "jobs": 0, "together": names}
            _describe_write(rec, tname, targets, written, held, protos, ran)
            if i > 0:
                progress.steps.append(rec)
            writes[tname] = rec
            _report_write(progress, rec)
    progress.operators(list({n.id: n for n in runtime.ran}.values()), writes,
                       lambda t: cone_of(targets[t][0], ran), _counted(p, runtime, writes))

    result = RunResult(p.name, False, new_frontier,
                       {o: (written[o].rows if written[o] else 0) for o in p.outputs},
                       {n: len(v.new) for n, v in views.items()}, rows_in=delta_rows, steps=progress.steps,
                       spark_jobs=progress.jobs_so_far())

    # inputs this pipeline held before the run: their history stayed exact for it; the
    # others (a first run) may have been compacted up to their effective since (the
    # since met with other readers' holds), and the outputs cannot know more
    unheld = [n for n, v in views.items() if rebuild or p.name not in v.trace.holds]

    def change(s: State) -> State:
        cur = s.pipelines.get(p.name)
        if (cur["runs"] if cur else 0) != runs:
            raise Conflict(f"another run of pipeline {p.name!r} committed first; nothing was written by this one")
        _check_files_exist(store, views, written, held)
        compacted_to = {}  # how far each input's history may be compacted now (before our hold)
        for n, v in views.items():
            t = s.traces.get(n)
            if t is None:
                raise Conflict(f"input trace {n!r} was removed during the run")
            compacted_to[n] = t.effective_since()
            if any(l.seq_lo < v.seq < l.seq_hi for l in t.layers):
                raise Conflict(f"input trace {n!r} was compacted across this run's position; run again")
            s.traces[n] = Store.with_hold(t, p.name, new_frontier, v.seq)
        for tname, (node, is_state) in targets.items():
            t = s.traces.get(tname)
            if t is not None and rebuild and t.owner == p.name:
                t = None  # replaced by its recomputation
            if t is None:
                t = protos[tname]
            elif t.owner != p.name or t.next_seq != protos[tname].next_seq:
                raise Conflict(f"trace {tname!r} changed during the run; run again")
            layer = written[tname]
            depth = t.d - d
            t = t.with_(layers=t.layers + ([layer] if layer else []), upper=loop_frontier(new_frontier, depth),
                        next_seq=t.next_seq + 1)
            if is_state:
                t = t.with_(since=loop_frontier(new_frontier, depth))
            else:
                if [l.id for l in t.pending] != [l.id for l in protos[tname].pending]:
                    raise Conflict(f"trace {tname!r} changed during the run; run again")
                if tname in held:
                    t = t.with_(pending=[held[tname]] if held[tname] else [])
                for n in unheld:  # an output never answers a time its inputs cannot tell apart
                    t = t.with_(since=t.since.join(compacted_to[n]))
            s.traces[tname] = t
        if rebuild:  # state of the old version that the new one does not have
            for old in [n for n, t in s.traces.items() if t.owner == p.name and "." in n and n not in targets]:
                del s.traces[old]
        s.pipelines[p.name] = {
            "file": os.path.abspath(path), "fingerprint": fp, "runs": runs + 1,
            "frontier": new_frontier.to_json(), "d": d,
            "inputs": {n: {"seq": v.seq, "upper": v.trace.upper.to_json()} for n, v in views.items()},
            "outputs": sorted(p.outputs), "state": sorted(t for t, (_, st) in targets.items() if st),
        }
        return s

    # from here Ctrl-C waits: cut short, the user could not tell whether the run committed
    with no_interrupts():
        try:
            check_interrupt()
            faults.point("run.before_commit")
            store.commit(change)
        except (Conflict, KeyboardInterrupt):  # lost a race, or Ctrl-C before: nothing of this run stays
            for tname, layer in list(written.items()) + list(held.items()):
                if layer:
                    store.discard(tname, [layer])
            raise
        faults.point("run.after_commit")
        for tname in targets:
            store._maintain_quietly(tname)
    return result


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
    jobs = f"{w['jobs']} Spark job{'s' if w['jobs'] != 1 else ''}"
    together = w.get("together") or []
    if len(together) > 1:  # one job wrote several traces
        jobs = f"{jobs} for {len(together)} traces" if w["jobs"] else f"in the job of {together[0]}"
    pending = f" (+{w['pending_rows']:,} pending beyond the frontier)" if w.get("pending_rows") else ""
    progress(f"wrote {w['trace']}{what}: {updates(w['rows'])}{pending} in {w['seconds']:.2f} s ({jobs}){ops}")


def _counted(p: Pipeline, runtime, writes: dict[str, dict]):
    """An operator's rows where a written layer holds exactly its changes: its own state
    trace (an arranged result), or an output declared directly on it."""
    def counted(n: Node):
        mine = state_trace_name(p.name, n)
        if n.id in runtime.arranged and mine in writes:
            return mine, writes[mine]["rows"]
        for out, o in p.outputs.items():
            w = writes.get(out)
            if o.inputs[0] is n and w is not None and not w.get("with_earlier_pending"):
                return out, w["rows"] + w.get("pending_rows", 0)
        return None
    return counted


def _check_files_exist(store: Store, views: dict[str, InputView], written: dict, held: dict) -> None:
    """A commit re-checks what it references: the layers it wrote (garbage collection with
    a short grace may have taken them as orphans) and the input layers it read."""
    for n, v in views.items():
        for path in store.layer_paths(v.trace, v.old + v.new):
            if not store.blobs.exists(path):
                raise Conflict(f"input trace {n!r}: layer file {path} was removed during the run (garbage "
                               f"collection with a short grace period?); nothing was written, run again")
    for tname, layer in list(written.items()) + list(held.items()):
        if layer is None:
            continue
        for f in layer.files:
            path = store.blobs.join(store.trace_dir(tname), f.name)
            if not store.blobs.exists(path):
                raise Conflict(f"layer file {path} was removed before it was committed (garbage collection "
                               f"with a short grace period?); nothing was written, run again")


def _check_rebuild(state: State, p: Pipeline) -> None:
    """A rebuild rewrites its outputs' history: refuse while another pipeline reads one of
    them (that pipeline has consumed the old history)."""
    for out in p.outputs:
        t = state.traces.get(out)
        readers = sorted(h for h in (t.holds if t is not None else {}) if h != p.name)
        if readers:
            raise PipelineError(f"output {out!r} of pipeline {p.name!r} is an input of pipeline {readers[0]!r}, "
                                f"which has consumed its old history; drop {readers[0]!r} before rebuilding "
                                f"{p.name!r}, then run it again")
