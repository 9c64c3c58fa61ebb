"""Which way a loop's batch runs inside tasks, decided without Spark.

``ops/loops/plan.py`` finds whether a loop's rows can be dealt to tasks and by which
columns. What is left to decide is also Spark-free, so that ``ddcli explain`` can say it
before a run and the run (``ops/loops/local.py``) decides it with the same functions:

* :func:`build_body`: the body as the tasks run it, or why it cannot run there (an
  expression DuckDB would not evaluate as Spark does);
* :func:`resident_decision`: whether a loop that no columns deal runs *resident* (tasks
  that run together and exchange each round's changes) or in one task, from the facts of
  the engine (:class:`Engine`: its task slots, local or a cluster, dynamic allocation, a
  shared folder);
* :func:`stored_refusal`: whether its stored state alone is more than its tasks may take.

Two more limits are only known while a batch runs (the rows of its broadcast collections,
the rows a task holds after a round); the constants here say where they are.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import pyarrow as pa

from ops.dataflow.builder import Pipeline
from ops.dataflow.graph import Node, node_priority, reduce_spec, scope_nodes
from ops.dataflow.operators import JOIN, OPERATORS, REDUCE
from ops.errors import PipelineError
from ops.loops.exchange import read_keys
from ops.loops.plan import LoopPlan, loop_path, portable_sql
from ops.loops.task import Body, TaskNode

BROADCAST_ROWS = 500_000  # rows (old + new) up to which an entered collection is broadcast
#: Rows (state + new) up to which a loop without partition columns runs in one task. Above
#: it the loop runs round by round, a Spark job a round: measured on cc over 50,000 nodes and
#: 100,000 edges, a run of 5,000 updates took 25.5 s in one task (4.5 M rows held at the
#: peak) and 73.9 s round by round. A task's rows are bounded by TASK_ROWS anyway.
ONE_TASK_ROWS = 2_000_000
#: Rows a loop's task may hold after a round (``DDCLI_LOOP_TASK_ROWS``): a loop's rows are a
#: few integer columns, ~40-60 bytes, so about 1 GB. At 10^5 updates per run the bench's
#: tasks held at most 4.7 M (reach), 6.9 M (bfs) and 6.7 M (cc) rows, before their records
#: were folded as they grow (which halved cc's captured tasks).
TASK_ROWS = 1 << 24
#: the most tasks a resident loop runs in: at every exchange each task waits for and reads a
#: note of every other task (and writes up to a file of rows to each), so on a big cluster
#: more tasks make a round of a few rows dearer (not measured beyond 2 tasks)
LOOP_TASKS = 16


def task_rows() -> int:
    return max(1, int(os.environ.get("DDCLI_LOOP_TASK_ROWS", TASK_ROWS)))


def resident_task_cap() -> int:
    """``DDCLI_LOOP_TASKS`` (a positive integer), else :data:`LOOP_TASKS`."""
    raw = os.environ.get("DDCLI_LOOP_TASKS", "").strip()
    if not raw:
        return LOOP_TASKS
    if not raw.isdigit() or int(raw) < 1:
        raise PipelineError(f"DDCLI_LOOP_TASKS must be a positive integer, not {raw!r}")
    return int(raw)


def build_body(p: Pipeline, loop_node: Node, plan: LoopPlan, schemas: dict, arranged: dict, d: int) -> Body | str:
    """The body as the tasks run it, or a reason it cannot run there (an expression that
    DuckDB would not evaluate exactly as Spark does)."""

    scope = loop_node.args["scope"]
    nodes = []
    for n in scope_nodes(p, scope):
        t = TaskNode(n.id, n.op, [] if n.op == "enter" else [i.id for i in n.inputs], schemas[n.id],
                     arranged=n.id in arranged)
        a = n.args
        if n.op in ("select", "filter"):
            t = linear_task_node(n, schemas, arranged)
            if isinstance(t, str):
                return t
        elif OPERATORS[n.op].family == JOIN:
            t.on, t.nulls_equal = list(a["on"]), a.get("nulls_equal", False)
        elif OPERATORS[n.op].family == REDUCE:
            t.key, t.reducer = reduce_spec(n, schemas[n.inputs[0].id].names)
        elif n.op == "enter":
            t.at_priority = node_priority(n) is not None  # its updates arrive at their iterations already
        elif n.op == "variable" and node_priority(n) is not None:
            sql = portable_sql(node_priority(n), schemas[n.id].names)
            if sql is None or not pa.types.is_integer(duck_type(sql, schemas[n.id]) or pa.null()):
                return f"{n.describe()}: priority {node_priority(n)!r} is not one DuckDB evaluates as Spark does"
            t.priority = sql
        nodes.append(t)
    variables = [(v.id, v.inputs[0].id, v.args["result"].id) for v in scope.variables]
    leaves = [(l.id, l.inputs[1].id) for l in p.nodes if l.op == "leave" and l.inputs[0] is loop_node]
    return Body(scope.name, d, nodes, variables, leaves, loop_node.args["max_rounds"])


def linear_task_node(n: Node, schemas: dict, arranged: dict) -> TaskNode | str:
    """A ``select`` or ``filter`` as a task runs it (its expressions in DuckDB's SQL), or
    why it cannot run there (an expression DuckDB would not evaluate as Spark does)."""
    t = TaskNode(n.id, n.op, [i.id for i in n.inputs], schemas[n.id], arranged=n.id in arranged)
    a, src = n.args, schemas[n.inputs[0].id]
    if n.op == "select":
        if not all(isinstance(c, str) for c in a["columns"]):
            return f"{n.describe()} selects a Spark column object"
        t.columns = list(a["columns"])
        for k, e in a["exprs"].items():
            sql = portable_sql(e, src.names)
            if sql is None or duck_type(sql, src) != schemas[n.id].field(k).type:
                return f"{n.describe()}: expression {e!r} is not one DuckDB evaluates as Spark does"
            t.exprs[k] = sql
    else:
        sql = portable_sql(a["condition"], src.names)
        if sql is None or duck_type(sql, src) != pa.bool_():
            return f"{n.describe()}: condition {a['condition']!r} is not one DuckDB evaluates as Spark does"
        t.condition = sql
    return t


@functools.lru_cache(maxsize=1024)  # a warm engine plans the same loops again and again
def duck_type(sql: str, schema: pa.Schema) -> pa.DataType | None:
    """The type DuckDB gives the expression ``sql`` over columns of ``schema`` (None: it refuses it)."""
    import duckdb

    con = duckdb.connect()
    try:
        con.register("t", schema.empty_table())
        return con.sql(f"SELECT ({sql}) AS x FROM t").to_arrow_table().schema.field("x").type
    except Exception:  # noqa: BLE001 - any DuckDB refusal means: not portable
        return None
    finally:
        con.close()


@dataclass
class Engine:
    """What the way a loop runs in tasks depends on in the Spark session: the tasks it can run
    at once (``slots``; None: unknown before a cluster's executors register), whether it is
    local mode, whether Spark's dynamic allocation is on (None: unknown) and the folder every
    executor sees for the exchange (the store's; None: the store is not in a folder)."""

    slots: int | None
    local: bool
    dynamic_allocation: bool | None = False
    shared_root: str | None = None


@dataclass
class Resident:
    """A loop runs resident in ``tasks`` tasks, routing each arranged node by ``keys``
    (``ops.loops.exchange.read_keys``), exchanging through a folder under ``root``."""

    tasks: int
    keys: dict[int, list[str]]
    root: str


def resident_decision(plan: LoopPlan, body: Body, engine: Engine) -> Resident | str:
    """How the loop runs resident, or why it does not (empty: it is partition-local, dealt
    by columns). A loop that is not resident and no columns deal runs in one task."""
    import tempfile

    if plan.by and loop_path() != "resident":
        return ""
    # the tasks that can run at once now: a barrier stage of more partitions than that never
    # starts (Spark retries its slot check, then fails the job); on a cluster not the
    # session's spark.default.parallelism (4), but its executors' cores
    tasks = engine.slots
    if tasks is None:
        return "the cluster's task slots are known once its executors register"
    if tasks < 1:
        return "the session knows of no task slot (no executor registered)"
    cap = resident_task_cap()
    if min(tasks, cap) < 2 and loop_path() != "resident":
        return "the session has one task slot" if tasks < 2 else f"DDCLI_LOOP_TASKS={cap}"
    tasks = min(tasks, cap)
    keys = read_keys(body)
    if isinstance(keys, str):
        return keys
    if engine.local:
        return Resident(tasks, keys, tempfile.gettempdir())
    if engine.dynamic_allocation is None:
        return "whether Spark's dynamic allocation is on is known once the session starts"
    if engine.dynamic_allocation:
        return "Spark's dynamic allocation is on (tasks that run together need fixed executors)"
    if engine.shared_root is None:
        return "its tasks would need a shared folder to exchange rows, and the store is not in one"
    return Resident(tasks, keys, engine.shared_root)


#: rows (stored state and the run's new updates) up to which a loop no columns deal runs in
#: one task rather than resident, in local mode: the resident tasks share the machine's
#: cores and meet at every round, which costs more than sharing so few rows saves
#: (node-set reach over 2,000 edges at load 17: a run of 10^4 updates 12.3 s in one task,
#: 28.9 s in two resident tasks; of 2 updates 7.8 s and 16.8 s)
FEW_ROWS = 200_000


def few_rows_decision(res: Resident | str, rows: int, local: bool) -> Resident | str:
    """:func:`resident_decision`, once the loop's rows are known: in local mode, with the
    default loop path, a resident loop of at most :data:`FEW_ROWS` rows runs in one task."""
    if isinstance(res, Resident) and local and loop_path() == "auto" and rows <= FEW_ROWS:
        return f"{rows:,} rows, few enough for one task"
    return res


def stored_refusal(plan: LoopPlan, stored_rows: int, tasks: int, limit: int) -> str:
    """Why a loop that no columns deal goes round by round before any task job: its stored
    state alone holds more than ``limit`` rows a task (empty: it does not)."""
    if stored_rows <= limit * max(1, tasks):
        return ""
    return (f"no columns deal it to tasks, and its stored state holds {stored_rows:,} rows, "
            f"more than {limit:,} rows a task for {max(1, tasks)} task{'s' if tasks > 1 else ''} "
            f"({plan.unpartitioned})")
