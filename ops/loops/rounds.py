"""``iterate``: fixed points, run as rounds on the driver.

Inside a loop every time gains an iteration coordinate (the last one). A loop variable
``X`` with initial value ``I`` and next value ``R = body(X)`` is the collection
``X = I + delay(R - I)``, where ``delay`` adds one to the iteration coordinate: ``X`` at
iteration ``i + 1`` is ``body(X)`` at iteration ``i``.

A batch of new updates (a run, or one round of an enclosing loop) is pushed through the
body round by round: round ``i`` processes this batch's pending updates whose iteration
coordinate is ``i``, with everything processed earlier (by earlier runs, which the state
traces keep, or by earlier rounds) as the old side of every join and reduce. Each pair of
updates is so met exactly once, when the later of the two is processed, whatever the
order — which is why the incremental operators work unchanged inside loops, for all
epochs of a run at once. Updates an operator places at a later iteration (meeting old
state of later iterations) simply wait in the pool until their round. The loop stops
when nothing is pending: a fixed point. Collections entered at a priority (``enter_at``,
``iterate(priority=…)``, see ``ops/loops/priority.py``) are pools of pending updates too, so rounds
go from one iteration holding pending updates to the next, skipping empty ones.

Two paths: a loop whose body only combines rows that agree on some columns
(reachability and hop counts by ``root``, with the edges broadcast) runs each batch's
whole fixed point inside Spark tasks, one job for every round (``ops/loops/plan.py`` decides,
``ops/loops/local.py`` and ``ops/loops/task.py`` run it); every other loop runs round by
round on the driver, as below. The run's report says which path each loop took and why.

Each round is a fixed handful of Spark jobs, however many epochs the batch holds: the
job that finds the least pending iteration also computes the round's changes and
materialises the feedback and every arranged frame as local checkpoints (which keeps
plans from growing round after round); a join may add the broadcast of its small side.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Callable

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, scope_nodes
from ops.errors import PipelineError
from ops.loops.local import evaluate_local, report
from ops.loops.priority import check_iteration, delay_at, enter_at_frame, node_priority
from ops.operators import linear
from ops.operators.context import EvalContext
from ops.spark.errors import first_line
from storage.lattice import time_columns


def frame_dim(df: DataFrame) -> int:
    cols = set(df.columns)
    if "time" in cols:
        return 1
    d = 0
    while f"time_{d}" in cols:
        d += 1
    return d


def enter_frame(df: DataFrame, _depth: int | None = None) -> DataFrame:
    """Move updates into a loop: times gain an iteration coordinate 0."""
    d = frame_dim(df)
    old, new = time_columns(d), time_columns(d + 1)
    data = [c for c in df.columns if c not in old and c != "diff"]
    # one projection (each DataFrame call is analysed in the JVM: a renaming per time
    # coordinate, then a new column, cost a planning run some 30 ms per entered collection)
    return df.selectExpr(*[_quoted(c) for c in data], *[f"{_quoted(a)} AS {_quoted(b)}" for a, b in zip(old, new)],
                         f"CAST(0 AS BIGINT) AS {_quoted(new[-1])}", "diff")


def _quoted(c: str) -> str:
    return "`" + c.replace("`", "``") + "`"


def entering(e: Node):
    """How the ``enter`` node ``e`` maps outer update frames into its loop (its old updates
    too): at iteration 0, or each at its priority."""
    if node_priority(e) is None:
        return enter_frame

    def at_priority(df: DataFrame) -> DataFrame:
        df = enter_frame(df)
        return enter_at_frame(df, time_columns(frame_dim(df))[-1], node_priority(e), e.describe())
    return at_priority


def leave_frame(df: DataFrame) -> DataFrame:
    """Move updates out of a loop: the iteration coordinate is dropped (summed away)."""
    d = frame_dim(df)
    old, new = time_columns(d), time_columns(d - 1)
    df = df.drop(old[-1])
    for a, b in zip(old[:-1], new):
        if a != b:
            df = df.withColumnRenamed(a, b)
    return df


def delay(df: DataFrame, last: str) -> DataFrame:
    return df.withColumn(last, F.col(last) + 1)


def evaluate_loop(p: Pipeline, loop_node: Node, ctx: EvalContext, frames: dict, runtime,
                  evaluate_scope: Callable) -> dict:
    """Run a loop to its fixed point for one batch; returns the frames of its ``leave`` nodes.

    ``evaluate_scope(p, scope, ctx, frames, runtime, preset)`` evaluates the loop's body
    (ops/run/evaluate.py passes itself: a loop's body may hold loops)."""
    scope = loop_node.args["scope"]
    ictx = dataclasses.replace(ctx, d=ctx.d + 1)
    last = ictx.tcols[-1]
    nodes = scope_nodes(p, scope)
    enters = [n for n in nodes if n.op == "enter"]
    variables = list(scope.variables)
    for v in variables:
        if v.args.get("result") is None:
            raise PipelineError(f"loop {scope.name}: variable {v.describe()} is never set")
    leaves = [n for n in p.nodes if n.op == "leave" and n.inputs[0] is loop_node]
    entered = EnteredFrames(enters, frames, last, scope)
    if not any(entered.present(e.id) for e in enters):
        return {l.id: None for l in leaves}
    if runtime.planning:  # one pass of the body on empty frames, only to check it
        inner: dict[int, DataFrame | None] = {}
        evaluate_scope(p, scope, dataclasses.replace(ictx, floor=ctx.floor + (0,)), inner, runtime, entered)
        _check_variables(scope, variables, inner, ictx)
        return {l.id: (leave_frame(inner[l.inputs[1].id]) if inner.get(l.inputs[1].id) is not None else None)
                for l in leaves}

    if not ctx.extra:  # the path: the whole fixed point inside tasks, or round by round
        plan = runtime.loop_plan(loop_node)
        local = evaluate_local(p, loop_node, plan, ictx, entered, runtime) if plan.local else None
        if local is not None:
            return local
        report(runtime, plan, "")
    return _rounds(p, loop_node, ctx, ictx, entered, leaves, runtime, evaluate_scope)


def _rounds(p: Pipeline, loop_node: Node, ctx: EvalContext, ictx: EvalContext, entered: dict,
            leaves: list[Node], runtime, evaluate_scope: Callable) -> dict:
    """The fixed point of one batch, round by round on the driver (see the module's docstring)."""
    scope = loop_node.args["scope"]
    last = ictx.tcols[-1]
    nodes = scope_nodes(p, scope)
    enters = [n for n in nodes if n.op == "enter"]
    variables = list(scope.variables)
    # pools of pending updates: each variable's feedback, and each collection entered at a
    # priority (materialised once, by the job that finds the first iteration); collections
    # entered plainly are all at iteration 0, presented in the first round
    at = {e.id: f.localCheckpoint(eager=False) for e in enters
          if (f := entered[e.id]) is not None and node_priority(e) is not None}
    plain = {e.id: f for e in enters if e.id not in at and (f := entered[e.id]) is not None}
    pending: dict[int, DataFrame | None] = {v.id: None for v in variables}
    by_id = {n.id: n for n in enters + variables}
    stats = runtime.loop_stats
    if at or stats is not None:  # where the first round is (and no record has a bad priority)
        iteration, mins, count = _next_iteration({**at, **plain}, by_id, last, scope, stats is not None)
    else:
        iteration, mins, count = 0, {}, None
    max_rounds = loop_node.args["max_rounds"]
    collected: dict[int, list[DataFrame]] = {l.id: [] for l in leaves}
    first, rounds, updates = True, 0, 0
    while True:
        started = time.monotonic()
        updates += count or 0
        if runtime.progress is not None:
            runtime.progress.phase(f"loop {scope.name}: round {rounds} (iteration {iteration})")
        preset = {e.id: (plain.get(e.id) if first else None) for e in enters}
        for eid, base in at.items():
            if mins.get(eid) == iteration:
                preset[eid] = base.filter(F.col(last) == iteration)
        for v in variables:
            runtime.feedback[v.id] = None
            if pending[v.id] is not None and mins.get(v.id) == iteration:
                runtime.feedback[v.id] = pending[v.id].filter(F.col(last) == iteration)
                pending[v.id] = pending[v.id].filter(F.col(last) > iteration)
        inner = {}
        rctx = dataclasses.replace(ictx, floor=ctx.floor + (iteration,))
        evaluate_scope(p, scope, rctx, inner, runtime, preset)
        for v in variables:
            result, initial = inner.get(v.args["result"].id), inner.get(v.inputs[0].id)
            change = linear.union_all([result, None if initial is None else linear.negate(ictx, initial)])
            if change is not None:
                change = delay(change, last) if node_priority(v) is None else \
                    delay_at(change, last, node_priority(v), f"loop {scope.name}: {v.describe()}")
            merged = linear.union_all([pending[v.id], change])
            # materialised by the job that finds the next iteration: one job for the round
            pending[v.id] = None if merged is None else linear.consolidate(ictx, merged).localCheckpoint(eager=False)
        for l in leaves:
            f = inner.get(l.inputs[1].id)
            if f is not None:
                collected[l.id].append(f if l.inputs[1].op == "variable" else f.localCheckpoint(eager=False))
        pools = {v.id: pending[v.id] for v in variables}
        pools.update({eid: base.filter(F.col(last) > iteration) for eid, base in at.items()
                      if mins.get(eid) is not None and mins[eid] >= iteration})
        # the round's work runs in this job; with progress on it also counts what is pending
        nxt, mins, count = _next_iteration(pools, by_id, last, scope, stats is not None or runtime.progress is not None)
        if runtime.progress is not None:
            runtime.progress.loop_round(scope.name, rounds, iteration, time.monotonic() - started, nxt, count)
        if nxt is None:
            break
        rounds += 1
        if rounds >= max_rounds:
            raise PipelineError(f"loop {scope.name} ({loop_node.where}) did not reach a fixed point within "
                                f"{max_rounds} rounds; raise max_rounds or check that the body converges")
        first, iteration = False, nxt
    if stats is not None:
        stats.append({"loop": scope.name, "rounds": rounds + 1, "updates": updates})
    for e in enters:  # entered updates become old through the outer collection's own record
        live = runtime.live.get(e.id)
        if live is not None:
            live.forget_processed()
    # consolidated: a loop's changes at one outer time, round after round, largely cancel
    return {l.id: (linear.consolidate(ctx, leave_frame(linear.union_coalesced(collected[l.id])))
                   if collected[l.id] else None) for l in leaves}


class EnteredFrames(Mapping):
    """Enter node id -> the updates of this batch entering the loop through it (None:
    none), each frame built when first read: a loop whose task reads them from the input's
    files itself (ops/loops/direct.py) never builds them (a few Py4J calls each)."""

    def __init__(self, enters: list[Node], frames: dict, last: str, scope):
        self._outer = {e.id: (e, frames.get(e.inputs[0].id)) for e in enters}
        self._last, self._scope = last, scope
        self._built: dict[int, DataFrame | None] = {}

    def present(self, eid: int) -> bool:
        """Whether anything enters through ``eid`` this batch (nothing is built)."""
        return self._outer[eid][1] is not None

    def __getitem__(self, eid: int) -> DataFrame | None:
        if eid not in self._built:
            e, outer = self._outer[eid]
            self._built[eid] = _entered(e, outer, self._last, self._scope)
        return self._built[eid]

    def __iter__(self):
        return iter(self._outer)

    def __len__(self) -> int:
        return len(self._outer)


def _entered(e: Node, outer: DataFrame | None, last: str, scope) -> DataFrame | None:
    """The updates of ``outer`` entered through ``e``: at iteration 0, or at its priority."""
    if outer is None:
        return None
    if node_priority(e) is None:
        return enter_frame(outer)
    try:
        return enter_at_frame(enter_frame(outer), last, node_priority(e), f"loop {scope.name}: {e.describe()}")
    except AnalysisException as exc:
        raise PipelineError(f"loop {scope.name}: {e.describe()}: {first_line(exc)}") from None


def _next_iteration(pools: dict[int, DataFrame | None], nodes: dict[int, Node], last: str, scope,
                    counting: bool) -> tuple[int | None, dict[int, int], int | None]:
    """The least iteration holding pending updates (None: a fixed point), the least pending
    iteration of each pool (by node id), and — when ``counting`` — how many updates the
    pools hold at that iteration. One Spark job, which also materialises the pools."""
    present = {k: f for k, f in pools.items() if f is not None}
    if not present:
        return None, {}, None
    if counting:  # per pool and pending iteration: a few rows more, the same one job
        parts = [f.groupBy(last).count().select(F.lit(k).alias("pool"), F.col(last).alias("m"), "count")
                 for k, f in present.items()]
    else:
        parts = [f.agg(F.min(last).alias("m")).select(F.lit(k).alias("pool"), "m", F.lit(0).alias("count"))
                 for k, f in present.items()]
    rows = linear.union_all(parts).collect()
    mins: dict[int, int] = {}
    for r in rows:
        if r["m"] is not None:
            mins[r["pool"]] = min(mins.get(r["pool"], r["m"]), r["m"])
    for k, m in mins.items():
        check_iteration(m, scope.name, nodes[k])
    if not mins:
        return None, {}, None
    nxt = min(mins.values())
    return nxt, mins, (sum(r["count"] for r in rows if r["m"] == nxt) if counting else None)


def _check_variables(scope, variables: list[Node], inner: dict, ctx: EvalContext) -> None:
    for v in variables:
        init, res = inner.get(v.inputs[0].id), inner.get(v.args["result"].id)
        if init is None or res is None:
            continue
        a = dict((c, t) for c, t in init.dtypes if c in ctx.data_columns(init))
        b = dict((c, t) for c, t in res.dtypes if c in ctx.data_columns(res))
        if a != b:
            raise PipelineError(f"loop {scope.name}: the body of {v.describe()} returns columns {b} "
                                f"but the variable has {a}")
