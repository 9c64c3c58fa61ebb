"""A small run evaluated in the driver, over Arrow: no Spark job.

On Spark, a run pays a few jobs per stateful operator (0.03-0.4 s each here) however
small its change: a refresh of a few thousand rows through a pipeline of a dozen
operators would cost seconds of fixed cost and almost no work. A run whose new updates
are few (at most ``DDCLI_DRIVER_ROWS``) and whose operators all have an Arrow form is
evaluated in this process instead, node by node in the pipeline's order:

* linear operators as DuckDB SQL, their Spark SQL expressions translated where both
  engines evaluate them alike (``ops/run/duckdb_expressions.py``);
* joins and reduces by the very code Spark's tasks run on a small change
  (``ops/operators/join_task.py``, ``ops/reduce/budget.py``): the old updates of the keys
  the change touches read from the arrangements' key-sorted layers with DuckDB, a
  reduce's summarised where it has a summary;
* every target's layer file written here, as a join's or a loop's task writes its own
  (``ops/io/write.py: write_table_files``); the run commits them as usual.

Whatever does not fit — an operator without an Arrow form, an expression outside the
common grammar, an output with changes pending from earlier runs, an intermediate
collection far larger than the change, an expression DuckDB refuses on the data — leaves
the run to Spark before anything is written, which then computes (or refuses) it as ever.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.columnar import matchable_rows
from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, reduce_spec, scope_nodes
from ops.io.read import layer_table
from ops.io.write import write_table_files
from ops.loops.task import conform, consolidate, negated, table_sql
from ops.operators.join_direct import task_schema
from ops.operators.join_sweep import JoinSpec
from ops.operators.join_task import TooManyLiveRows, as_side, join_task
from ops.reduce.budget import in_shares, reduce_with_lookup, task_rows
from ops.reduce.kernel import reduce_delta
from ops.reduce.old_updates import OldLookup
from ops.reduce.operator import output_arrow_schema
from ops.reduce.summaries.insertions import summarisable
from ops.run.duckdb_expressions import duckdb_sql
from storage.blobs.resolve import duckdb_connect
from storage.layer import update_schema
from storage.lattice import time_columns
from storage.sql.duck import quote

#: New updates up to which a run is evaluated in the driver (``DDCLI_DRIVER_ROWS``; 0: never).
DRIVER_ROWS = 100_000
#: An intermediate collection of more than this many times the limit leaves the run to Spark.
GROWTH = 10

_LINEAR = {"input", "output", "arrange", "select", "filter", "concat", "negate", "consolidate"}
_STATEFUL = {"join", "semijoin", "reduce", "distinct", "threshold"}


class Unfit(Exception):
    """The run leaves the driver for Spark (nothing was written)."""


def driver_rows() -> int:
    return max(0, int(os.environ.get("DDCLI_DRIVER_ROWS", DRIVER_ROWS)))


@dataclass
class DriverPlan:
    """What the driver evaluates: the pipeline's nodes in order, each select's and filter's
    DuckDB SQL, and the limit on any collection's rows."""

    nodes: list[Node]
    sql: dict[int, dict[str, str]]  # select: output name -> SQL; filter: {"": condition}
    limit: int


def plan_in_driver(p: Pipeline, schemas: dict[int, pa.Schema], arranged: dict, delta_rows: int) -> DriverPlan | None:
    """The driver's plan of a run of ``delta_rows`` new updates, or None when it takes Spark."""
    limit = driver_rows()
    if delta_rows > limit:
        return None
    nodes = scope_nodes(p, None)
    if len(nodes) != len(p.nodes):  # loops
        return None
    sql: dict[int, dict[str, str]] = {}
    for n in nodes:
        if n.op not in _LINEAR | _STATEFUL or n.id not in schemas:
            return None
        if n.op in _STATEFUL and any(i.op != "input" and i.id not in arranged for i in n.inputs):
            return None
        src = schemas[n.inputs[0].id] if n.inputs else None
        if n.op == "select":
            if any(not isinstance(c, str) for c in n.args["columns"]):
                return None
            sql[n.id] = {name: duckdb_sql(e, src) for name, e in n.args["exprs"].items()}
        elif n.op == "filter":
            sql[n.id] = {"": duckdb_sql(n.args["condition"], src)}
        if any(s is None for s in sql.get(n.id, {}).values()):
            return None
    return DriverPlan(nodes, sql, max(1, limit) * GROWTH)


@dataclass
class DriverRun:
    """What evaluating one run in the driver needs besides its plan: the data schema of
    every node, the time dimension, each input trace's new layer files, each arranged
    node's stored layer files (``stored_files(node)``), and the least time when the
    outputs start (a first run: where a global aggregate's row of an empty input begins)."""

    schemas: dict[int, pa.Schema]
    d: int
    sources: dict[str, tuple[list[str], pa.Schema]]  # trace -> (new layer files, update schema)
    stored_files: Callable[[Node], list[str]]
    origin: tuple[int, ...] | None


def evaluate_in_driver(plan: DriverPlan, run: DriverRun) -> dict[int, pa.Table | None]:
    """Every node's changes (None: none), or :class:`Unfit`."""
    import duckdb

    con = duckdb_connect([])
    frames: dict[int, pa.Table | None] = {}
    try:
        for n in plan.nodes:
            ins = [frames.get(i.id) for i in n.inputs]
            try:
                out = _EVALUATORS[n.op](n, ins, run, plan, con)
                if out is not None:  # as Spark types it (a value that does not fit: Spark's answer)
                    out = conform(out, update_schema(run.schemas[n.id], run.d))
            except (duckdb.Error, pa.ArrowException) as e:  # e.g. a cast of a value that does not convert
                raise Unfit(f"{n.describe()}: {e}") from None
            if out is not None and out.num_rows > plan.limit:
                raise Unfit(f"{n.describe()}: {out.num_rows:,} changes")
            frames[n.id] = out if out is not None and out.num_rows else None
    finally:
        con.close()
    return frames


def write_in_driver(frames: dict[int, pa.Table | None], specs: dict[str, tuple[Node, dict]]) -> dict[str, list[dict]]:
    """Each target's layer files (``specs``: trace -> (node, ``write_table_files``
    arguments)), written here; the ``META_SCHEMA`` rows of each trace's files."""
    written: dict[str, list[dict]] = {}
    for tname, (node, spec) in specs.items():
        table = frames.get(node.id)
        if table is None:
            continue
        rows = [r for meta in write_table_files(table, **spec) for r in meta.to_pylist()]
        if rows:
            written[tname] = rows
    return written


# ---------------------------------------------------------------- each operator over Arrow


def _input(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    files, schema = run.sources.get(n.args["trace"], ([], None))
    tables = [layer_table(f, schema) for f in files]
    return pa.concat_tables(tables) if tables else None


def _passed_on(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    return ins[0]


def _tail(run: DriverRun) -> list[str]:
    return [quote(c) for c in time_columns(run.d) + ["diff"]]


def _select(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    if ins[0] is None:
        return None
    t, exprs = ins[0], plan.sql[n.id]
    refs = {name: _column_reference(e) for name, e in exprs.items()}
    kept = list(n.args["columns"]) + time_columns(run.d) + ["diff"]
    distinct = len(set(kept) | set(refs)) == len(kept) + len(refs)
    if distinct and set(kept) | set(refs.values()) <= set(t.column_names):  # columns kept or renamed: no query
        return pa.table({c: t.column(c) for c in n.args["columns"]}
                        | {name: t.column(ref) for name, ref in refs.items()}
                        | {c: t.column(c) for c in kept[len(n.args["columns"]):]})
    items = [quote(c) for c in n.args["columns"]]
    items += [f"({e}) AS {quote(name)}" for name, e in plan.sql[n.id].items()]
    return table_sql(con, f"SELECT {', '.join(items + _tail(run))} FROM t", ins[0])


def _column_reference(sql: str) -> str | None:
    """The column a DuckDB expression only names (``"c"``), else None."""
    m = _QUOTED.match(sql)
    return m.group(1).replace('""', '"') if m else None


_QUOTED = re.compile(r'^"((?:[^"]|"")+)"$')


def _filter(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    if ins[0] is None:
        return None
    return table_sql(con, f"SELECT * FROM t WHERE ({plan.sql[n.id]['']})", ins[0])


def _concat(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    schema = update_schema(run.schemas[n.id], run.d)
    present = [conform(t, schema) for t in ins if t is not None]
    return pa.concat_tables(present) if present else None


def _negate(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    return None if ins[0] is None else negated(ins[0])


def _consolidate(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    return None if ins[0] is None else consolidate(ins[0])


def _join(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    """``join`` and ``semijoin``: the join task's sweep of both sides' changes and the old
    updates of the keys they touch."""
    on = list(n.args["on"])
    left, right = ins
    if not n.args.get("nulls_equal", False):  # a null key matches nothing
        left, right = matchable_rows(left, on), matchable_rows(right, on)
    if left is None and right is None:
        return None
    ls, rs = (run.schemas[i.id] for i in n.inputs)
    spec = JoinSpec(tuple(on), tuple(c for c in ls.names if c not in on),
                    () if n.op == "semijoin" else tuple(c for c in rs.names if c not in on), run.d)
    schema = task_schema(spec, (update_schema(ls, run.d), update_schema(rs, run.d)))
    batches = [b for side, t in enumerate((left, right)) if t is not None
               for b in as_side(t, schema, side, new=True).to_batches()]
    lookup = tuple(run.stored_files(i) for i in n.inputs)
    try:  # the driver holds what a task would, or as much as the run may make
        out = list(join_task(batches, spec, max(task_rows(), plan.limit), lookup))
    except TooManyLiveRows as e:  # Spark's join takes a hot key in slices of time
        raise Unfit(f"{n.describe()}: {e}") from None
    return pa.Table.from_batches(out) if out else None


def _reduce(n: Node, ins: list, run: DriverRun, plan: DriverPlan, con) -> pa.Table | None:
    """``reduce``, ``distinct`` and ``threshold``: the reduce task's kernel over the change
    and its keys' old updates (or their summary); a global aggregate with SQL's row of an
    empty input as ``ops/run/evaluate.py`` gives it."""
    t, src = ins[0], run.schemas[n.inputs[0].id]
    key, reducer = reduce_spec(n, src.names)
    out = None
    if t is not None:
        values = [c for c in src.names if c not in key]
        values_schema = pa.schema([src.field(v) for v in values])
        out_arrow = output_arrow_schema(pa.schema([src.field(k) for k in key]), reducer.output_schema(values_schema),
                                        run.d)
        new = t.append_column("_new", pa.array(np.ones(t.num_rows, bool)))
        files = run.stored_files(n.inputs[0])
        if not files:  # nothing old: the kernel alone
            out = reduce_delta(new, key, values, run.d, reducer)
        else:
            try:
                out = reduce_with_lookup(new, files, key, values, run.d, reducer, out_arrow,
                                         summary=summarisable(reducer, values_schema, run.d, False),
                                         budget=task_rows(), shares_ok=in_shares(reducer, values_schema))
            finally:
                OldLookup.task_ended()
        out = out if out.num_rows else None
    if getattr(reducer, "when_empty", False):
        out = _when_empty(n, out, run)
    return out


def _when_empty(n: Node, changes: pa.Table | None, run: DriverRun) -> pa.Table | None:
    """The reduce's changes, minus the empty row wherever its row comes and goes, plus the
    empty row at the origin (``ops/run/evaluate.py: _when_empty``)."""
    schema = update_schema(run.schemas[n.id], run.d)
    empty = n.args["reducer"].empty_row()
    parts = []
    if changes is not None:
        changes = conform(changes, schema)
        k = changes.num_rows
        cols = [pa.array([empty[f.name]] * k, f.type) if f.name in empty else changes.column(f.name)
                for f in schema if f.name != "diff"]
        parts += [changes, pa.Table.from_arrays(cols + [pc.negate(changes.column("diff"))], schema=schema)]
    if run.origin is not None:
        data = [empty[f.name] for f in run.schemas[n.id]]
        parts.append(pa.Table.from_pylist([dict(zip(schema.names, data + list(run.origin) + [1]))], schema=schema))
    return pa.concat_tables(parts) if parts else None


_EVALUATORS = {
    "input": _input, "output": _passed_on, "arrange": _passed_on, "select": _select, "filter": _filter,
    "concat": _concat, "negate": _negate, "consolidate": _consolidate, "join": _join, "semijoin": _join,
    "reduce": _reduce, "distinct": _reduce, "threshold": _reduce,
}
