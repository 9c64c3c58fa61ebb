"""Evaluate a pipeline's graph: each node's changes from its inputs' changes.

Nodes are evaluated in declaration order (a topological order). ``None`` stands for "no
changes", so an operator whose inputs did not change costs nothing. The same walk, on
empty frames, checks the whole pipeline (columns, key types) before Spark does any work:
Spark analyses plans lazily, so building them runs no job.
"""

from __future__ import annotations

import numpy as np
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame

from ops import join as join_ops
from ops import linear
from ops import reduce_kernel as rk
from ops.context import RESERVED, EvalContext
from ops.pipeline import Node, Pipeline, PipelineError
from ops.reduce import reduce_changes

STATEFUL = {"join", "semijoin", "reduce", "distinct", "threshold"}


def arranged_inputs(p: Pipeline) -> dict[int, Node]:
    """Nodes whose old updates some stateful operator reads (by node id)."""
    out = {}
    for n in p.nodes:
        if n.op in STATEFUL:
            for i in n.inputs:
                out[i.id] = i
    return out


def uses(p: Pipeline) -> dict[int, int]:
    count: dict[int, int] = {}
    for n in p.nodes:
        for i in n.inputs:
            count[i.id] = count.get(i.id, 0) + 1
    return count


def node_key(n: Node, columns: list[str]) -> list[str]:
    """The key an operator's output is naturally arranged (and stored) by."""
    if n.op in ("reduce", "arrange"):
        return list(n.args["key"])
    if n.op in ("join", "semijoin"):
        return list(n.args["on"])
    if n.op == "output" and n.args.get("key"):
        return list(n.args["key"])
    if n.op == "output":
        return node_key(n.inputs[0], columns)
    return columns[:1]


def reduce_spec(n: Node, columns: list[str]) -> tuple[list[str], rk.Reducer]:
    if n.op == "reduce":
        return list(n.args["key"]), n.args["reducer"]
    if n.op == "distinct":
        return columns, rk.Threshold(lambda c: (np.asarray(c) > 0).astype(np.int64))
    return columns, rk.Threshold(n.args["fn"])


def evaluate(p: Pipeline, ctx: EvalContext, sources: dict[str, DataFrame | None]) -> dict[int, DataFrame | None]:
    """Each node's changes. ``sources`` maps input trace names to their changes."""
    out: dict[int, DataFrame | None] = {}
    for n in p.nodes:
        try:
            out[n.id] = _evaluate_node(n, ctx, out, sources)
        except AnalysisException as e:
            msg = str(e).splitlines()[0]
            raise PipelineError(f"{n.describe()}: {msg}") from None
        if out[n.id] is not None:
            bad = [c for c in ctx.data_columns(out[n.id]) if c in RESERVED or c.startswith("time_")]
            if bad:
                raise PipelineError(f"{n.describe()}: column name {bad[0]!r} is reserved; choose another")
        if ctx.progress and out[n.id] is not None and n.op not in ("input", "output"):
            ctx.progress(n.describe())
    return out


def _need_columns(n: Node, df: DataFrame, cols: list[str], ctx: EvalContext, what: str) -> None:
    have = ctx.data_columns(df)
    for c in cols:
        if c not in have:
            raise PipelineError(f"{n.describe()}: unknown column {c!r} in {what} (columns: {', '.join(have)})")


def _evaluate_node(n: Node, ctx: EvalContext, out: dict, sources: dict) -> DataFrame | None:
    ins = [out[i.id] for i in n.inputs]
    a = n.args
    if n.op == "input":
        return sources.get(a["trace"])
    if n.op in ("output", "arrange"):
        if n.op == "arrange" and ins[0] is not None:
            _need_columns(n, ins[0], a["key"], ctx, "arrange key")
        return ins[0]
    if n.op == "concat":
        present = [f for f in ins if f is not None]
        if present:
            names = [sorted(ctx.data_columns(f)) for f in present]
            if any(x != names[0] for x in names):
                raise PipelineError(f"{n.describe()}: collections to concat have different columns: {names}")
        return linear.concat(ctx, present) if present else None
    if n.op in ("join", "semijoin"):
        return _join(n, ctx, ins)
    if n.op in ("reduce", "distinct", "threshold"):
        return _reduce(n, ctx, ins[0])
    df = ins[0]
    if df is None:
        return None
    if n.op == "select":
        _need_columns(n, df, [c for c in a["columns"] if isinstance(c, str)], ctx, "select")
        return linear.select(ctx, df, a["columns"], a["exprs"])
    if n.op == "filter":
        return linear.filter_(ctx, df, a["condition"])
    if n.op == "flat_map":
        if a["keep"] is not None:
            _need_columns(n, df, a["keep"], ctx, "flat_map keep")
        return linear.flat_map(ctx, df, a["column"], a["expr"], a["keep"])
    if n.op == "negate":
        return linear.negate(ctx, df)
    if n.op == "consolidate":
        return linear.consolidate(ctx, df)
    raise PipelineError(f"{n.describe()}: unknown operator {n.op!r}")


def _join(n: Node, ctx: EvalContext, ins: list) -> DataFrame | None:
    on = n.args["on"]
    left, right = ins
    if left is not None and right is not None:
        _check_join_keys(n, ctx, left, right, on)
    arr = ctx.arrangement or (lambda node: None)
    left_arr, right_arr = arr(n.inputs[0]), arr(n.inputs[1])
    semi = n.op == "semijoin"
    if left is not None and right is not None and not semi:
        clash = (set(ctx.data_columns(left)) & set(ctx.data_columns(right))) - set(on)
        if clash:
            raise PipelineError(f"{n.describe()}: both sides have column(s) {sorted(clash)} besides the join key; rename one side with select")
    return join_ops.join_changes(ctx, on, left, right, left_arr, right_arr, semi=semi)


def _check_join_keys(n: Node, ctx: EvalContext, left: DataFrame, right: DataFrame, on: list[str]) -> None:
    if not on:
        raise PipelineError(f"{n.describe()}: give the key columns to join on")
    _need_columns(n, left, on, ctx, "join key (left side)")
    _need_columns(n, right, on, ctx, "join key (right side)")
    lt, rt = dict(left.dtypes), dict(right.dtypes)
    for k in on:
        if lt[k] != rt[k]:
            raise PipelineError(f"{n.describe()}: join key {k!r} is {lt[k]} on the left but {rt[k]} on the right; cast one side with select")


def _reduce(n: Node, ctx: EvalContext, df: DataFrame | None) -> DataFrame | None:
    if df is None:
        return None
    key, reducer = reduce_spec(n, ctx.data_columns(df))
    _need_columns(n, df, key, ctx, "reduce key")
    arr = ctx.arrangement(n.inputs[0]) if ctx.arrangement else None
    old = arr.old_for_keys(ctx, df, key) if arr is not None else None
    try:
        return reduce_changes(ctx, df, old, key, reducer)
    except (KeyError, ValueError, TypeError) as e:
        raise PipelineError(f"{n.describe()}: {e}") from None
