"""Which loops run partition-local: the whole fixed point of a batch inside Spark tasks.

A loop can run its rounds inside tasks, without a shuffle or a job per round, when its
rows can be dealt to tasks by some columns ``P`` (e.g. ``root`` in reachability) so that
every operator of the body only ever combines rows of the same task:

* a collection entered from outside either carries ``P`` (it is dealt by ``P`` too) or is
  *broadcast* (every task holds all of it; decided at run time by its size, see
  ``ops/loops/local.py``) and is then only the other side of a join;
* ``select`` passes the ``P`` columns through unchanged (perhaps renamed); ``filter``,
  ``negate``, ``concat`` of collections dealt by the same columns keep them;
* ``join``/``semijoin`` of two dealt sides is keyed on the ``P`` columns; with one
  broadcast side the output is dealt like the other side;
* ``reduce``/``distinct``/``threshold`` group by keys that include ``P``;
* every variable, and what it is set to, is dealt by ``P``.

``P`` is declared (``iterate(body, partition_by="root")``) or inferred by trying each
column of the loop variable. A loop that no columns deal (connected components: labels
cross every partition) still runs inside a task when all its rows are few: ``P`` is
then empty, one task holds every row (``ops/loops/local.py`` checks the size at run time,
up to :data:`~ops.loops.route.ONE_TASK_ROWS`, and otherwise runs the loop round by round).

The plan is a pure function of the pipeline graph and the planned schemas; a loop that
does not qualify gets a reason, shown in the run's report. ``DDCLI_LOOP_PATH=round`` turns
the partition-local path off (``auto``, the default, and ``local`` take it wherever the
plan allows; ``local`` also ignores the broadcast and one-task limits). ``resident`` runs
every loop the plan allows in tasks as a loop no columns deal (``ops/loops/local.py``),
without those limits either: a setting for tests.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import pyarrow as pa

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, arranged_nodes, read_key, scope_nodes
from ops.dataflow.operators import JOIN, LINEAR, OPERATORS, REDUCE


def loop_path() -> str:
    """``round``, ``auto`` (default), ``local`` or ``resident``, from ``DDCLI_LOOP_PATH``."""
    v = os.environ.get("DDCLI_LOOP_PATH", "auto").strip().lower() or "auto"
    if v not in ("round", "auto", "local", "resident"):
        raise ValueError(f"DDCLI_LOOP_PATH={v!r}: use round, auto, local or resident")
    return v


@dataclass
class LoopPlan:
    """How a loop runs. ``by``: the partition columns (as the variables name them);
    ``placed``: node id -> the columns that carry ``P`` in that node (None: broadcast);
    ``reason``: why the loop runs round by round (empty when partition-local);
    ``unpartitioned``: why no columns deal it (``by`` is then empty: one task, if small);
    ``unplanned``: the reason is a collection whose schema was not given."""

    loop: str
    by: list[str] = field(default_factory=list)
    placed: dict[int, tuple[str, ...] | None] = field(default_factory=dict)
    reason: str = ""
    unpartitioned: str = ""
    unplanned: bool = False

    @property
    def local(self) -> bool:
        return not self.reason

    def broadcast(self) -> list[int]:
        return [i for i, cols in self.placed.items() if cols is None]


def plan_loop(p: Pipeline, loop_node: Node, schemas: dict[int, pa.Schema] | None) -> LoopPlan:
    """The partition-local plan of ``loop_node``, or a plan whose ``reason`` says why not."""

    scope = loop_node.args["scope"]
    plan = LoopPlan(scope.name)
    if loop_path() == "round":
        plan.reason = "DDCLI_LOOP_PATH=round"
        return plan
    if schemas is None:
        plan.reason, plan.unplanned = "no planned schemas", True
        return plan
    if loop_node.scope is not None:
        plan.reason = "a loop nested in another loop"
        return plan
    nodes = scope_nodes(p, scope)
    for n in nodes:
        if not OPERATORS[n.op].in_task:
            plan.reason = f"{n.describe()} is not supported inside tasks"
            return plan
        if n.id not in schemas:
            plan.reason, plan.unplanned = f"{n.describe()} has no planned schema", True
            return plan
    variables = list(scope.variables)
    declared = loop_node.args.get("partition_by")
    first = schemas[variables[0].id].names
    candidates = [list(declared)] if declared else [[c] for c in first]
    reasons = []
    for by in candidates:
        placed, why = _place(nodes, variables, by, schemas, p)
        if not why:
            plan.by, plan.placed = by, placed
            return plan
        reasons.append(f"by {', '.join(by)}: {why}")
    plan.unpartitioned = "; ".join(reasons) if reasons else "the variable has no columns"
    placed, why = _place(nodes, variables, [], schemas, p)  # P empty: every row in one task
    if why:
        plan.reason = f"{plan.unpartitioned}; in one task: {why}"
    else:
        plan.placed = placed
    return plan


def _place(nodes: list[Node], variables: list[Node], by: list[str], schemas, p: Pipeline):
    """Each node's partition columns under ``P = by`` (None: broadcast), or a reason."""
    placed: dict[int, tuple[str, ...] | None] = {}
    P = tuple(by)
    for v in variables:
        if not set(P) <= set(schemas[v.id].names):
            return placed, f"variable {v.describe()} lacks a partition column"
    ptypes = [schemas[variables[0].id].field(c).type for c in P]
    users = {n.id: [] for n in nodes}
    for n in nodes:
        for i in n.inputs:
            if i.id in users:
                users[i.id].append(n)
    for n in nodes:
        cols = schemas[n.id].names
        ins = [placed.get(i.id, "?") for i in n.inputs]
        if n.op == "enter":
            if set(P) <= set(cols) and [schemas[n.id].field(c).type for c in P] == ptypes:
                placed[n.id] = P
            else:
                placed[n.id] = None
                bad = [u for u in users[n.id] if not OPERATORS[u.op].broadcast_ok]
                if bad:
                    return placed, (f"{n.describe()} lacks the partition columns and feeds "
                                    f"{bad[0].describe()}, which needs all of it in every task")
        elif n.op == "variable":
            placed[n.id] = P
        elif n.op == "concat":
            if any(x is None for x in ins) or len(set(ins)) != 1:
                return placed, f"{n.describe()} combines collections dealt to tasks differently"
            placed[n.id] = ins[0]
        elif OPERATORS[n.op].family == LINEAR:  # one input, its rows dealt as they come
            src = ins[0]
            if src is None or n.op != "select":
                placed[n.id] = src
            else:
                out = _through_select(n, src)
                if out is None:
                    return placed, f"{n.describe()} does not pass the partition columns {', '.join(src)} through"
                placed[n.id] = out
        elif OPERATORS[n.op].family == JOIN:
            on = n.args["on"]
            left, right = ins
            if left is not None and right is not None:
                if left != right or not set(left) <= set(on):
                    return placed, f"{n.describe()} joins on {', '.join(on)}, not on the partition columns"
                placed[n.id] = left
            elif left is not None:
                placed[n.id] = left
            elif right is not None:
                if n.op == "semijoin" or not (set(right) <= set(cols)):
                    return placed, f"{n.describe()} drops the partition columns of its right side"
                placed[n.id] = right
            else:
                return placed, f"{n.describe()} joins two broadcast collections inside the loop"
        elif OPERATORS[n.op].family == REDUCE:
            src = ins[0]
            key = read_key(n, schemas[n.inputs[0].id].names)
            if src is None or not set(src) <= set(key):
                return placed, f"{n.describe()} groups by {', '.join(key)}, not by the partition columns"
            placed[n.id] = src
    arranged = arranged_nodes(p)
    for n in nodes:
        if n.op != "enter" and n.id in arranged and placed.get(n.id) is None:
            return placed, f"{n.describe()} is broadcast and kept as state: every task would keep all of it"
    for v in variables:
        r = v.args["result"]
        if placed.get(r.id) != P:
            return placed, f"the result of {v.describe()} is not dealt by {', '.join(P)}"
    for l in (x for x in p.nodes if x.op == "leave" and x.inputs[0] is variables[0].scope.node):
        if placed.get(l.inputs[1].id) is None:
            return placed, f"{l.describe()} leaves a broadcast collection"
    return placed, ""


_IDENT = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s*$")


def _through_select(n: Node, src: tuple[str, ...]) -> tuple[str, ...] | None:
    """The names the partition columns ``src`` have after ``select`` node ``n``: each must
    be passed through as a plain column reference."""
    refs: dict[str, str] = {}  # source column -> first output name referencing it
    for c in n.args["columns"]:
        if isinstance(c, str):
            refs.setdefault(c, c)
    for name, e in n.args["exprs"].items():
        m = _IDENT.match(e) if isinstance(e, str) else None
        if m:
            refs.setdefault(m.group(1), name)
    if not all(c in refs for c in src):
        return None
    return tuple(refs[c] for c in src)


# ------------------------------------------------------------- portable SQL expressions

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<q>`[A-Za-z_][A-Za-z0-9_]*`)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<op><=|>=|<>|!=|[-+*=<>(),]))")
_WORDS = {"CAST", "AS", "BIGINT", "INT", "INTEGER", "DOUBLE", "SMALLINT", "AND", "OR", "NOT", "IS", "NULL",
          "TRUE", "FALSE", "COALESCE", "GREATEST", "LEAST"}


def portable_sql(e, columns: list[str]) -> str | None:
    """``e`` as DuckDB SQL when it is a Spark SQL string of a small, unambiguous grammar
    (columns, integers, ``+ - *``, comparisons, ``AND OR NOT``, ``IS NULL``, ``CAST`` to
    integer or double types, ``COALESCE``/``GREATEST``/``LEAST``) that both engines
    evaluate alike; None otherwise (a Spark Column, division, strings, functions...)."""
    if not isinstance(e, str):
        return None
    out, pos = [], 0
    while pos < len(e):
        m = _TOKEN.match(e, pos)
        if m is None or m.end() == pos:
            if e[pos:].strip() == "":
                break
            return None
        pos = m.end()
        if m.group("num"):
            out.append(m.group("num"))
        elif m.group("q") or (m.group("word") and m.group("word").upper() not in _WORDS):
            name = (m.group("q") or m.group("word")).strip("`")
            if name not in columns:
                return None
            out.append('"' + name + '"')
        elif m.group("word"):
            out.append(m.group("word").upper())
        else:
            out.append(m.group("op"))
    return " ".join(out) if out else None
