"""A loop in one task that reads every row it needs from layer files: a plain Spark job.

A loop that runs in one task (``ops/loops/local.py``) reads its arrangements' stored layer
files itself; what reached it through Spark were the run's new updates entering it. When
an entered collection is one of the run's inputs, or ``select`` and ``filter`` operators
over one that DuckDB evaluates as Spark does, the task reads the input's new layer files
and applies them itself (:func:`source_reads`, :func:`read_source`): entering a loop (a
new iteration coordinate, 0) commutes with both.

When nothing else reaches the task through Spark, and nothing of what it computes is
needed back as a frame (its outputs and its arrangements' state are written by the task
itself, and nothing else reads its leaves: :func:`frames_needed`), the task needs no
DataFrame at all: it runs as the one task of a plain Spark job (``ops/spark/one_task.py``),
which costs about half a DataFrame job's planning, code generation and output checkpoint
(ddcli bench small: node-set reach).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, node_priority
from ops.io.read import layer_table
from ops.loops.route import linear_task_node
from ops.loops.task import Body, LazyDuckDB, TaskNode, filter_rows, select_rows
from storage.lattice import time_columns
from storage.layer import update_schema


@dataclass
class SourceRead:
    """The new updates entering a loop, as its task reads them: the layer ``files`` of an
    input (``schema``: the input's updates in the loop's times), then ``chain`` (the
    ``select`` and ``filter`` operators between the input and the loop, in order)."""

    files: list[str]
    schema: pa.Schema
    chain: list[TaskNode] = field(default_factory=list)


def source_reads(p: Pipeline, enters: list[Node], files: dict[str, list[str]], schemas: dict, d: int
                 ) -> dict[int, SourceRead]:
    """Enter node id -> how the task reads the run's new updates entering through it, for
    each plain enter whose outer collection is an input of ``files`` (input trace -> the
    run's new layer files), or portable ``select``/``filter`` operators over one. ``d``:
    the loop's time dimension."""
    out = {}
    for e in enters:
        if node_priority(e) is not None:  # entered at their priorities: computed by Spark
            continue
        chain, n = [], e.inputs[0]
        while n.scope is None and n.op in ("select", "filter"):
            t = linear_task_node(n, schemas, {})
            if isinstance(t, str):
                break
            chain.append(t)
            n = n.inputs[0]
        if n.scope is None and n.op == "input" and n.args["trace"] in files:
            out[e.id] = SourceRead(list(files[n.args["trace"]]), update_schema(schemas[n.id], d), chain[::-1])
    return out


def read_source(src: SourceRead, schema: pa.Schema) -> pa.Table:
    """Inside the task: the updates ``src`` enters, as ``schema`` (the loop's update schema
    of the enter node)."""
    tables = [entered_layer_table(f, src.schema) for f in src.files]
    t = pa.concat_tables(tables) if tables else src.schema.empty_table()
    if src.chain:
        tcols = [c for c in src.schema.names if c == "time" or c.startswith("time_")]
        con = LazyDuckDB()  # (renames need none)
        try:
            for n in src.chain:
                t = select_rows(con, n, t, tcols) if n.op == "select" else filter_rows(con, n, t)
        finally:
            con.close()
    return t.select(schema.names).cast(schema)


def entered_layer_table(path: str, schema: pa.Schema) -> pa.Table:
    """A layer file of a collection outside the loop as the loop's update ``schema`` (inside
    a task): its time coordinates, then iteration 0 (``ops.loops.rounds.enter_frame``)."""
    inner = [f.name for f in schema if f.name == "time" or f.name.startswith("time_")]
    outer = time_columns(len(inner) - 1)
    data = [f for f in schema if f.name not in inner and f.name != "diff"]
    t = layer_table(path, pa.schema(data + [pa.field(c, pa.int64()) for c in outer] + [schema.field("diff")]))
    columns = {f.name: t.column(f.name) for f in data}
    columns.update({new: t.column(old) for old, new in zip(outer, inner)})
    columns[inner[-1]] = pa.array(np.zeros(t.num_rows, np.int64))
    columns["diff"] = t.column("diff")
    return pa.table(columns).select(schema.names).cast(schema)


def frames_needed(p: Pipeline, body: Body, writes: dict) -> bool:
    """Whether the driver needs any of the task's results as a frame: a leave something
    other than the outputs the task writes reads, or an arranged node's processed updates
    the task does not write as its state (``writes``: ``ops.loops.local._writes_in_task``)."""
    for leave, _ in body.leaves:
        for n in p.nodes:
            if any(i.id == leave for i in n.inputs) and not (n.op == "output" and ("leave", leave) in writes):
                return True
    return any(t.arranged and t.op != "enter" and ("rec", t.id) not in writes for t in body.nodes)
