"""Check a pipeline's columns against the store's schemas before the JVM starts.

Spark takes seconds to start (tens on a busy machine); a typo in a column name should not
wait for it. The input traces' schemas are in the store, so the columns of every
collection follow from the operators: this walk checks every column an operator names
(``by=``, ``on=``, ``column=``, ``order_by=``, ``keep=``, plain names in ``select``) and
join key types, with the same messages as the check Spark does later
(``ops/run/evaluate.py``). Where columns cannot be known without Spark (a loop, a user's
per-key function, a calculus operator), the walk stops following that collection and
leaves it to Spark's check.
"""

from __future__ import annotations

import re

import pyarrow as pa

from ops.dataflow import reducers
from ops.dataflow.graph import Graph, Node
from ops.dataflow.window_reducer import Window
from ops.dataflow.operators import JOIN, LOOP, OPERATORS
from ops.errors import PipelineError

Columns = dict  # column name -> pa.DataType, or None when only the name is known

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Spark's names for the types a trace holds (the join key message uses them, as Spark does)
_SPARK_TYPES = {pa.int64(): "bigint", pa.int32(): "int", pa.int16(): "smallint", pa.int8(): "tinyint",
                pa.float64(): "double", pa.float32(): "float", pa.string(): "string", pa.bool_(): "boolean",
                pa.date32(): "date", pa.binary(): "binary"}


def _need(n: Node, have: Columns, cols, what: str) -> None:
    for c in cols:
        if isinstance(c, str) and c not in have:
            raise PipelineError(f"{n.describe()}: unknown column {c!r} in {what} (columns: {', '.join(have)})")


def _reduce(n: Node, cols: Columns) -> Columns | None:
    key = list(n.args["key"])
    _need(n, cols, key, "reduce key")
    reducer = n.args["reducer"]
    values = [c for c in cols if c not in key]
    named = getattr(reducer, "col", None)
    if isinstance(reducer, (reducers.Sum, reducers.Min, reducers.Max)) and named not in values:
        raise PipelineError(f"{n.describe()}: column {named!r} is not a value column (value columns: {values})")
    if isinstance(reducer, reducers.TopK):
        for c in reducer.order_by:
            if c not in values:
                raise PipelineError(f"{n.describe()}: column {c!r} is not a value column (value columns: {values})")
        return dict(cols)
    out = {k: cols[k] for k in key}
    if isinstance(reducer, (reducers.Count, reducers.CountDistinct)):
        out[reducer.name] = pa.int64()
    elif isinstance(reducer, reducers.Sum):
        t = cols[named]
        numeric = t is not None and (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                                     or pa.types.is_decimal(t))
        out[reducer.name] = reducer.output_schema(pa.schema([(named, t)])).field(0).type if numeric else None
    elif isinstance(reducer, (reducers.Min, reducers.Max)):
        out[reducer.name] = cols[named]
    elif isinstance(reducer, reducers.Agg):
        out.update(_agg(n, reducer, cols, key, values))
    elif isinstance(reducer, Window):
        out.update(_window(n, reducer, cols, key, values))
    else:
        return None  # a user's per-key function: its columns come from calling it
    return out


def _agg(n: Node, reducer: "reducers.Agg", cols: Columns, key: list[str], values: list[str]) -> Columns:
    """The columns of ``agg``: each component's column a value column, its type one the
    aggregate takes, its name no key column."""
    out = {}
    for name, (kind, col) in reducer.components.items():
        if name in key:
            raise PipelineError(f"{n.describe()}: aggregate {name!r} has the name of a key column; rename it")
        if col is not None and col not in values:
            raise PipelineError(f"{n.describe()}: {name}={kind}({col!r}): {col!r} is not a value column "
                                f"(value columns: {values})")
        if col is not None and cols[col] is None:
            out[name] = None
            continue
        one = reducers.Agg({name: reducers.Aggregate(kind, col)})
        try:
            out[name] = one.output_schema(pa.schema([] if col is None else [(col, cols[col])])).field(name).type
        except (TypeError, ValueError) as e:
            raise PipelineError(f"{n.describe()}: {name}={kind}({col!r}): {e}") from None
    return out


def _window(n: Node, reducer: Window, cols: Columns, key: list[str], values: list[str]) -> Columns:
    """The columns of ``window``: the value columns and one per window function, each
    named by no input column and over a value column of a type it takes."""
    for name in reducer.functions:
        if name in key or name in values:
            raise PipelineError(f"{n.describe()}: window column {name!r} has the name of an input column; rename it")
        f = reducer.functions[name]
        if f.column in key:
            raise PipelineError(f"{n.describe()}: {name}={f.kind}({f.column!r}): {f.column!r} is a partition column; "
                                f"use a copy of it (select(..., {f.column}_copy={f.column!r}))")
    if any(cols[v] is None for v in values):  # a type only Spark knows: names only, Spark checks the rest
        for c in reducer.order_by + [f.column for f in reducer.functions.values() if f.column is not None]:
            if c not in values:
                raise PipelineError(f"{n.describe()}: column {c!r} is not a value column (value columns: {values})")
        return {**{v: cols[v] for v in values}, **{name: None for name in reducer.functions}}
    try:
        schema = reducer.output_schema(pa.schema([(v, cols[v]) for v in values]))
    except (TypeError, ValueError) as e:
        raise PipelineError(f"{n.describe()}: {e}") from None
    return {f.name: f.type for f in schema}


def _join(n: Node, left: Columns, right: Columns) -> Columns:
    on = list(n.args["on"])
    if not on:
        raise PipelineError(f"{n.describe()}: give the key columns to join on")
    _need(n, left, on, "join key (left side)")
    _need(n, right, on, "join key (right side)")
    for k in on:
        lt, rt = _SPARK_TYPES.get(left[k]), _SPARK_TYPES.get(right[k])
        if lt and rt and lt != rt:
            raise PipelineError(f"{n.describe()}: join key {k!r} is {lt} on the left but {rt} on the right; "
                                f"cast one side with select")
    if n.op == "semijoin":
        return dict(left)
    clash = (set(left) & set(right)) - set(on)
    if clash:
        raise PipelineError(f"{n.describe()}: both sides have column(s) {sorted(clash)} besides the join key; "
                            f"rename one side with select")
    return {**left, **right}


def _node(n: Node, ins: list[Columns | None], schemas: dict[str, pa.Schema], expression_type) -> Columns | None:
    a = n.args
    if n.op == "input":
        s = schemas.get(a["trace"])
        for f in s or []:
            if pa.types.is_timestamp(f.type) and f.type.unit == "ns":
                # a trace made before ingest kept timestamps to the microsecond
                raise PipelineError(f"{n.describe()}: column {f.name!r} of trace {a['trace']!r} is {f.type}, "
                                    f"which Spark cannot read (it keeps timestamps to the microsecond); "
                                    f"ingest it into a new trace, which stores microseconds")
        return None if s is None else {f.name: f.type for f in s}
    o = OPERATORS[n.op]
    if o.carries is not None:  # the collection it passes on (a leave's first input is its loop)
        ins = ins[o.carries:]
    if any(c is None for c in ins):
        return None
    if o.same_columns:
        if n.op == "arrange":
            _need(n, ins[0], a["key"], "arrange key")
        return dict(ins[0])
    if n.op == "select":
        if not all(isinstance(c, str) and _PLAIN.match(c) for c in a["columns"]):
            return None  # Spark columns or expressions among the plain names
        _need(n, ins[0], a["columns"], "select")
        typed = expression_type or (lambda e, cols: None)
        return {**{c: ins[0][c] for c in a["columns"]}, **{name: typed(e, ins[0]) for name, e in a["exprs"].items()}}
    if n.op == "flat_map":
        if a["keep"] is not None:
            _need(n, ins[0], a["keep"], "flat_map keep")
        keep = a["keep"] if a["keep"] is not None else [c for c in ins[0] if c != a["column"]]
        return {**{c: ins[0][c] for c in keep}, a["column"]: None}
    if n.op == "concat":
        names = [sorted(c) for c in ins]
        if any(x != names[0] for x in names):
            raise PipelineError(f"{n.describe()}: collections to concat have different columns: {names}")
        return dict(ins[0])
    if o.family == JOIN:
        return _join(n, ins[0], ins[1])
    if n.op == "reduce":
        return _reduce(n, ins[0])
    return None  # loops and calculus operators: Spark's check covers them


def node_columns(p: Graph, schemas: dict[str, pa.Schema], *, in_loops: bool = False,
                 expression_type=None) -> dict[int, Columns | None]:
    """Each node's columns (node id -> name -> type, None where unknown), found from the
    input schemas alone; a column mistake found on the way is a :class:`PipelineError`.

    ``in_loops``: follow collections into loops too (a variable has the columns of its
    initial collection; Spark checks a loop's body against them anyway).
    ``expression_type(expression, columns)``: the type of a computed column, or None."""
    cols: dict[int, Columns | None] = {}
    for n in p.nodes:  # declaration order: every node comes after its inputs
        if n.op == "loop" or (not in_loops and (n.scope is not None or OPERATORS[n.op].family == LOOP)):
            cols[n.id] = None
            continue
        try:
            cols[n.id] = _node(n, [cols.get(i.id) for i in n.inputs], schemas, expression_type)
        except AttributeError:  # a reducer this walk does not know: Spark's check covers it
            cols[n.id] = None
    return cols


def precheck(p: Graph, schemas: dict[str, pa.Schema]) -> None:
    """Raise :class:`PipelineError` for a column mistake found from the input schemas alone."""
    node_columns(p, schemas)
