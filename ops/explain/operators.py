"""One sentence per operator: what it computes, in the pipeline's own names.

``ddcli explain`` prints one line per node of the graph; the sentence names the columns,
keys and expressions the pipeline file gave, and the collections it reads by their node
names (``select_3``), which the other parts of the explanation (arrangements, state traces,
a run's report) use too.
"""

from __future__ import annotations

from ops.dataflow import reducers
from ops.dataflow.window_reducer import Window
from ops.dataflow.graph import Node, node_priority


def summary(n: Node) -> str:
    """What node ``n`` computes, in one sentence."""
    a = n.args
    ins = [i.name for i in n.inputs]
    op = n.op
    if op == "input":
        return f"reads trace {a['trace']}: its new updates, and its history as an arrangement"
    if op == "output":
        key = f", keyed by {_names(a['key'])}" if a.get("key") else ""
        return f"writes {ins[0]} to trace {a['trace']}{key}"
    if op == "select":
        parts = [f"keeps {_names(a['columns'])}"] if a["columns"] else []
        parts += [f"{k} = {_expr(e)}" for k, e in a["exprs"].items()]
        return f"from {ins[0]}: " + "; ".join(parts)
    if op == "filter":
        return f"keeps the rows of {ins[0]} where {_expr(a['condition'])}"
    if op == "flat_map":
        return f"one row of {ins[0]} per element of {_expr(a['expr'])}, as column {a['column']}"
    if op == "concat":
        return f"the sum of {_names(ins)} (multiplicities add)"
    if op == "negate":
        return f"{ins[0]} with every multiplicity negated"
    if op == "consolidate":
        return f"{ins[0]} with updates of equal row and time summed"
    if op == "join":
        return f"joins {ins[0]} with {ins[1]} on {_names(a['on'])} (reads both sides' arrangements)"
    if op == "semijoin":
        return f"the rows of {ins[0]} whose {_names(a['on'])} is in {ins[1]} (reads both sides' arrangements)"
    if op == "reduce":
        return f"{_reducer(a['reducer'], a['key'])} in {ins[0]} (reads its arrangement)"
    if op == "distinct":
        return f"every row of {ins[0]} present, once (reads its arrangement)"
    if op == "threshold":
        return f"every row of {ins[0]} with its multiplicity through a function (reads its arrangement)"
    if op == "arrange":
        return f"one indexed copy of {ins[0]} by {_names(a['key'])}, shared by the operators that read it"
    return _loop_summary(n, ins) or _calculus_summary(n, ins) or f"{op} of {_names(ins)}"


def _loop_summary(n: Node, ins: list[str]) -> str | None:
    a, op = n.args, n.op
    if op == "loop":
        return f"loop {a['scope'].name}: the fixed point of its body, at most {a['max_rounds']:,} rounds"
    if op == "variable":
        result = a.get("result")
        pri = f"; enters at iteration {_expr(node_priority(n))}" if node_priority(n) is not None else ""
        return (f"variable of loop {n.scope.name}: starts from {ins[0]}, next value "
                f"{result.name if result is not None else '(never set)'}{pri}")
    if op == "enter":
        at = f" at iteration {_expr(node_priority(n))}" if node_priority(n) is not None else ""
        return f"brings {ins[0]} into loop {n.scope.name}{at}"
    if op == "leave":
        return f"brings {ins[1]} out of loop {n.inputs[0].args['scope'].name}"
    return None


def _calculus_summary(n: Node, ins: list[str]) -> str | None:
    a, op = n.args, n.op
    if op == "differentiate":
        return f"the changes of {ins[0]}, each at the moment it happens"
    if op == "integrate":
        return f"{ins[0]} back in ordinary time"
    if op == "moments":
        return f"{ins[0]} in moment time" + (" (one moment later)" if a.get("neu") else "")
    if op == "as_of_pending":
        return f"the updates of {ins[0]} waiting for their as-of join on {_names(a['on'])}"
    if op == "as_of_join":
        return f"each update of {ins[0]} joined with {ins[1]} as it was at the update's time, on {_names(a['on'])}"
    if op == "delta_join":
        return f"the join of {_names(ins)} on shared variables, keeping no intermediate results"
    return None


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
        return f"{', '.join(parts)} {per}, in one reduce"
    if isinstance(r, Window):
        order = ", ".join(f"{c}{' descending' if d == 'descending' else ''}" for c, d in zip(r.order_by, r.directions))
        parts = [f"{name} = {_window_function(f)}" for name, f in r.functions.items()]
        within = f"partition by {_names(key)}" if key else "one partition"
        return f"every row with {', '.join(parts)} over ({within}, order by {order or '(none)'}), " \
               f"a changed partition recomputed whole,"
    if isinstance(r, reducers.PerKey):
        return f"a function of each key's rows {per} ({getattr(r.fn, '__name__', 'user function')})"
    return f"{type(r).__name__} {per}"


def _window_function(f) -> str:
    """A window function as SQL writes it: ``lag(x, 1, 0)``, ``sum(x) rows 2 preceding``."""
    args = [f.column or ("*" if f.kind == "count" else "")]
    if f.kind in ("lag", "lead"):
        args += [str(f.offset)] + ([repr(f.default)] if f.default is not None else [])
        return f"{f.kind}({', '.join(args)})"
    if f.kind in ("row_number", "rank", "dense_rank"):
        return f"{f.kind}()"
    start = "unbounded" if f.frame.preceding is None else str(f.frame.preceding)
    return f"{f.kind}({args[0]}) {f.frame.unit} {start} preceding"


def _names(cols) -> str:
    return ", ".join(str(c) for c in cols) if cols else "(none)"


def _expr(e) -> str:
    """An expression as the file wrote it: SQL text as is, a Spark column by its repr."""
    return e if isinstance(e, str) else f"<{type(e).__name__}>"
