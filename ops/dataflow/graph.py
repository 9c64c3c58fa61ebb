"""A pipeline's graph and the questions every pass asks of it.

A pipeline file declares :class:`Node` values through the builder (ops/dataflow/builder.py);
everything that walks the graph (the evaluator, the loop planner, the pre-check, the
oracle) asks the same questions, answered here: the nodes of a scope in order, which
nodes are arranged, how many operators read a node, the key a node is stored by. Nothing
here imports the builder or any operator.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Protocol

from ops.dataflow.operators import OPERATORS
from ops.dataflow.reducers import Reducer


@dataclass(eq=False)
class Node:
    """One operator in the graph. ``inputs`` are upstream nodes; ``args`` its parameters."""

    op: str
    inputs: list["Node"]
    args: dict[str, Any] = field(default_factory=dict)
    where: str = ""  # "file.py:line" of the declaration
    id: int = 0
    name: str = ""  # e.g. "reduce_3"; used for state traces
    scope: Any = None  # the loop (a builder Scope) the node lives in; None: the pipeline itself

    def describe(self) -> str:
        return f"{self.op} ({self.where})" if self.where else self.op


def declared_at() -> str:
    """The first frame outside ops/: the user's pipeline file and line."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # ops/
    frame = sys._getframe(2)  # frames, not inspect.stack(): that reads every caller's source lines
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(here):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def column_list(v) -> list[str]:
    """A column name or a list of them (or None), as a list."""
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


class Graph(Protocol):
    """What the questions below need of a pipeline: its nodes, in declaration order."""

    nodes: list[Node]


def arranged_nodes(p: Graph) -> dict[int, Node]:
    """Nodes whose old updates some stateful operator reads (by node id).

    A collection entered into a loop reads its old updates from the outer collection, so
    arranging an ``enter`` node arranges its source too.
    """
    out: dict[int, Node] = {}

    def mark(n: Node) -> None:
        if n.id in out:
            return
        out[n.id] = n
        if n.op == "enter":
            mark(n.inputs[0])

    for n in p.nodes:
        if OPERATORS[n.op].stateful:
            for i in n.inputs:
                mark(i)
    return out


def uses(p: Graph) -> dict[int, int]:
    """How many operators read each node (by node id); a loop variable's result counts."""
    count: dict[int, int] = {}
    for n in p.nodes:
        for i in n.inputs:
            count[i.id] = count.get(i.id, 0) + 1
        if n.op == "variable" and n.args.get("result") is not None:
            r = n.args["result"]
            count[r.id] = count.get(r.id, 0) + 1
    return count


def scope_nodes(p: Graph, scope) -> list[Node]:
    """The nodes of ``scope`` in an order where every node follows its inputs."""
    members = [n for n in p.nodes if n.scope is scope]
    ids = {n.id for n in members}
    done: set[int] = set()
    order: list[Node] = []

    def visit(n: Node) -> None:
        if n.id in done:
            return
        done.add(n.id)
        for i in n.inputs:
            if i.id in ids:
                visit(i)
        order.append(n)

    for n in members:
        visit(n)
    return order


def node_key(n: Node, columns: list[str]) -> list[str]:
    """The key an operator's output is naturally arranged (and stored) by: the key it names,
    else the key of the collection it passes on, else its first column. An operator that
    passes a collection on names a key of its own only optionally (``output``)."""
    o = OPERATORS[n.op]
    if o.keyed_by is not None and (o.carries is None or n.args.get(o.keyed_by)):
        return list(n.args[o.keyed_by])
    if o.carries is not None:
        return node_key(n.inputs[o.carries], columns)
    return columns[:1]


def node_priority(node: Node):
    """The iteration expression of an ``enter_at`` node or a prioritized variable (None: none)."""
    return node.args.get("priority")


def state_trace_name(pipeline: str, node: Node) -> str:
    """The name a new state trace gets (a node's recorded state keeps the name it was given:
    ops/dataflow/changes.py, ``state_names``)."""
    return f"{pipeline}.{node.name}"


def state_nodes(p: Graph) -> list[Node]:
    """The nodes whose collection a run stores as a state trace: every arranged one but
    inputs (traces already) and entered collections (their outer collection is stored)."""
    return [n for n in arranged_nodes(p).values() if n.op not in ("input", "enter")]


def read_key(n: Node, columns: list[str]) -> list[str]:
    """The columns a stateful node reads its inputs' arrangements by (``columns``, its
    input's: the whole row, unless its operator names them)."""
    o = OPERATORS[n.op]
    return list(n.args[o.read_by]) if o.read_by is not None else list(columns)


def reduce_spec(n: Node, columns: list[str]) -> tuple[list[str], Reducer]:
    """The key and the reducer of a reduce-family node (``distinct`` and ``threshold`` are
    reduces keyed by the whole row)."""
    return read_key(n, columns), OPERATORS[n.op].reducer(n)
