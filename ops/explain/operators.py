"""One sentence per operator: what it computes, in the pipeline's own names.

``ddcli explain`` prints one line per node of the graph; the sentence names the columns,
keys and expressions the pipeline file gave, and the collections it reads by their node
names (``select_3``), which the other parts of the explanation (arrangements, state traces,
a run's report) use too.
"""

from __future__ import annotations

import datetime

from ops.dataflow import reducers
from ops.dataflow.window_reducer import Window
from ops.dataflow.graph import Node, node_priority
from ops.dataflow.operators import OPERATORS


def summary(n: Node) -> str:
    """What node ``n`` computes, in one sentence: its operator's sentence (ops/dataflow/operators.py)
    with the node's inputs and arguments filled in."""
    ins = [i.name for i in n.inputs]
    fields = {k: _show(v) for k, v in n.args.items()}
    detail = _DETAILS.get(n.op)
    fields.update(ins=_names(ins), in0=(ins + [""])[0], in1=(ins + ["", ""])[1], loop=_loop_name(n),
                  detail=detail(n) if detail is not None else "")
    return OPERATORS[n.op].sentence.format(**fields)


def _show(v):
    """An argument as a sentence names it: columns as a list, numbers as they are."""
    if isinstance(v, (list, tuple)):
        return _names(v)
    return v if isinstance(v, (int, float)) else _expr(v)


def _loop_name(n: Node) -> str:
    """The loop a node is (a ``loop``), leaves (a ``leave`` reads its loop) or lives in."""
    for m in [n, *n.inputs]:
        if "scope" in m.args:
            return m.args["scope"].name
    return n.scope.name if n.scope is not None else ""


def _output_key(n: Node) -> str:
    return f", keyed by {_names(n.args['key'])}" if n.args.get("key") else ""


def _selected(n: Node) -> str:
    a = n.args
    parts = [f"keeps {_names(a['columns'])}"] if a["columns"] else []
    parts += [f"{k} = {_expr(e)}" for k, e in a["exprs"].items()]
    return "; ".join(parts)


def _next_value(n: Node) -> str:
    result = n.args.get("result")
    pri = f"; enters at iteration {_expr(node_priority(n))}" if node_priority(n) is not None else ""
    return f"{result.name if result is not None else '(never set)'}{pri}"


def _entered_at(n: Node) -> str:
    return f" at iteration {_expr(node_priority(n))}" if node_priority(n) is not None else ""


#: The part of an operator's sentence its arguments shape beyond naming them (``{detail}``).
_DETAILS = {
    "output": _output_key,
    "select": _selected,
    "reduce": lambda n: _reducer(n.args["reducer"], n.args["key"]),
    "variable": _next_value,
    "enter": _entered_at,
    "moments": lambda n: " (one moment later)" if n.args.get("neu") else "",
}


def _reducer(r, key) -> str:
    per = f"per {_names(key)}" if key else "over all rows"
    name = getattr(r, "name", None)
    if isinstance(r, reducers.Count):
        return f"counts the rows {per}, as {name}"
    if isinstance(r, reducers.CountDistinct):
        return f"counts the distinct rows {per}, as {name}"
    if isinstance(r, reducers.Sum):
        return f"sums {r.col} {per}, as {name}"
    if isinstance(r, reducers.Min):
        return f"the least {r.col} {per}, as {name}"
    if isinstance(r, reducers.Max):
        return f"the greatest {r.col} {per}, as {name}"
    if isinstance(r, reducers.TopK):
        order = ", ".join(f"{c}{' descending' if d == 'descending' else ''}" for c, d in zip(r.order_by, r.directions))
        return f"the first {r.k} rows by {order} {per}"
    if isinstance(r, reducers.Agg):
        parts = [f"{name} = {kind}({col or ''})" for name, (kind, col) in r.components.items()]
        empty = " (one row also over no rows: counts 0, the rest null)" if r.when_empty else ""
        return f"{', '.join(parts)} {per}, in one reduce{empty}"
    if isinstance(r, Window):
        order = ", ".join(f"{c}{' descending' if d == 'descending' else ''}" for c, d in zip(r.order_by, r.directions))
        parts = [f"{name} = {_window_function(f)}" for name, f in r.functions.items()]
        within = f"partition by {_names(key)}" if key else "one partition"
        return f"every row with {', '.join(parts)} over ({within}, order by {order or '(none)'}), " \
               f"{_window_upkeep(r)},"
    if isinstance(r, reducers.PerKey):
        return f"a function of each key's rows {per} ({getattr(r.fn, '__name__', 'user function')})"
    return f"{type(r).__name__} {per}"


def _window_upkeep(r) -> str:
    """Which rows a change recomputes (ops/reduce/window_sweep.py; loops: the whole partition)."""
    reach = r.reach()
    if reach.prefix and reach.suffix:
        return "a change recomputing its whole partition"
    if reach.prefix:
        return "a change recomputing the rows from it to its partition's end"
    if reach.suffix:
        return "a change recomputing the rows from its partition's start to it"
    near = []
    if reach.fwd:
        near.append(f"{reach.fwd} before")
    if reach.back:
        near.append(f"{reach.back} after")
    if reach.values:
        near.append("those whose RANGE frame by value holds its value")
    return f"a change recomputing its own row{' and the ' + ' and '.join(near) if near else ''}"


def _window_function(f) -> str:
    """A window function as SQL writes it: ``lag(x, 1, 0)``, ``sum(x) rows 2 preceding``."""
    args = [f.column or ("*" if f.kind == "count" else "")]
    if f.kind in ("lag", "lead"):
        args += [str(f.offset)] + ([repr(f.default)] if f.default is not None else [])
        return f"{f.kind}({', '.join(args)})"
    if f.kind in ("row_number", "rank", "dense_rank"):
        return f"{f.kind}()"
    return f"{f.kind}({args[0]}) {frame_sql(f.frame)}"


def frame_sql(frame) -> str:
    """A window frame as SQL writes it: ``rows 2 preceding`` (to the current row), ``rows
    between 2 preceding and 1 following``."""
    if frame.following == 0 and type(frame.following) is int and (
            frame.preceding is None or (frame.unit == "rows" and frame.preceding >= 0)):
        return f"{frame.unit} {'unbounded' if frame.preceding is None else frame.preceding} preceding"

    def bound(n, side):
        if n is None:
            return f"unbounded {side}"
        if n == n * 0:
            return "current row"
        other = "following" if side == "preceding" else "preceding"
        return f"{_offset(n)} {side}" if n > n * 0 else f"{_offset(-n)} {other}"
    return f"{frame.unit} between {bound(frame.preceding, 'preceding')} and {bound(frame.following, 'following')}"


def _offset(n) -> str:
    """A frame offset as SQL writes it: a number, or an interval in days or seconds."""
    if isinstance(n, datetime.timedelta):
        whole_days = n % datetime.timedelta(days=1) == datetime.timedelta(0)
        return f"interval {n.days} day" if whole_days else f"interval {n.total_seconds():g} second"
    return str(n)


def _names(cols) -> str:
    return ", ".join(str(c) for c in cols) if cols else "(none)"


def _expr(e) -> str:
    """An expression as the file wrote it: SQL text as is, a Spark column by its repr."""
    return e if isinstance(e, str) else f"<{type(e).__name__}>"
