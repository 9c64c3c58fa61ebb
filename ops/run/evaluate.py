"""Evaluate a pipeline's graph: each node's changes from its inputs' changes.

Nodes of one scope (the pipeline itself, or a loop) are evaluated in topological order.
``None`` stands for "no changes", so an operator whose inputs did not change costs
nothing. The same walk, on empty frames, checks the whole pipeline (columns, key types,
loop bodies) before Spark does any work: Spark analyses plans lazily, so building them
runs no job.

A :class:`Runtime` holds what persists across the batches of one evaluation: the
arrangement of every collection some stateful operator reads, with what earlier runs
stored and what this run processed so far.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame

from ops.operators import join as join_ops
from ops.operators import linear
from ops.reduce import kernel as rk
from ops.operators.arrangement import Arrangement, LiveArrangement
from ops.operators.context import RESERVED, EvalContext
from ops.dataflow.builder import Node, Pipeline, PipelineError, Scope
from ops.run.progress import RunProgress
from ops.reduce.operator import SPLIT_ROWS, reduce_changes, two_stage
from ops.reduce.budget import task_rows
from ops.dataflow.calculus import CALCULUS_OPS, evaluate_calculus  # issue 5


STATEFUL = {"join", "semijoin", "reduce", "distinct", "threshold",
            "as_of_join", "delta_join"}  # issue 5: calculus operators whose inputs are arranged


def arranged_nodes(p: Pipeline) -> dict[int, Node]:
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
        if n.op in STATEFUL:
            for i in n.inputs:
                mark(i)
    return out


def uses(p: Pipeline) -> dict[int, int]:
    count: dict[int, int] = {}
    for n in p.nodes:
        for i in n.inputs:
            count[i.id] = count.get(i.id, 0) + 1
        if n.op == "variable" and n.args.get("result") is not None:
            r = n.args["result"]
            count[r.id] = count.get(r.id, 0) + 1
    return count


def scope_nodes(p: Pipeline, scope: Scope | None) -> list[Node]:
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
    """The key an operator's output is naturally arranged (and stored) by."""
    if n.op in ("reduce", "arrange"):
        return list(n.args["key"])
    if n.op in ("join", "semijoin"):
        return list(n.args["on"])
    if n.op == "output" and n.args.get("key"):
        return list(n.args["key"])
    if n.op in ("output", "enter", "variable"):
        return node_key(n.inputs[0], columns)
    if n.op == "leave":
        return node_key(n.inputs[1], columns)
    return columns[:1]


def reduce_spec(n: Node, columns: list[str]) -> tuple[list[str], rk.Reducer]:
    if n.op == "reduce":
        return list(n.args["key"]), n.args["reducer"]
    if n.op == "distinct":
        return columns, rk.Threshold(lambda c: (np.asarray(c) > 0).astype(np.int64))
    return columns, rk.Threshold(n.args["fn"])


class Runtime:
    """Arrangements and settings shared by every batch of one evaluation.

    ``stored(node)`` gives the arrangement earlier runs left for a node (None when
    evaluating from scratch or planning). ``planning`` evaluates every loop body once on
    empty frames, only to check the pipeline.
    """

    def __init__(self, p: Pipeline, stored: Callable[[Node], Arrangement | None], *, planning: bool = False,
                 progress: RunProgress | None = None, loop_stats: list | None = None,
                 schemas: dict | None = None):
        self.p = p
        self.schemas = schemas  # node id -> data schema, as planned (ops/run/run.py: check_pipeline)
        self.loop_plans: dict = {}  # loop node id -> LoopPlan (ops/loops/plan.py)
        self.loop_paths: dict[str, dict] = {}  # loop name -> the path it took in this run, and why
        self.loop_stats = loop_stats  # when a list: one {loop, rounds, updates} per loop evaluated
        self.planning = planning
        self.progress = progress
        self.arranged = arranged_nodes(p)
        self.uses = uses(p)
        self.live: dict[int, LiveArrangement] = {}
        self.stored = stored
        self.feedback: dict[int, DataFrame | None] = {}  # loop variable -> this round's fed-back updates
        self.planned: dict[int, DataFrame | None] = {}  # planning: every node's (empty) frame
        self.key_partitioned: dict[int, list[str]] = {}  # frames hash-partitioned by these columns
        self.ran: list[Node] = []  # top-level stateful operators with changes in this run, in order
        # the first time coordinate every later read of this batch's loop state is at or
        # beyond (one-dimensional outer times; None: keep exact times): a partition-local
        # loop returns its processed updates advanced to it (ops/loops/local.py)
        self.record_floor: int | None = None
        # a folder every executor sees, for a resident loop's exchange on a cluster (None:
        # the store is not in a filesystem folder; local mode uses the machine's temporary folder)
        self.exchange_root: str | None = None

    def loop_plan(self, loop_node: Node):
        """How ``loop_node`` runs (ops/loops/plan.py), planned once per run."""
        if loop_node.id not in self.loop_plans:
            from ops.loops.plan import plan_loop
            self.loop_plans[loop_node.id] = plan_loop(self.p, loop_node, self.schemas)
        return self.loop_plans[loop_node.id]

    def arrangement(self, node: Node) -> LiveArrangement | None:
        if node.id not in self.arranged:
            return None
        if node.id not in self.live:
            if node.op == "enter":
                from ops.loops.rounds import entering
                self.live[node.id] = LiveArrangement(base=self.arrangement(node.inputs[0]), enter=entering(node))
            else:
                stored = self.stored(node)
                if stored is not None:
                    stored.in_loop = node.scope is not None or any(
                        n.op == "enter" and n.inputs[0] is node for n in self.p.nodes)
                self.live[node.id] = LiveArrangement(stored=stored)
        return self.live[node.id]

    def compact_to(self, first_time: int) -> None:
        """Between batches of a run: every later update's (first) time is >= ``first_time``,
        so what this run processed so far is advanced to it and consolidated."""
        for live in self.live.values():
            live.advance_processed(first_time)

    def record(self, scope_frames: dict[int, DataFrame | None], nodes: list[Node]) -> None:
        """Remember a batch's changes of arranged nodes as processed (old for later batches)."""
        for n in nodes:
            df = scope_frames.get(n.id)
            if self.planning or df is None or n.id not in self.arranged:
                continue  # (an input's changes count too: a run may come in several batches)
            self.arrangement(n).record(df)


def evaluate(p: Pipeline, ctx: EvalContext, sources: dict[str, DataFrame | None], runtime: Runtime) -> dict[int, DataFrame | None]:
    """Each node's changes for one batch of the pipeline's inputs (``sources`` by trace name)."""
    frames: dict[int, DataFrame | None] = {}
    evaluate_scope(p, None, ctx, frames, sources, runtime)
    return frames


def evaluate_scope(p: Pipeline, scope: Scope | None, ctx: EvalContext, frames: dict,
                   sources: dict, runtime: Runtime, preset: dict[int, DataFrame | None] | None = None) -> None:
    """Evaluate the nodes of ``scope`` into ``frames``; ``preset`` fixes some nodes' frames."""
    from ops.loops.rounds import evaluate_loop

    nodes = scope_nodes(p, scope)
    for n in nodes:
        if preset is not None and n.id in preset:
            frames[n.id] = preset[n.id]
            continue
        if n.op == "loop":
            frames.update(evaluate_loop(p, n, ctx, frames, runtime))
            continue
        if n.op == "leave":
            continue  # filled in by its loop
        try:
            frames[n.id] = _evaluate_node(n, ctx, frames, sources, runtime)
        except AnalysisException as e:
            msg = str(e).splitlines()[0]
            raise PipelineError(f"{n.describe()}: {msg}") from None
        df = frames[n.id]
        if df is not None and scope is not None and not runtime.planning and n.id in runtime.arranged \
                and n.op not in ("enter", "variable"):
            # computed once (while the round's feedback is computed): used by this round's
            # operators and, as old state, by every later round. A lazy local checkpoint
            # costs no job of its own and cuts the plan, so plans do not grow round by round.
            # Consolidated first: a join's changes at many epochs largely cancel (reach, 10^4
            # updates: 41 s -> 32-38 s), and Spark sums them before its shuffle.
            df = frames[n.id] = linear.consolidate(ctx, df).localCheckpoint(eager=False)
        if df is not None:
            seen: set[str] = set()
            bad = [c for c in df.columns if c in seen or seen.add(c)]  # e.g. a user column named diff
            bad += [c for c in ctx.data_columns(df) if c in RESERVED or c.startswith("time_")]
            if bad:
                raise PipelineError(f"{n.describe()}: column name {bad[0]!r} is reserved; choose another")
            if scope is None and not runtime.planning and n.op in STATEFUL:
                runtime.ran.append(n)  # reported with the writes that compute it (ops/run/progress.py)
    if runtime.planning:
        runtime.planned.update({n.id: frames.get(n.id) for n in nodes if n.op != "loop"})
    runtime.record(frames, nodes)


def _need_columns(n: Node, df: DataFrame, cols: list[str], ctx: EvalContext, what: str) -> None:
    have = ctx.data_columns(df)
    for c in cols:
        if c not in have:
            raise PipelineError(f"{n.describe()}: unknown column {c!r} in {what} (columns: {', '.join(have)})")


def _evaluate_node(n: Node, ctx: EvalContext, out: dict, sources: dict, runtime: Runtime) -> DataFrame | None:
    ins = [out.get(i.id) for i in n.inputs]
    a = n.args
    if n.op in CALCULUS_OPS:  # issue 5: ops/dataflow/calculus.py
        return evaluate_calculus(n, ctx, ins, runtime)
    if n.op == "input":
        return sources.get(a["trace"])
    if n.op in ("output", "arrange"):
        if n.op == "arrange" and ins[0] is not None:
            _need_columns(n, ins[0], a["key"], ctx, "arrange key")
        if n.inputs[0].id in runtime.key_partitioned:
            runtime.key_partitioned[n.id] = runtime.key_partitioned[n.inputs[0].id]
        return ins[0]
    if n.op == "concat":
        present = [f for f in ins if f is not None]
        if present:
            names = [sorted(ctx.data_columns(f)) for f in present]
            if any(x != names[0] for x in names):
                raise PipelineError(f"{n.describe()}: collections to concat have different columns: {names}")
        return linear.concat(ctx, [f.select(*present[0].columns) for f in present]) if present else None
    if n.op in ("join", "semijoin"):
        return _join(n, ctx, ins, runtime)
    if n.op in ("reduce", "distinct", "threshold"):
        return _reduce(n, ctx, ins[0], runtime)
    if n.op == "enter":
        return ins[0]  # loops preset entered frames
    if n.op == "variable":  # this round's initial updates plus the loop's feedback
        fb = runtime.feedback.get(n.id)
        if ins[0] is None or fb is None:
            return ins[0] if fb is None else fb
        return ins[0].unionByName(fb.select(*ins[0].columns))
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


def _join(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    on = n.args["on"]
    left, right = ins
    if left is not None and right is not None:
        _check_join_keys(n, ctx, left, right, on)
    left_arr, right_arr = runtime.arrangement(n.inputs[0]), runtime.arrangement(n.inputs[1])
    semi = n.op == "semijoin"
    if left is not None and right is not None and not semi:
        clash = (set(ctx.data_columns(left)) & set(ctx.data_columns(right))) - set(on)
        if clash:
            raise PipelineError(f"{n.describe()}: both sides have column(s) {sorted(clash)} besides the join key; rename one side with select")
    if runtime.planning:
        left_arr = right_arr = None
    if not ctx.extra:
        runtime.key_partitioned[n.id] = list(on)
    return join_ops.join_changes(ctx, on, left, right, left_arr, right_arr, semi=semi, small=_small(ctx))


def _check_join_keys(n: Node, ctx: EvalContext, left: DataFrame, right: DataFrame, on: list[str]) -> None:
    if not on:
        raise PipelineError(f"{n.describe()}: give the key columns to join on")
    _need_columns(n, left, on, ctx, "join key (left side)")
    _need_columns(n, right, on, ctx, "join key (right side)")
    lt, rt = dict(left.dtypes), dict(right.dtypes)
    for k in on:
        if lt[k] != rt[k]:
            raise PipelineError(f"{n.describe()}: join key {k!r} is {lt[k]} on the left but {rt[k]} on the right; cast one side with select")


def _small(ctx: EvalContext) -> bool:
    """A delta small enough that every task may look its keys up in a stored arrangement
    (a task scans at most the whole arrangement with DuckDB, and there are few tasks):
    below the split of big runs, so that no run takes a hot key's old updates whole, and
    at most a task's budget of rows, which a lookup task holds its new updates within."""
    return ctx.delta_rows is not None and ctx.delta_rows < SPLIT_ROWS and ctx.delta_rows <= task_rows()


def _reduce(n: Node, ctx: EvalContext, df: DataFrame | None, runtime: Runtime) -> DataFrame | None:
    if df is None:
        return None
    key, reducer = reduce_spec(n, ctx.data_columns(df))
    _need_columns(n, df, key, ctx, "reduce key")
    arr = None if runtime.planning else runtime.arrangement(n.inputs[0])
    # a split reduce deals each key's rows to several tasks: they cannot look keys up
    split = two_stage(ctx, reducer)
    lookup = arr.lookup_source() if arr is not None and _small(ctx) and not split else None
    old = arr.old_for_keys(ctx, df, key) if arr is not None and lookup is None else None
    if not ctx.extra:
        runtime.key_partitioned[n.id] = key
    try:
        return reduce_changes(ctx, df, old, key, reducer, lookup=lookup,
                              old_partitioned=arr is not None and arr.viewable(ctx))
    except (KeyError, ValueError, TypeError) as e:
        raise PipelineError(f"{n.describe()}: {e}") from None
