"""Which operators of a pipeline changed since the version that last ran.

A run records every operator of its pipeline (:func:`record_operators`): its kind, where
it was declared, its fingerprint (ops/dataflow/fingerprint.py: its definition and
everything upstream), the fingerprint of its own definition, and its inputs. Comparing a
newly loaded pipeline with that record (:func:`compare`) gives each operator one status:

* ``unchanged``: the same fingerprint: the same collection as before (its stored state,
  if any, is still valid);
* ``changed``: its own definition differs from the operator it replaces (an expression,
  a key, a reducer, a function's code);
* ``affected``: its own definition is the same, but something it reads changed;
* ``new`` / ``removed``: no counterpart in the other version.

Counterparts are found by fingerprint first, then by kind and matched inputs, then by
kind and own definition. ``ddcli run`` names the changes when it refuses to run an edited
pipeline; ``ddcli explain`` can show them (:func:`pipeline_changes`).

The state trace of an arranged node is the one the record names for its fingerprint,
wherever the node now sits in the file; a node with no valid state gets a new name
(:func:`state_names`).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

from ops.dataflow.fingerprint import fingerprints, own
from ops.dataflow.graph import Graph, Node, state_nodes, state_trace_name

STATUSES = ("unchanged", "changed", "affected", "new", "removed")


def file_hash(path: str) -> str:
    """The hash of a pipeline file's bytes (shown by ``ddcli pipelines``; stores written
    before pipelines were identified by their dataflow recorded only this)."""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


@dataclass
class OperatorChange:
    status: str  # one of STATUSES
    op: str
    where: str  # "file.py:line"; for a removed operator, in the version that last ran
    node: Node | None = None  # None for a removed operator

    def describe(self) -> str:
        return f"{self.op} ({self.where})" if self.where else self.op


@dataclass
class PipelineChanges:
    """A pipeline file against the store's record of its last run."""

    operators: list[OperatorChange] = field(default_factory=list)
    first_run: bool = False  # no record: every operator is new
    known: bool = True  # False: the record predates fingerprints and the file differs

    @property
    def changed(self) -> bool:
        """True when the dataflow differs from the one that ran (a rebuild is needed)."""
        if self.first_run:
            return False
        return not self.known or any(c.status != "unchanged" for c in self.operators)

    def of(self, status: str) -> list[OperatorChange]:
        return [c for c in self.operators if c.status == status]

    def summary(self) -> str:
        """One line: the changed, new and removed operators, and how many are affected."""
        if not self.known:
            return "its record predates per-operator fingerprints, so every operator is recomputed"
        parts = [f"{status} {', '.join(c.describe() for c in self.of(status))}"
                 for status in ("changed", "new", "removed") if self.of(status)]
        affected = self.of("affected")
        if affected:
            parts.append(f"affected downstream: {', '.join(c.describe() for c in affected)}")
        return "; ".join(parts) or "no operator changed"


def record_operators(p: Graph, fps: dict[int, str], state_names: dict[int, str] | None = None) -> list[dict]:
    """The record of every operator, in declaration order (inputs by position in it);
    ``state_names``: the state trace holding an arranged node's collection."""
    index = {n.id: i for i, n in enumerate(p.nodes)}
    out = []
    for n in p.nodes:
        e = {"op": n.op, "where": n.where, "fp": fps[n.id], "own": own(n),
             "inputs": [index[i.id] for i in n.inputs]}
        if n.op in ("input", "output"):
            e["trace"] = n.args["trace"]
        if state_names and n.id in state_names:
            e["state"] = state_names[n.id]
        out.append(e)
    return out


def compare(p: Graph, fps: dict[int, str], old: list[dict]) -> list[OperatorChange]:
    """Every operator of ``p`` with its status against the recorded operators ``old``,
    then the recorded operators with no counterpart (removed)."""
    owns = {n.id: own(n) for n in p.nodes}
    match: dict[int, int] = {}  # node id -> index in old
    used: set[int] = set()
    by_fp: dict[str, list[int]] = defaultdict(list)
    for j, e in enumerate(old):
        by_fp[e["fp"]].append(j)
    status: dict[int, str] = {}

    def take(n: Node, j: int, s: str) -> None:
        match[n.id], status[n.id] = j, s
        used.add(j)

    for n in p.nodes:
        j = next((j for j in by_fp.get(fps[n.id], []) if j not in used), None)
        if j is not None:
            take(n, j, "unchanged")
    for _ in range(2):  # twice: a loop's inputs are declared after the loop
        for n in p.nodes:
            if n.id in match:
                continue
            ins = [match.get(i.id) for i in n.inputs]
            same_inputs = [j for j, e in enumerate(old) if j not in used and e["op"] == n.op
                           and None not in ins and e["inputs"] == ins]
            same_own = [j for j in same_inputs if old[j]["own"] == owns[n.id]]
            if same_own or same_inputs:
                take(n, (same_own or same_inputs)[0], "affected" if same_own else "changed")
                continue
            alike = [j for j, e in enumerate(old) if j not in used and e["op"] == n.op and e["own"] == owns[n.id]]
            if alike:
                take(n, alike[0], "affected")
    out = [OperatorChange(status.get(n.id, "new"), n.op, n.where, n) for n in p.nodes]
    out += [OperatorChange("removed", e["op"], e.get("where", "")) for j, e in enumerate(old) if j not in used]
    return out


def recorded_operators(p: Graph, path: str, record: dict | None, traces, fps: dict[int, str]) -> list[dict] | None:
    """The operators ``record`` holds (None: no record, or one that cannot tell). A record
    written before fingerprints holds only the file's hash: when the file is unchanged, its
    operators are ``p``'s, their state traces named ``pipeline.op_id`` as they were then."""
    if record is None:
        return None
    old = record.get("operators")
    if old is None and record.get("fingerprint") == file_hash(path):
        legacy = {n.id: state_trace_name(p.name, n) for n in state_nodes(p) if state_trace_name(p.name, n) in traces}
        old = record_operators(p, fps, legacy)
    return old


def assign_state_names(p: Graph, fps: dict[int, str], old: list[dict] | None,
                       traces) -> tuple[dict[int, str], dict[int, str]]:
    """(every state node's trace, the nodes whose recorded state trace is still valid):
    the trace the record names for a node's fingerprint, else a new name, unique."""
    state_of = {e["fp"]: e["state"] for e in old or [] if e.get("state") in traces}
    nodes = state_nodes(p)
    reused = {n.id: state_of[fps[n.id]] for n in nodes if fps[n.id] in state_of}
    names = dict(reused)
    taken = set(reused.values())
    for n in nodes:
        if n.id not in names:
            name = state_trace_name(p.name, n)
            names[n.id] = name if name not in taken else f"{name}_{fps[n.id][:6]}"
            taken.add(names[n.id])
    return names, reused


def state_names(p: Graph, path: str, record: dict | None, traces) -> dict[int, str]:
    """The state trace of every state node of ``p`` (loaded from ``path``) against the
    store's record of its last run and its traces (``State.traces``)."""
    fps = fingerprints(p)
    return assign_state_names(p, fps, recorded_operators(p, path, record, traces, fps), traces)[0]


def pipeline_changes(p: Graph, path: str, record: dict | None) -> PipelineChanges:
    """``p`` (loaded from ``path``) against ``record``, the store's record of its last run
    (``State.pipelines[name]``; None: it never ran)."""
    fps = fingerprints(p)
    return changes_against(p, fps, record, recorded_operators(p, path, record, (), fps))


def changes_against(p: Graph, fps: dict[int, str], record: dict | None, old: list[dict] | None) -> PipelineChanges:
    """``p`` against the ``old`` operators of ``record`` (:func:`recorded_operators`)."""
    if record is None:
        return PipelineChanges([OperatorChange("new", n.op, n.where, n) for n in p.nodes], first_run=True)
    if old is None:  # recorded before fingerprints, from another file: nothing is known
        return PipelineChanges([OperatorChange("changed", n.op, n.where, n) for n in p.nodes], known=False)
    return PipelineChanges(compare(p, fps, old))
