"""``ddcli explain``: what a pipeline will do, read from its file and the store, without Spark.

The pipeline file is loaded as a run loads it (``ops/dataflow/load.py``), its columns are
found from the input traces' schemas (``ops/explain/schemas.py``), and every question is
answered by the functions a run asks (``ops/dataflow/graph.py``, ``ops/loops/``), so the
explanation says what the run does. Nothing here imports pyspark: a JVM never starts.
"""

from __future__ import annotations

import os

from ops.dataflow.builder import Pipeline
from ops.dataflow.changes import PipelineChanges, pipeline_changes, state_names
from ops.dataflow.graph import Node, arranged_nodes, node_key, read_key
from ops.dataflow.load import load_pipeline, trace_schemas
from ops.dataflow.operators import OPERATORS
from ops.explain import model
from ops.explain.loops import engine_for, explain_loop, priorities
from ops.explain.operators import summary
from ops.explain.schemas import planned_schemas
from storage.lattice import Frontier, format_frontier
from storage.state.lag import lag_rows
from storage.state.seal import hold_back
from storage.state.trace import Trace
from storage.state.transitions import State


def explain_pipeline(store, path: str, *, name: str | None = None, master: str | None = None) -> model.Explanation:
    """The explanation of the pipeline in ``path`` against ``store`` (see the module's docstring)."""
    from ops.spark.session import master_url

    state = store.state()
    p = load_pipeline(path, name, trace_schemas(state.traces))
    traces = state.traces
    inputs = {n: traces[n].schema for n in p.inputs if n in traces}
    schemas = planned_schemas(p, inputs)
    dims = {traces[n].d for n in p.inputs if n in traces}
    d = min(dims) if dims else 1
    record = state.pipelines.get(p.name) if isinstance(state.pipelines.get(p.name), dict) else None
    ex = model.Explanation(p.name, os.path.abspath(path), store.path, int(record.get("runs", 0)) if record else 0,
                           _frontier(record), "")
    arranged = arranged_nodes(p)
    names = state_names(p, path, record, traces)  # found by fingerprint, wherever the node now is
    changes = pipeline_changes(p, path, record)
    status = {c.node.id: c.status for c in changes.operators if c.node is not None}
    ex.operators = [_operator(n, schemas, arranged, None if changes.first_run else status.get(n.id))
                    for n in p.nodes]
    if changes.changed:
        ex.changes = changes.summary()
        ex.removed = [c.describe() for c in changes.of("removed")]
    ex.arrangements = _arrangements(p, arranged, schemas, traces, names)
    engine = engine_for(master_url(master), store.exchange_folder())

    def rows_of(trace: str) -> int | None:
        return traces[trace].rows() if trace in traces else None

    ex.inputs = [_input(state, p, n) for n in p.inputs]
    new_rows = sum(i.lag.updates for i in ex.inputs if i.lag)
    ex.loops = [explain_loop(p, n, schemas, d, engine, rows_of, names, new_rows) for n in p.nodes if n.op == "loop"]
    ex.priorities = priorities(p)
    ex.outputs = [_trace_info(traces.get(n), n, "output") for n in p.outputs]
    ex.state = [_state_trace(traces.get(names[n.id]), names[n.id], n)
                for n in arranged.values() if n.op not in ("input", "enter")]
    ex.next_run = _next_run(ex, record, changes)
    ex.notes = [*p.notes, *_notes(ex, dims)]
    return ex


def _frontier(record: dict | None) -> str | None:
    if not record or "frontier" not in record:
        return None
    return format_frontier(Frontier.from_json(record["frontier"], record.get("d", 1)))


def _operator(n: Node, schemas: dict, arranged: dict, change: str | None) -> model.Operator:
    cols = schemas[n.id].names if n.id in schemas else None
    return model.Operator(n.id, n.name, n.op, n.where, summary(n),
                          [i.name for i in n.inputs if i.op != "loop"], cols,
                          n.scope.name if n.scope is not None else None,
                          n.args["scope"].name if n.op == "loop" else None,
                          stateful=OPERATORS[n.op].stateful, arranged=n.id in arranged, change=change)


def _arrangements(p: Pipeline, arranged: dict, schemas: dict, traces: dict[str, Trace],
                  names: dict[int, str]) -> list[model.Arrangement]:
    out = []
    for n in arranged.values():
        readers = [r for r in p.nodes if OPERATORS[r.op].stateful and n in r.inputs]
        readers += [e for e in p.nodes if e.op == "enter" and e.inputs[0] is n and e.id in arranged]
        cols = schemas[n.id].names if n.id in schemas else []
        shown = [f"{r.name} (by {', '.join(read_key(r, cols)) or 'its row'})" if r.op != "enter"
                 else f"{r.name} (into loop {r.scope.name})" for r in readers]
        if n.op == "input":
            kind, trace = "input", n.args["trace"]
        elif n.op == "enter":
            kind, trace = "entered", None
        else:
            kind, trace = "state", names[n.id]
        t = traces.get(trace) if trace else None
        key = t.key if t is not None else node_key(n, cols)
        a = model.Arrangement(n.name, n.where, kind, trace, list(key), shown, len(readers) > 1)
        if t is not None:
            a.rows, a.bytes, a.layers = t.rows(), t.bytes(), len(t.all_layers())
        out.append(a)
    return out


def _trace_info(t: Trace | None, name: str, role: str) -> model.TraceInfo:
    if t is None:
        return model.TraceInfo(name, role, False)
    return model.TraceInfo(name, role, True, list(t.key), t.d, format_frontier(t.since), format_frontier(t.upper),
                           t.rows(), t.bytes(), len(t.all_layers()), t.owner)


def _input(state: State, p: Pipeline, name: str) -> model.TraceInfo:
    t = state.traces.get(name)
    info = _trace_info(t, name, "input")
    if t is None:
        return info
    lag = [r for r in lag_rows(state, name) if r["pipeline"] == p.name and r["input"] == name]
    if lag:
        r = lag[0]
        info.lag = model.Lag(r["consumed"], r["updates"], r["layers"], r["pending"], r["behind"],
                             r["holds_back"], r["behind_by"])
    else:  # never ran: the first run reads every sealed update
        uppers = {n: state.traces[n].upper for n in p.inputs if n in state.traces}
        waits, by = hold_back(uppers)[name]
        info.lag = model.Lag(None, sum(l.rows for l in t.layers), len(t.layers), sum(l.rows for l in t.pending),
                             bool(t.layers), waits, by)
    return info


def _state_trace(t: Trace | None, name: str, n: Node) -> model.StateTrace:
    if t is None:
        return model.StateTrace(name, n.name, n.where, False)
    return model.StateTrace(name, n.name, n.where, True, t.rows(), t.bytes(), len(t.all_layers()),
                            format_frontier(t.since), format_frontier(t.upper))


def _next_run(ex: model.Explanation, record: dict | None, changes: PipelineChanges) -> str:
    missing = [i.name for i in ex.inputs if not i.exists]
    if missing:
        return f"refuses to run: input trace {missing[0]} does not exist yet (ingest it first)"
    if changes.changed:  # what `ddcli run` says when it refuses (ops/run/run.py)
        return (f"refuses to run: its dataflow changed since its last run ({changes.summary()}); "
                f"`ddcli run --rebuild` recomputes the changed operators and what depends on them")
    clash = [o for o in ex.outputs if o.exists and o.owner != ex.pipeline]
    if clash:
        who = f"pipeline {clash[0].owner}" if clash[0].owner else "ingest"
        return f"refuses to run: output {clash[0].name} is a trace written by {who}"
    updates = sum(i.lag.updates for i in ex.inputs if i.lag)
    behind = any(i.lag.behind for i in ex.inputs if i.lag)
    if record and not behind:
        return "nothing to do: every sealed input update has been processed"
    first = "its first run" if not record else "the next run"
    return f"{first} reads {updates:,} new input update{'s' if updates != 1 else ''}"


def _notes(ex: model.Explanation, dims: set[int]) -> list[str]:
    notes = []
    if len(dims) > 1:
        notes.append("its inputs have different time dimensions: a run refuses it")
    if any(l.unknown_types for l in ex.loops):
        notes.append("some columns inside loops have types only Spark can tell; a run decides their loops' "
                     "paths again with Spark's types")
    if any(i.lag and i.lag.holds_back for i in ex.inputs):
        slow = [i.name for i in ex.inputs if i.lag and i.lag.holds_back]
        notes.append(f"{', '.join(slow)} holds the pipeline back: its upper is behind another input's "
                     f"(a table complete for good can be sealed with `ddcli advance TRACE --seal`)")
    return notes
