"""An edited pipeline: what its state is called, and what a rebuild must recompute.

A pipeline is identified by its dataflow (ops/dataflow/fingerprint.py): a run records each
operator's fingerprint and, for every arranged collection, the state trace holding it
(ops/dataflow/changes.py). So an edit that leaves the dataflow unchanged runs as before,
and the state of an operator that did not change is found by its fingerprint, wherever it
now sits in the file (:func:`identify`).

``--rebuild`` recomputes only what changed (:func:`plan_backfill`), up to the frontier
``P`` the pipeline had, in a commit of its own; the run then goes on over new input as
usual. Recomputed are the outputs whose fingerprint changed and the arranged collections
with no valid state, with everything they read that no stored trace holds. Where a
recomputed operator reads a collection whose state is stored (an unchanged operator's
arrangement) that state is its input, whole, instead of recomputing what produced it —
the backfill differential dataflow and Feldera avoid.

The state is compacted to ``P``: its updates before ``P`` all sit at ``P``. It stands for
the collection at ``P - 1`` when nothing at ``P`` or later was consumed, that is when
times are one-dimensional and every input was consumed up to ``P`` exactly (the record
says how far): only then is state reused, and an output recomputed from it is written at
``P - 1``, its since moved there — it answers the latest complete time and every later
one, not the times before (``--rebuild-all`` recomputes those too). Otherwise, and for
operators whose result at a time depends on earlier times (moment time, as-of joins),
what a recomputed operator reads is recomputed from the inputs' history, and an output
keeps its inputs' since.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ops.dataflow.builder import Pipeline
from ops.dataflow.changes import (PipelineChanges, assign_state_names, changes_against, file_hash,
                                  record_operators, recorded_operators)
from ops.dataflow.fingerprint import dataflow_fingerprint, fingerprints, loop_body
from ops.dataflow.graph import Node, scope_nodes, state_nodes
from ops.dataflow.operators import CALCULUS, OPERATORS
from storage.lattice import Frontier
from storage.state.trace import Trace
from storage.state.transitions import State


@dataclass
class Identity:
    """A loaded pipeline against the store's record of its last run."""

    fps: dict[int, str]  # node id -> fingerprint
    dataflow: str  # the whole pipeline's fingerprint
    file_hash: str
    changes: PipelineChanges
    state_names: dict[int, str]  # arranged node id -> the state trace holding its collection
    reused: dict[int, str]  # the nodes whose recorded state is still valid -> its trace
    old_outputs: dict[str, str]  # output trace -> its fingerprint when it last ran

    def operators(self, p: Pipeline) -> list[dict]:
        """The record of ``p``'s operators, for the pipeline's record."""
        return record_operators(p, self.fps, self.state_names)


def identify(p: Pipeline, path: str, record: dict | None, state: State) -> Identity:
    """``p``'s fingerprints, its changes against ``record`` and its state traces' names
    (ops/dataflow/changes.py). A record written before pipelines were identified by their
    dataflow holds only the file's hash: an unchanged file is known, another is not (a
    rebuild then recomputes everything)."""
    fps = fingerprints(p)
    old = recorded_operators(p, path, record, state.traces, fps)
    names, reused = assign_state_names(p, fps, old, state.traces)
    old_outputs = {e["trace"]: e["fp"] for e in old or [] if e["op"] == "output"}
    return Identity(fps, dataflow_fingerprint(fps), file_hash(path), changes_against(p, fps, record, old),
                    names, reused, old_outputs)


@dataclass
class Backfill:
    """What a partial rebuild recomputes, up to the frontier the pipeline had."""

    needed: set[int] = field(default_factory=set)  # nodes recomputed (loops with their bodies)
    boundaries: dict[int, Trace] = field(default_factory=dict)  # node -> stored state read whole instead
    inputs: set[str] = field(default_factory=set)  # input traces whose consumed history is read
    outputs: list[str] = field(default_factory=list)  # outputs replaced
    skipped: set[int] = field(default_factory=set)  # top-level nodes not evaluated at all
    floors: dict[str, Frontier] = field(default_factory=dict)  # output -> its since at least
    reads: dict[str, list[str]] = field(default_factory=dict)  # output -> the input traces it is recomputed from
    latest: int | None = None  # P - 1, when state is reused: the time outputs recomputed from it are written at
    from_state: set[str] = field(default_factory=set)  # outputs recomputed from stored state

    def describe(self, p: Pipeline) -> dict:
        by_id = {n.id: n for n in p.nodes}
        return {"recomputed": [by_id[i].describe() for i in sorted(self.needed)
                               if by_id[i].op not in ("input", "output")],
                "reused_state": sorted(t.name for t in self.boundaries.values()),
                "replaced_outputs": list(self.outputs)}


def state_reusable(record: dict, d: int) -> int | None:
    """The frontier ``P`` (a number) when the stored state stands for the collections at
    ``P - 1`` (see the module's docstring), else None."""
    consumed = Frontier.from_json(record["frontier"], d)
    if d != 1 or len(consumed) != 1 or consumed.elements[0][0] < 1:
        return None
    uppers = [Frontier.from_json(v["upper"], d) for v in record.get("inputs", {}).values()]
    return consumed.elements[0][0] if uppers and all(u == consumed for u in uppers) else None


def plan_backfill(p: Pipeline, ident: Identity, state: State, frontier: int | None) -> Backfill:
    """The nodes a partial rebuild recomputes, and the stored traces it reads instead of
    recomputing further up (see the module's docstring); ``frontier``: ``P`` when state
    may be reused (:func:`state_reusable`), None when everything comes from the inputs."""
    top = scope_nodes(p, None)
    unit = {n.id: n for n in p.nodes}  # a loop's body counts as the loop
    body: dict[int, list[Node]] = {}
    for n in top:
        if n.op == "loop":
            body[n.id] = loop_body(p, n)
            unit.update({m.id: n for m in body[n.id]})
    stored = {i: state.traces[t] for i, t in ident.reused.items() if unit[i].id == i and frontier is not None}
    outputs = [o for o, n in p.outputs.items() if ident.old_outputs.get(o) != ident.fps[n.id]]
    work = [(p.outputs[o], False) for o in outputs]
    work += [(n, False) for n in state_nodes(p) if n.id not in ident.reused]
    exact: dict[int, bool] = {}  # unit id -> recomputed from exact history
    while work:
        n, strict = work.pop()
        u = unit[n.id]
        if u.op == "input" or (u.id in exact and (exact[u.id] or not strict)):
            continue
        exact[u.id] = strict
        strict_in = strict or any(_history_sensitive(m) for m in [u] + body.get(u.id, []))
        for i in u.inputs:
            i = unit[i.id]
            if i.op != "input" and not (i.id in stored and not strict_in) and i is not u:
                work.append((i, strict_in))
    out = Backfill(outputs=outputs, latest=None if frontier is None else frontier - 1)
    for uid in exact:
        u = unit[uid]
        out.needed |= {uid} | {m.id for m in body.get(uid, [])}
        for i in u.inputs:
            i = unit[i.id]
            if i.op == "input":
                out.inputs.add(i.args["trace"])
            elif i.id not in exact and i is not u:
                out.boundaries[i.id] = stored[i.id]
    out.skipped = {n.id for n in top if n.id not in out.needed and n.id not in out.boundaries and n.op != "input"}
    for o in outputs:
        _output_floor(o, p.outputs[o], out, unit, state, p.name)
    return out


def _output_floor(o: str, node: Node, out: Backfill, unit: dict[int, Node], state: State, pipeline: str) -> None:
    """Where a replaced output is exact from: the since of the stored state it is recomputed
    from, and of the output before (its since never moves back); and the inputs it reads."""
    old = state.traces.get(o)
    floor = old.since if old is not None and old.owner == pipeline else None
    inputs: set[str] = set()
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = unit[todo.pop().id]
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.op == "input":
            inputs.add(n.args["trace"])
        elif n.id in out.boundaries:
            out.from_state.add(o)
        else:
            todo.extend(i for i in n.inputs if unit[i.id] is not n)
    if o in out.from_state:  # written at P - 1 (see the module's docstring)
        at = Frontier([(out.latest,)], 1)
        floor = at if floor is None else floor.join(at)
    if floor is not None:
        out.floors[o] = floor
    out.reads[o] = sorted(inputs)


def _history_sensitive(n: Node) -> bool:
    """Whether a node's output at a time depends on its input at earlier times (the calculus
    family: moment time, as-of joins): recomputing it from state compacted to the frontier
    would lose those times."""
    return OPERATORS[n.op].family == CALCULUS
