"""The path each loop of a pipeline will take, decided as a run decides it, without Spark.

A run decides a loop's path in steps (``ops/loops/``): the plan finds the columns that
deal its rows to tasks (``plan.py``), the body must be one DuckDB evaluates as Spark does
(``route.build_body``), a loop that no columns deal runs resident or in one task from the
session's task slots (``route.resident_decision``), and its stored state must fit its
tasks (``route.stored_refusal``). The same functions run here on the schemas found without
Spark (``ops/explain/schemas.py``) and the engine a run would start (its master), so the
path said here is the path the run takes, unless a limit only a batch can measure sends it
round by round: those are listed as the loop's ``limits``.
"""

from __future__ import annotations

import pyarrow as pa

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, arranged_nodes, node_priority, scope_nodes
from ops.dataflow.operators import OPERATORS
from ops.explain.model import Loop, Priority
from ops.explain.schemas import unknown_types
from ops.loops.plan import LoopPlan, loop_path, plan_loop
from ops.loops.route import (BROADCAST_ROWS, ONE_TASK_ROWS, Engine, Resident, build_body, few_rows_decision,
                             resident_decision, stored_refusal, task_rows)


def engine_for(master: str, shared_root: str | None) -> Engine:
    """The engine a run with ``master`` starts: local mode's task slots are known now; a
    cluster's slots and settings only once it runs."""
    from ops.spark.session import is_local, local_cores

    if is_local(master):
        return Engine(local_cores(master), True, False, shared_root)
    return Engine(None, False, None, shared_root)


def explain_loop(p: Pipeline, loop_node: Node, schemas: dict[int, pa.Schema], d: int, engine: Engine,
                 rows_of, state: dict[int, str], new_rows: int) -> Loop:
    """The path of ``loop_node``. ``rows_of(trace)``: the rows the store holds in a trace
    (None: no such trace), for the limits on stored state and broadcast collections;
    ``state``: each state node's trace (ops/dataflow/changes.py, ``state_names``);
    ``new_rows``: the input updates the next run reads (as the run counts them)."""
    scope = loop_node.args["scope"]
    nodes = scope_nodes(p, scope)
    loop = Loop(scope.name, loop_node.where, loop_node.args["max_rounds"], "round", "",
                variables=[v.name for v in scope.variables],
                inside=loop_node.scope.name if loop_node.scope is not None else None)
    loop.unknown_types = any(unknown_types(schemas[n.id]) for n in nodes if n.id in schemas)
    plan = plan_loop(p, loop_node, schemas)
    if plan.unplanned:
        missing = next(n for n in nodes if n.id not in schemas)
        loop.path = "unknown"
        loop.why = f"decided when the run starts: only Spark can tell the columns of {missing.describe()}"
        return loop
    if not plan.local:
        loop.why = plan.reason
        return loop
    arranged = arranged_nodes(p)
    body = build_body(p, loop_node, plan, schemas, arranged, d + scope.depth)
    if isinstance(body, str):
        loop.why = body
        return loop
    res = resident_decision(plan, body, engine)
    tasks = res.tasks if isinstance(res, Resident) else 0
    limited = loop_path() == "auto"
    if not plan.by and limited:
        stored = sum(rows_of(state[n.id]) or 0 for n in nodes
                     if n.id in arranged and n.op != "enter")
        res = few_rows_decision(res, stored + new_rows, engine.local)
        tasks = res.tasks if isinstance(res, Resident) else 0
        refused = stored_refusal(plan, stored, tasks, ONE_TASK_ROWS)
        if refused:
            loop.why = refused
            return loop
    _taken(loop, plan, res, p, nodes, rows_of, limited)
    return loop


def _taken(loop: Loop, plan: LoopPlan, res: Resident | str, p: Pipeline, nodes: list[Node], rows_of,
           limited: bool) -> None:
    """Fill in the path of a loop that runs inside tasks, and what would stop it."""
    by_id = {n.id: n for n in nodes}
    loop.by = list(plan.by)
    loop.broadcast = [f"{by_id[i].inputs[0].name} (entered as {by_id[i].name})" for i in plan.broadcast()]
    if isinstance(res, Resident):
        loop.path, loop.tasks = "resident", res.tasks
        loop.why = (f"no columns deal it to tasks ({plan.unpartitioned}): its rows are spread over {res.tasks} "
                    f"tasks that run together and exchange each round's changes by key"
                    if not plan.by else "DDCLI_LOOP_PATH=resident")
    elif plan.by:
        loop.path = "local"
        loop.why = (f"every operator of its body combines only rows that agree on {', '.join(plan.by)}: "
                    f"each task runs every round of its share of the rows, one Spark job a batch")
    else:
        loop.path, loop.tasks = "one_task", 1
        loop.why = f"no columns deal it to tasks ({plan.unpartitioned}); not resident: {res}"
    if limited and plan.broadcast():
        bound = [_rows_bound(by_id[i].inputs[0], rows_of) for i in plan.broadcast()]
        now = f" (now at most {sum(bound):,})" if None not in bound else ""
        loop.limits.append(f"round by round if its broadcast collections hold more than {BROADCAST_ROWS:,} "
                           f"rows{now}")
    if limited and not plan.by:
        loop.limits.append(f"round by round if its rows (state and new updates) are more than "
                           f"{ONE_TASK_ROWS:,} a task")
    loop.limits.append(f"round by round from the batch where a task holds more than {task_rows():,} rows "
                       f"after a round (DDCLI_LOOP_TASK_ROWS)")


def _rows_bound(n: Node, rows_of) -> int | None:
    """At most how many updates a collection holds, where the store tells: an input's rows,
    passed on through operators that never add rows (None: unknown)."""
    if n.op == "input":
        return rows_of(n.args["trace"])
    if OPERATORS[n.op].no_new_rows:
        return _rows_bound(n.inputs[0], rows_of)
    if n.op == "concat":
        parts = [_rows_bound(i, rows_of) for i in n.inputs]
        return None if None in parts else sum(parts)
    return None


def priorities(p: Pipeline) -> list[Priority]:
    """Every prioritized variable and ``enter_at``: what decides the iteration its records enter at."""
    out = []
    for n in p.nodes:
        e = node_priority(n) if n.op in ("variable", "enter") else None
        if e is None:
            continue
        out.append(Priority(n.name, n.where, n.scope.name, "variable" if n.op == "variable" else "enter_at",
                            e if isinstance(e, str) else f"<{type(e).__name__}>"))
    return out
