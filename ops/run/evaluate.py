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

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, arranged_nodes, reduce_spec, scope_nodes, uses
from ops.dataflow.operators import OPERATORS
from ops.errors import PipelineError
from ops.loops.plan import plan_loop
from ops.loops.rounds import entering, evaluate_loop
from ops.operators import calculus, linear
from ops.operators.arrangement import Arrangement, LiveArrangement
from ops.operators.asof import as_of_join_changes, pending_changes
from ops.operators.context import RESERVED, EvalContext
from ops.operators.delta_join import delta_join_changes
from ops.operators.join import join_changes, lookup_files, matchable
from ops.operators.join_direct import plan_direct, run_direct
from ops.reduce.budget import task_rows
from ops.reduce.operator import SPLIT_ROWS, reduce_changes, two_stage
from ops.run.deferred import DeferredFrame, pending
from ops.run.progress import RunProgress
from ops.spark.errors import first_line


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
        self.shared = shared_costly(p, self.arranged, self.uses)
        self.live: dict[int, LiveArrangement] = {}
        self.stored = stored
        self.sources: dict[str, DataFrame | None] = {}  # input trace -> this batch's new updates
        self.feedback: dict[int, DataFrame | None] = {}  # loop variable -> this round's fed-back updates
        self.planned: dict[int, DataFrame | None] = {}  # planning: every node's (empty) frame
        # the least time, while the batch evaluated starts the outputs (a first run, a
        # rebuild): where a global aggregate's row of an empty input begins (None: not now)
        self.origin: tuple[int, ...] | None = None
        self.key_partitioned: dict[int, list[str]] = {}  # frames hash-partitioned by these columns
        self.ran: list[Node] = []  # top-level stateful operators with changes in this run, in order
        # the first time coordinate every later read of this batch's loop state is at or
        # beyond (one-dimensional outer times; None: keep exact times): a partition-local
        # loop returns its processed updates advanced to it (ops/loops/local.py)
        self.record_floor: int | None = None
        # a folder every executor sees, for a resident loop's exchange on a cluster (None:
        # the store is not in a filesystem folder; local mode uses the machine's temporary folder)
        self.exchange_root: str | None = None
        # targets a loop's one task may write itself (ops/run/run.py: task_writes), and the
        # files such tasks wrote, by trace (``META_SCHEMA`` rows of ops/io/write.py)
        self.task_writes: dict[tuple[str, int], list[dict]] = {}
        self.written_in_tasks: dict[str, list[dict]] = {}
        # input trace -> the run's new layer files, which a loop's one task may read itself
        # (ops/loops/direct.py); for one batch only, as ``task_writes``
        self.source_files: dict[str, list[str]] = {}

    def loop_plan(self, loop_node: Node):
        """How ``loop_node`` runs (ops/loops/plan.py), planned once per run."""
        if loop_node.id not in self.loop_plans:
            self.loop_plans[loop_node.id] = plan_loop(self.p, loop_node, self.schemas)
        return self.loop_plans[loop_node.id]

    def arrangement(self, node: Node) -> LiveArrangement | None:
        if node.id not in self.arranged:
            return None
        if node.id not in self.live:
            if node.op == "enter":
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


def evaluate(p: Pipeline, ctx: EvalContext, sources: dict[str, DataFrame | None], runtime: Runtime,
             preset: dict[int, DataFrame | None] | None = None) -> dict[int, DataFrame | None]:
    """Each node's changes for one batch of the pipeline's inputs (``sources`` by trace name);
    ``preset`` fixes some top-level nodes' changes (a partial rebuild: ops/run/rebuild.py)."""
    frames: dict[int, DataFrame | None] = {}
    runtime.sources = sources
    evaluate_scope(p, None, ctx, frames, runtime, preset)
    return frames


def evaluate_scope(p: Pipeline, scope, ctx: EvalContext, frames: dict, runtime: Runtime,
                   preset: dict[int, DataFrame | None] | None = None) -> None:
    """Evaluate the nodes of ``scope`` (None: the pipeline itself, else a loop's Scope) into
    ``frames``; ``preset`` fixes some nodes' frames. A loop evaluates its body with this same
    function, which it receives as a parameter: the one recursion of the evaluator."""
    nodes = scope_nodes(p, scope)
    for n in nodes:
        if preset is not None and n.id in preset:
            frames[n.id] = preset[n.id]
            continue
        if n.op == "loop":
            frames.update(evaluate_loop(p, n, ctx, frames, runtime, evaluate_scope))
            continue
        if n.op == "leave":
            continue  # filled in by its loop
        if _deferrable(n, frames, runtime):  # (checked by the planning dry run already)
            frames[n.id] = DeferredFrame(lambda n=n, ins=dict(frames): _evaluate_node(n, ctx, ins, runtime))
            continue
        frames[n.id] = _evaluate_node(n, ctx, frames, runtime)
        df = frames[n.id]
        if df is not None and scope is not None and not runtime.planning and n.id in runtime.arranged \
                and n.op not in ("enter", "variable"):
            # computed once (while the round's feedback is computed): used by this round's
            # operators and, as old state, by every later round. A lazy local checkpoint
            # costs no job of its own and cuts the plan, so plans do not grow round by round.
            # Consolidated first: a join's changes at many epochs largely cancel (reach, 10^4
            # updates: 41 s -> 32-38 s), and Spark sums them before its shuffle.
            df = frames[n.id] = linear.consolidate(ctx, df).localCheckpoint(eager=False)
        elif df is not None and scope is None and not runtime.planning and n.id in runtime.shared:
            # read by several jobs (its writes, its arrangement's, and those of the operators
            # downstream): computed once, by the first, kept on disk (bounded memory) for the
            # others, instead of recomputing its stateful operators in each
            df = frames[n.id] = df.localCheckpoint(eager=False, storageLevel=StorageLevel.DISK_ONLY)
        if df is not None:
            _check_column_names(n, ctx, df)
            if scope is None and not runtime.planning and OPERATORS[n.op].stateful:
                runtime.ran.append(n)  # reported with the writes that compute it (ops/run/progress.py)
    if runtime.planning:
        runtime.planned.update({n.id: frames.get(n.id) for n in nodes if n.op != "loop"})
    runtime.record(frames, nodes)


def _deferrable(n: Node, frames: dict, runtime: Runtime) -> bool:
    """A run's input, or a select or filter of a frame not built yet: its own frame can wait
    until something uses it (ops/run/deferred.py)."""
    if runtime.planning:
        return False
    if n.op == "input":
        return pending(runtime.sources.get(n.args["trace"]))
    return n.op in ("select", "filter") and n.id not in runtime.shared and pending(frames.get(n.inputs[0].id))


def shared_costly(p: Pipeline, arranged: dict[int, Node], uses: dict[int, int]) -> set[int]:
    """The ids of the pipeline's top-level nodes whose changes more than one job reads and
    cost a stateful operator to compute (one, or a linear operator over one). A node is read
    by each operator using it, by its own arrangement's write and, as an output, by the
    output's write (an output node passes its input's frame on)."""
    costly: dict[int, bool] = {}

    def is_costly(n: Node) -> bool:
        if n.id not in costly:
            o = OPERATORS[n.op]
            costly[n.id] = o.stateful or (o.linear and any(is_costly(i) for i in n.inputs))
        return costly[n.id]

    out = set()
    for n in p.nodes:
        if n.scope is not None or not is_costly(n):
            continue
        readers = uses.get(n.id, 0) + (n.id in arranged) + (n.op == "output")
        if readers > 1:
            out.add(n.id)
    return out


def _evaluate_node(n: Node, ctx: EvalContext, frames: dict, runtime: Runtime) -> DataFrame | None:
    """One node's changes, by its operator's entry in :data:`EVALUATORS`."""
    evaluator = EVALUATORS.get(n.op)
    if evaluator is None:
        raise PipelineError(f"{n.describe()}: unknown operator {n.op!r}")
    try:
        return evaluator(n, ctx, [frames.get(i.id) for i in n.inputs], runtime)
    except AnalysisException as e:
        raise PipelineError(f"{n.describe()}: {first_line(e)}") from None


def _check_column_names(n: Node, ctx: EvalContext, df: DataFrame) -> None:
    seen: set[str] = set()
    bad = [c for c in df.columns if c in seen or seen.add(c)]  # e.g. a user column named diff
    bad += [c for c in ctx.data_columns(df) if c in RESERVED or c.startswith("time_")]
    if bad:
        raise PipelineError(f"{n.describe()}: column name {bad[0]!r} is reserved; choose another")


def _need_columns(n: Node, df: DataFrame, cols: list[str], ctx: EvalContext, what: str) -> None:
    have = ctx.data_columns(df)
    for c in cols:
        if c not in have:
            raise PipelineError(f"{n.describe()}: unknown column {c!r} in {what} (columns: {', '.join(have)})")


# ---------------------------------------------------------------- the operators without a module of their own


def _input(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    return runtime.sources.get(n.args["trace"])


def _passed_on(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    """``output`` and ``arrange``: the input's changes, as they are."""
    if n.op == "arrange" and ins[0] is not None:
        _need_columns(n, ins[0], n.args["key"], ctx, "arrange key")
    if n.inputs[0].id in runtime.key_partitioned:
        runtime.key_partitioned[n.id] = runtime.key_partitioned[n.inputs[0].id]
    return ins[0]


def _concat(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    present = [f for f in ins if f is not None]
    if not present:
        return None
    names = [sorted(ctx.data_columns(f)) for f in present]
    if any(x != names[0] for x in names):
        raise PipelineError(f"{n.describe()}: collections to concat have different columns: {names}")
    return linear.concat(ctx, [f.select(*present[0].columns) for f in present])


def _entered(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    return ins[0]  # loops preset entered frames


def _variable(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    """A loop variable: this round's initial updates plus the loop's feedback."""
    fb = runtime.feedback.get(n.id)
    if ins[0] is None or fb is None:
        return ins[0] if fb is None else fb
    return ins[0].unionByName(fb.select(*ins[0].columns))


def _select(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    df, a = ins[0], n.args
    if df is None:
        return None
    _need_columns(n, df, [c for c in a["columns"] if isinstance(c, str)], ctx, "select")
    return _exact(n, df, linear.select(ctx, df, a["columns"], a["exprs"]))


def _flat_map(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    df, a = ins[0], n.args
    if df is None:
        return None
    if a["keep"] is not None:
        _need_columns(n, df, a["keep"], ctx, "flat_map keep")
    return _exact(n, df, linear.flat_map(ctx, df, a["column"], a["expr"], a["keep"]))


def _filter(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    return None if ins[0] is None else _exact(n, ins[0], linear.filter_(ctx, ins[0], n.args["condition"]))


def _exact(n: Node, df: DataFrame, out: DataFrame) -> DataFrame:
    """``out``, unless one of its expressions negates a decimal Spark would round."""
    sql = linear.inexact_negation(df, out)
    if sql is not None:
        raise PipelineError(f"{n.describe()}: {sql} negates a decimal of more than {linear.EXACT_NEGATION_DIGITS} "
                            f"digits, which Spark rounds to {linear.EXACT_NEGATION_DIGITS} digits; cast it to "
                            f"decimal({linear.EXACT_NEGATION_DIGITS}, s) or double first")
    return out


def _negate(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    return None if ins[0] is None else linear.negate(ctx, ins[0])


def _consolidate(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    return None if ins[0] is None else linear.consolidate(ctx, ins[0])


def _join(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    """``join`` and ``semijoin``: their inputs' changes against each other's arrangements."""
    on = n.args["on"]
    left, right = ins
    left_arr, right_arr = runtime.arrangement(n.inputs[0]), runtime.arrangement(n.inputs[1])
    if not runtime.planning and not ctx.extra and n.scope is None and (left is not None or right is not None):
        # in tasks that read the inputs' files (its columns were checked by the planning dry run)
        job = plan_direct(n, runtime, ctx.spark, ctx.d, ctx.delta_rows, lookup_files(left_arr, right_arr))
        if job is not None:
            runtime.written_in_tasks.update(run_direct(ctx.spark, job))
            runtime.ran.append(n)  # computed and written by its task: no frame
            return None
    if left is not None and right is not None:
        _check_join_keys(n, ctx, left, right, on)
    semi = n.op == "semijoin"
    if left is not None and right is not None and not semi:
        clash = (set(ctx.data_columns(left)) & set(ctx.data_columns(right))) - set(on)
        if clash:
            raise PipelineError(f"{n.describe()}: both sides have column(s) {sorted(clash)} besides the join key; rename one side with select")
    if runtime.planning:
        left_arr = right_arr = None
    if not ctx.extra:
        runtime.key_partitioned[n.id] = list(on)
    nulls_equal = n.args.get("nulls_equal", False)
    left, right = matchable(left, on, nulls_equal), matchable(right, on, nulls_equal)
    return join_changes(ctx, on, left, right, left_arr, right_arr, semi=semi, small=_small(ctx))


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


def _reduce(n: Node, ctx: EvalContext, ins: list, runtime: Runtime) -> DataFrame | None:
    """``reduce``, ``distinct`` and ``threshold``: the changes of their output (ops/reduce/)."""
    df = ins[0]
    if getattr(n.args.get("reducer"), "when_empty", False) and not ctx.extra and not runtime.planning:
        return _when_empty(n, ctx, None if df is None else _changes(n, ctx, df, runtime), runtime)
    if df is None:
        return None
    return _changes(n, ctx, df, runtime)


def _changes(n: Node, ctx: EvalContext, df: DataFrame, runtime: Runtime) -> DataFrame:
    key, reducer = reduce_spec(n, ctx.data_columns(df))
    _need_columns(n, df, key, ctx, "reduce key")
    arr = None if runtime.planning else runtime.arrangement(n.inputs[0])
    # a split reduce deals each key's rows to several tasks: they cannot look keys up
    split = two_stage(ctx, reducer, df)
    lookup = arr.lookup_source() if arr is not None and _small(ctx) and not split else None
    old = arr.old_for_keys(ctx, df, key) if arr is not None and lookup is None else None
    if not ctx.extra:
        runtime.key_partitioned[n.id] = key
    try:
        return reduce_changes(ctx, df, old, key, reducer, lookup=lookup,
                              old_partitioned=arr is not None and arr.viewable(ctx))
    except (KeyError, ValueError, TypeError) as e:
        raise PipelineError(f"{n.describe()}: {e}") from None


def _when_empty(n: Node, ctx: EvalContext, changes: DataFrame | None, runtime: Runtime) -> DataFrame | None:
    """A global aggregate's changes with SQL's row of an empty input: the reduce's own
    (``changes``), minus the empty row wherever the reduce's row comes and goes (its
    changes with the values replaced), plus the empty row once at the least time when the
    output starts (``runtime.origin``). The reduce has one row or none at a time, so the
    sum has exactly one: its row, or the empty one. Linear in the changes: no Spark job."""
    runtime.key_partitioned.pop(n.id, None)  # a union: no longer in the reduce's partitions
    reducer = n.args["reducer"]
    schema = runtime.schemas[n.id] if runtime.schemas and n.id in runtime.schemas else None
    empty = reducer.empty_row()
    parts = []
    if changes is not None:
        types = dict(changes.dtypes)
        parts += [changes, changes.select(*[F.lit(v).cast(types[c]).alias(c) for c, v in empty.items()],
                                          *ctx.tcols, (-F.col("diff")).alias("diff"))]
    if runtime.origin is not None:
        if schema is None:
            raise PipelineError(f"{n.describe()}: the row of an empty input needs the planned schema")
        fields = list(schema) + [pa.field(t, pa.int64()) for t in ctx.tcols] + [pa.field("diff", pa.int64())]
        row = tuple(empty[f.name] for f in schema) + tuple(runtime.origin) + (1,)
        parts.append(ctx.spark.createDataFrame([row], from_arrow_schema(pa.schema(fields))))
    if not parts:
        return None
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


Evaluator = Callable[[Node, EvalContext, list, Runtime], "DataFrame | None"]

#: Every operator a pipeline can declare, and the function that turns its inputs' changes
#: (``None``: no changes) into its own. ``loop`` and ``leave`` are evaluated by the loop
#: itself (ops/loops/rounds.py).
EVALUATORS: dict[str, Evaluator] = {
    "input": _input,
    "output": _passed_on,
    "arrange": _passed_on,
    "select": _select,
    "filter": _filter,
    "flat_map": _flat_map,
    "concat": _concat,
    "negate": _negate,
    "consolidate": _consolidate,
    "join": _join,
    "semijoin": _join,
    "reduce": _reduce,
    "distinct": _reduce,
    "threshold": _reduce,
    "enter": _entered,
    "variable": _variable,
    "differentiate": calculus.differentiate_changes,
    "moments": calculus.moments_changes,
    "integrate": calculus.integrate_changes,
    "as_of_pending": pending_changes,
    "as_of_join": as_of_join_changes,
    "delta_join": delta_join_changes,
}
