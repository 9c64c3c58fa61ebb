"""A loop's rounds inside one Spark task, over Arrow: the partition-local fixed point.

The same differential rounds as ``ops/loops/rounds.py``, on the rows one task holds (the rows
of its partition values, plus every broadcast collection): round ``i`` pushes the
updates pending at iteration ``i`` through the body; each stateful operator meets a new
update with everything processed before it (its arrangement: old state from earlier runs
and batches, then every earlier round) exactly once; what a variable's value changes by
is fed back one iteration later (a prioritized variable's at its priority if that is later);
collections entered at a priority wait in pools until their iteration comes, as in
``ops/loops/rounds.py``; the loop stops when nothing is pending. Reduces call the
engine's own kernel (``ops.reduce.kernel.reduce_delta``), joins the join's sweep
(``ops.operators.join_sweep.all_pairs``), SQL expressions run in an in-process DuckDB,
consolidation in pyarrow: no Python loop over rows.

An arrangement read by operators is a spine of batches (``ops/loops/spine.py``) whose rows
of a key are found by binary search, so a round costs its changes, not the state; batches
are advanced to the current iteration (the loop's frontier: nothing later can tell older
iterations apart, as in ``LoopView``) and consolidated as they merge. What the task
returns as the nodes' processed updates keeps every exact iteration, and outer times
from the batch's floor on (``record_floor``: no later batch or run reads below it), for
the state the store keeps between runs. A join sweeps the outer time
(``ops/operators/join_sweep.py``): a change meets the rows alive at its time, not every update of
its key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.columnar import matchable_rows, np_int
from ops.loops.spine import Spine
from ops.operators.join_static import StaticSide, usable_key
from ops.operators.join_sweep import all_pairs
from storage.lattice import time_columns
from storage.layer import update_schema
from storage.row_order import group_sum

_PLAIN = re.compile(r'^"[A-Za-z_][A-Za-z0-9_]*"$')  # portable_sql's form of a bare column
CONSOLIDATE_OLD = 4  # a reduce consolidates the old rows it reads when they are this many times its new ones
NULL_MARK = -(2 ** 63)  # the iteration of a record whose priority is null (as ops/loops/priority.py marks it)


@dataclass
class TaskNode:
    """One operator of the body, as the task needs it (no Spark objects: it is pickled)."""

    id: int
    op: str
    inputs: list[int]
    schema: pa.Schema  # data columns of its updates
    arranged: bool = False
    columns: list[str] = field(default_factory=list)  # select: passed-through columns
    exprs: dict[str, str] = field(default_factory=dict)  # select: name -> DuckDB SQL
    condition: str | None = None  # filter: DuckDB SQL
    on: list[str] = field(default_factory=list)  # join keys
    nulls_equal: bool = False  # join: a null key matches a null key (else nothing)
    key: list[str] = field(default_factory=list)  # reduce keys
    reducer: object = None
    at_priority: bool = False  # enter: its updates come at their own iterations (enter_at)
    priority: str | None = None  # variable: DuckDB SQL of its priority (feedback waits for it)


@dataclass
class Body:
    """The loop body: nodes in evaluation order, variables ``(variable, initial, result)``,
    leaves ``(leave, inner node)``, the inner time dimension ``d``."""

    name: str
    d: int
    nodes: list[TaskNode]
    variables: list[tuple[int, int, int]]
    leaves: list[tuple[int, int]]
    max_rounds: int


@dataclass
class Outcome:
    leaves: dict[int, pa.Table]  # leave id -> changes in outer times
    records: dict[int, pa.Table]  # arranged node id -> the updates it processed
    rounds: int
    updates: int
    converged: bool
    refused: tuple[int, int] | None = None  # (node id, iteration): a null or negative priority
    held: int = 0  # the most rows the task held after a round (state, records, pending, outputs)
    too_big: bool = False  # stopped: it held more than its row budget


def conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    if t.schema.equals(schema):  # most tables of a round are already: a cast costs ~40 us
        return t
    return t.select(schema.names).cast(schema)


def consolidate(t: pa.Table, advanced: tuple[str, int] | None = None) -> pa.Table:
    """Equal (data, time) summed, zeros dropped; with ``advanced`` (column, floor) that
    time column first raised to the floor (``advance``)."""
    if t.num_rows == 0:
        return t
    cols = [c for c in t.column_names if c != "diff"]
    if all(pa.types.is_integer(t.schema.field(c).type) and t.column(c).null_count == 0 for c in cols):
        # integer columns (ids, times): one sort of the rows packed into int64s, several
        # times faster than a hash aggregation on the tables of a loop round; the rows kept
        # are taken from the same arrays (a table's take costs more)
        keys = [np_int(t.column(c)) for c in cols]
        if advanced is not None:
            i = cols.index(advanced[0])
            keys[i] = np.maximum(keys[i], advanced[1])
        rep, total = group_sum(keys, np_int(t.column("diff")))
        kept = total != 0
        out = {c: _int_array(k[rep[kept]], t.schema.field(c).type) for c, k in zip(cols, keys)}
        out["diff"] = pa.array(total[kept], pa.int64())
        return pa.Table.from_arrays([out[c] for c in t.column_names], schema=t.schema)
    if advanced is not None:
        t = advance(t, *advanced)
    g = t.group_by(cols, use_threads=False).aggregate([("diff", "sum")])
    g = g.filter(pc.not_equal(g.column("diff_sum"), 0))
    return g.rename_columns([*cols, "diff"]).select(t.column_names).cast(t.schema)


def _int_array(x: np.ndarray, typ: pa.DataType) -> pa.Array:
    """int64 values of a column of integer type ``typ`` (they came from it: they fit)."""
    return pa.array(x, pa.int64()) if typ == pa.int64() else pa.array(x, pa.int64()).cast(typ)


def advance(t: pa.Table, col: str, floor: int) -> pa.Table:
    i = t.schema.get_field_index(col)
    return t.set_column(i, col, pc.max_element_wise(t.column(col), pa.scalar(floor, pa.int64())))


def _present(t: pa.Table | None) -> pa.Table | None:
    return t if t is not None and t.num_rows else None


def _union(tables: list[pa.Table | None], schema: pa.Schema) -> pa.Table | None:
    present = [conform(t, schema) for t in tables if t is not None and t.num_rows]
    if not present:
        return None
    return present[0] if len(present) == 1 else pa.concat_tables(present)


def _equal_bits(typ: pa.DataType) -> bool:
    return (pa.types.is_integer(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ)
            or pa.types.is_boolean(typ) or pa.types.is_date(typ))


def rows_of_keys(con, t: pa.Table, touched: pa.Table, key: list[str]) -> pa.Table:
    """The rows of ``t`` whose ``key`` some row of ``touched`` holds (nulls equal). One
    column of one type whose equal values have equal bits (not floats: -0.0 = 0.0): an
    Arrow membership test (a DuckDB query costs some 5 ms of planning, and a loop's tail
    rounds touch a handful of keys); else a semi-join in DuckDB (``con``)."""
    typ = t.schema.field(key[0]).type
    if len(key) == 1 and typ == touched.schema.field(key[0]).type and _equal_bits(typ):
        wanted = pc.unique(touched.column(key[0]))
        return t.filter(pc.is_in(t.column(key[0]), value_set=wanted, skip_nulls=False))
    cond = " AND ".join(f"o.{_quote(k)} IS NOT DISTINCT FROM k.{_quote(k)}" for k in key)
    keys = ", ".join(_quote(k) for k in key)
    con.register("_dd_old", t)
    con.register("_dd_touched", touched)
    try:
        return con.sql(f"SELECT o.* FROM _dd_old o SEMI JOIN (SELECT DISTINCT {keys} FROM _dd_touched) k "
                       f"ON {cond}").to_arrow_table()
    finally:
        con.unregister("_dd_old")
        con.unregister("_dd_touched")


def table_sql(con, q: str, t: pa.Table) -> pa.Table:
    """The result of query ``q`` over ``t``, registered as ``t`` on ``con`` for it."""
    con.register("t", t)
    try:
        return con.sql(q).to_arrow_table()
    finally:
        con.unregister("t")


def select_rows(con, n: TaskNode, t: pa.Table, tcols: list[str]) -> pa.Table:
    """A ``select``'s changes: references and renames in Arrow, expressions in DuckDB (``con``)."""
    plain = {k: e[1:-1] for k, e in n.exprs.items() if _PLAIN.match(e) and e[1:-1] in t.column_names}
    if len(plain) == len(n.exprs):  # references and renames only: no SQL
        cols = {c: t.column(c) for c in n.columns} | {k: t.column(c) for k, c in plain.items()}
        cols |= {c: t.column(c) for c in tcols + ["diff"]}
        return pa.table(cols)
    items = [_quote(c) for c in n.columns] + [f"({e}) AS {_quote(k)}" for k, e in n.exprs.items()]
    items += [_quote(c) for c in tcols + ["diff"]]
    return table_sql(con, f"SELECT {', '.join(items)} FROM t", t)


def filter_rows(con, n: TaskNode, t: pa.Table) -> pa.Table:
    """A ``filter``'s changes, in DuckDB (``con``)."""
    return table_sql(con, f"SELECT * FROM t WHERE ({n.condition})", t)


def _quote(c: str) -> str:
    return '"' + c.replace('"', '""') + '"'


class LazyDuckDB:
    """A DuckDB connection made when first used: connecting costs 10-25 ms, and a body of
    joins, renames and distincts over integer keys never queries."""

    def __init__(self):
        self._con = None

    def __getattr__(self, name: str):
        if self._con is None:
            import duckdb
            self._con = duckdb.connect()
        return getattr(self._con, name)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()


class _Round:
    """DuckDB and the arrangements of one task's fixed point."""

    def __init__(self, body: Body, old: dict[int, pa.Table], router=None):
        self.body = body
        self.con = LazyDuckDB()
        self.tcols = time_columns(body.d)
        self.schemas = {n.id: update_schema(n.schema, body.d) for n in body.nodes}
        # advanced to the loop's frontier when batches merge: rounds' rows cancel
        self.arr = {n.id: Spine(lambda t: consolidate(t, (self.tcols[-1], self.iteration)))
                    for n in body.nodes if n.arranged}
        self.iteration = 0
        # (join node, its input) -> (version of that input's spine, its prepared side); and
        # the version each join last saw: a side unchanged for a round is prepared
        self.static: dict[tuple[int, int], tuple[int, StaticSide | None]] = {}
        self.seen: dict[tuple[int, int], int] = {}
        for nid, spine in self.arr.items():  # in the body's order: with a router every task routes alike
            t = _present(old.get(nid))
            t = None if t is None else conform(t, self.schemas[nid])
            if router is not None and nid in router.keys:
                t = router.route(self.con, nid, t, self.schemas[nid])
            spine.add(t)

    def close(self) -> None:
        self.con.close()

    def sql(self, q: str, **tables: pa.Table) -> pa.Table:
        for name, t in tables.items():
            self.con.register(name, t)
        try:
            return self.con.sql(q).to_arrow_table()
        finally:
            for name in tables:
                self.con.unregister(name)

    def old(self, nid: int, key: list[str], touched: pa.Table) -> pa.Table | None:
        """What earlier rounds (and runs) processed of ``nid``, for the keys ``touched``
        holds, and perhaps a few other keys (``Spine.matching``)."""
        return self.arr[nid].matching(self.con, key, touched)

    def delay_at(self, t: pa.Table, priority: str) -> pa.Table:
        """Feedback of a prioritized variable: to the next iteration or to the record's
        priority, whichever is later; a null or negative priority is marked (``ops/loops/priority.py``)."""
        last = _quote(self.tcols[-1])
        p = "CAST((" + priority + ") AS BIGINT)"
        mark = f"CASE WHEN {p} IS NULL THEN {NULL_MARK} WHEN {p} < 0 THEN {p} ELSE greatest({last} + 1, {p}) END"
        items = [f"{mark} AS {last}" if c == self.tcols[-1] else _quote(c) for c in t.column_names]
        return self.sql(f"SELECT {', '.join(items)} FROM t", t=t).cast(t.schema)

    # ---- operators: each takes and returns update tables (None: no changes)

    def select(self, n: TaskNode, t: pa.Table) -> pa.Table:
        return select_rows(self.con, n, t, self.tcols)

    def filter(self, n: TaskNode, t: pa.Table) -> pa.Table:
        return filter_rows(self.con, n, t)

    def pairs(self, left: pa.Table, right: pa.Table, on: list[str], right_cols: list[str]) -> pa.Table:
        """Every pair of a ``left`` and a ``right`` update of one key, swept over the outer
        time (``ops/operators/join_sweep.py``): each change meets the rows alive at its time, not
        every update of its key (a label change of cc against every earlier update of its
        node's links)."""
        right = right.select([*on, *right_cols, *self.tcols, "diff"])
        if self._one_iteration(left, right):
            # every pair meets at the current iteration: raised to it, the rows of earlier
            # rounds merge, and only the outer times tell rows apart
            last = self.tcols[-1]
            left, right = advance(left, last, self.iteration), advance(right, last, self.iteration)
        return all_pairs(left, right, on, self.body.d)

    def _one_iteration(self, left: pa.Table, right: pa.Table) -> bool:
        """Every pair of rows meets at the current iteration: one side is all at it, the
        other at or before it (a round's changes against what earlier rounds processed)."""
        it = self.tcols[-1]
        lo_l, hi_l = pc.min_max(left.column(it)).values()
        lo_r, hi_r = pc.min_max(right.column(it)).values()
        i = self.iteration
        return max(hi_l.as_py(), hi_r.as_py()) == i and (lo_l.as_py() == i or lo_r.as_py() == i)

    def join(self, n: TaskNode, d_left, d_right) -> pa.Table | None:
        """``dA ⋈ (B_old + dB) + A_old ⋈ dB`` (``ops/operators/join.py``)."""
        semi = n.op == "semijoin"
        li, ri = n.inputs
        rschema = self.schemas[ri]
        if not n.nulls_equal:  # every pair holds a change: one with a null key matches nothing
            d_left, d_right = matchable_rows(d_left, n.on), matchable_rows(d_right, n.on)
            if d_left is None and d_right is None:
                return None
        right_cols = [] if semi else [c for c in rschema.names if c not in n.on + self.tcols + ["diff"]]

        def view(t):
            return t.select(n.on + self.tcols + ["diff"]) if semi else t

        if (d_left is None) != (d_right is None):
            got = self._static_pairs(n, d_left, d_right, semi, right_cols)
            if got is not None:
                return _union([got], self.schemas[n.id])
        parts = []
        if d_left is not None:
            old_r = self.old(ri, n.on, d_left)
            partners = _union([d_right, old_r], rschema)
            if partners is not None:
                parts.append(self.pairs(d_left, view(partners), n.on, right_cols))
        if d_right is not None:
            old_l = self.old(li, n.on, d_right)
            if old_l is not None:
                parts.append(self.pairs(old_l, view(d_right), n.on, right_cols))
        return _union(parts, self.schemas[n.id])

    def _static_pairs(self, n: TaskNode, d_left, d_right, semi: bool, right_cols: list[str]) -> pa.Table | None:
        """The join's changes when only one side changes this round, met with the other
        side's intervals prepared once (``ops/operators/join_static.py``) while that side
        stays as it was the round before (an entered collection, after its first round);
        None to sweep."""
        li, ri = n.inputs
        static_left = d_left is None
        sid, changes = (li, d_right) if static_left else (ri, d_left)
        if self.body.d != 2 or not usable_key(self.schemas[sid], n.on) or not usable_key(changes.schema, n.on):
            return None
        spine, tag = self.arr[sid], (n.id, sid)
        seen, self.seen[tag] = self.seen.get(tag), spine.version
        cached = self.static.get(tag)
        if cached is None or cached[0] != spine.version:
            if seen != spine.version:  # it changed in the last round: it may well change again
                return None
            others = [c for c in self.schemas[sid].names if c not in n.on + self.tcols + ["diff"]]
            data = others if static_left else right_cols
            whole = spine.whole() if n.nulls_equal else matchable_rows(spine.whole(), n.on)
            cached = self.static[tag] = (spine.version, StaticSide.of(whole, n.on[0], data, self.tcols, static_left))
        side, it = cached[1], self.tcols[-1]
        if side is None or side.last_iteration > self.iteration:
            return None
        lo, hi = pc.min_max(changes.column(it)).values()
        if lo.as_py() != self.iteration or hi.as_py() != self.iteration:
            return None
        data = right_cols if static_left else [c for c in changes.column_names if c not in n.on + self.tcols + ["diff"]]
        return side.pairs(changes, data, self.tcols, self.iteration)

    def reduce(self, n: TaskNode, t: pa.Table) -> pa.Table | None:
        from ops.reduce.kernel import reduce_delta

        key = n.key
        in_schema = self.schemas[n.inputs[0]]
        values = [c for c in in_schema.names if c not in key + self.tcols + ["diff"]]
        new = t.append_column("_new", pa.array(np.ones(t.num_rows, bool)))
        parts = [new]
        old = self.old(n.inputs[0], key, t)
        if old is not None and key:  # the old updates of the touched keys, advanced to the frontier
            old = rows_of_keys(self.con, old, t, key)
        if old is not None:
            if old.num_rows:
                old = advance(conform(old, in_schema), self.tcols[-1], self.iteration)
                if old.num_rows >= CONSOLIDATE_OLD * t.num_rows:
                    # a long history of few touched keys: its rows of earlier iterations
                    # merge or cancel (cc's reduces of a run over 3 M stored rows read 2-4x
                    # fewer rows); with a short one the sort costs more than it saves
                    # (reach at 10^5 updates a run: about 9% slower consolidating always)
                    old = consolidate(old)
                parts.append(old.append_column("_new", pa.array(np.zeros(old.num_rows, bool))))
        table = pa.concat_tables(parts) if len(parts) > 1 else new
        out = reduce_delta(table, key, values, self.body.d, n.reducer)
        return _present(conform(out, self.schemas[n.id]))


def fixed_point(body: Body, entered: dict[int, pa.Table], old: dict[int, pa.Table],
                record_floor: int | None = None, row_budget: int | None = None, router=None) -> Outcome:
    """Run ``body`` to its fixed point on one task's rows: ``entered`` (enter node id -> this
    batch's updates entering the loop) and ``old`` (arranged node id -> its old updates).
    ``record_floor``: the processed updates it returns are advanced to it in the first time
    coordinate (every later read is at or beyond it), so the rounds' updates at the batch's
    many outer times merge before they leave the task. ``row_budget``: the task stops
    (``too_big``) once the rows it holds after a round are more: its rows are too many for
    one task, and the loop runs round by round instead.

    ``router`` (``ops.loops.exchange.Router``): this task is one of several that run the
    fixed point together, each owning the rows of every arrangement whose read key hashes
    to it. Each arranged node's changes are routed to their owners as they are computed,
    the tasks agree on each round's iteration and on stopping, and the leaves' changes are
    routed by their rows before they are consolidated."""
    r = _Round(body, old, router)
    last = r.tcols[-1]
    by_id = {n.id: n for n in body.nodes}
    pending: dict[int, pa.Table | None] = {v: None for v, _, _ in body.variables}
    # collections entered at a priority: pools released iteration by iteration
    pools = {n.id: _present(entered.get(n.id)) for n in body.nodes if n.op == "enter" and n.at_priority}
    plain = any(_present(entered.get(n.id)) is not None for n in body.nodes if n.op == "enter" and not n.at_priority)
    # advanced to the floor when batches merge, a record's rows at the batch's many outer
    # times merge: the cc tasks of the bench held 1.5 M record rows that leave the task as 20 k
    floor = None if record_floor is None else (r.tcols[0], record_floor)
    records = {n.id: Spine(lambda t: consolidate(t, floor))
               for n in body.nodes if n.arranged and n.op != "enter"}
    collected: dict[int, list[pa.Table]] = {l: [] for l, _ in body.leaves}
    first, rounds, updates, peak = True, 0, 0, 0
    mins = _least_iterations(pools, last)
    iteration = min([0] * plain + list(mins.values()), default=None)
    if router is not None:
        iteration = min((x for x in router.agree(iteration) if x is not None), default=None)
    iteration = 0 if iteration is None else iteration
    if iteration < 0:
        r.close()
        return _refused(mins, iteration)
    while True:
        r.iteration = iteration
        fr = _evaluate_round(r, body, entered, pools, pending, first, iteration, router)
        for n in body.nodes:  # processed: old for later rounds
            t = fr[n.id]
            if t is not None and n.arranged:
                r.arr[n.id].add(t)
                if n.id in records:
                    records[n.id].add(t)
        updates += _feed_back(r, body, fr, pending, by_id, last)
        for l, inner in body.leaves:
            if fr.get(inner) is not None:
                collected[l].append(fr[inner])
        peak = max(peak, _held_rows(*({k: s.tables() for k, s in spines.items()} for spines in (r.arr, records)),
                                     collected, pending, pools))
        mins = _least_iterations({**pending, **pools}, last)
        following = min(mins.values(), default=None)
        if router is not None:  # every task's: the least next iteration, the most rows held
            notes = router.agree([following, peak])
            following = min((x for x, _ in notes if x is not None), default=None)
            peak = max(p for _, p in notes)
        if row_budget is not None and peak > row_budget:
            r.close()
            return Outcome({}, {}, rounds + 1, updates, True, held=peak, too_big=True)
        if following is None:
            break
        if following < 0:
            r.close()
            return _refused(mins, following)
        rounds += 1
        if rounds >= body.max_rounds:
            r.close()
            return Outcome({}, {}, rounds, updates, False)
        first, iteration = False, following
    leaves = _leaves(r, body, collected, router)
    recs = {nid: _present(consolidate(s.whole(), floor))
            for nid, s in records.items() if s.batches}
    r.close()
    return Outcome({k: v for k, v in leaves.items() if v is not None}, {k: v for k, v in recs.items() if v is not None},
                   rounds + 1, updates, True, held=peak)


def _evaluate_round(r: _Round, body: Body, entered: dict[int, pa.Table], pools: dict, pending: dict,
                    first: bool, iteration: int, router) -> dict[int, pa.Table | None]:
    """Every node's changes in one round (``first``: the round that presents the collections
    entered plainly); the entered pools and the variables' pending updates of this
    iteration are taken out of ``pools`` and ``pending``."""
    last = r.tcols[-1]
    fr: dict[int, pa.Table | None] = {}
    for n in body.nodes:
        ins = [fr.get(i) for i in n.inputs]
        out = None
        if n.op == "enter":
            if n.id in pools:
                p = pools[n.id]
                if p is not None:
                    at = pc.equal(p.column(last), iteration)
                    out = _present(p.filter(at))
                    pools[n.id] = _present(p.filter(pc.invert(at)))
            else:
                out = _present(entered.get(n.id)) if first else None
        elif n.op == "variable":
            p = pending[n.id]
            fb = None
            if p is not None:
                at = pc.equal(p.column(last), iteration)
                fb = _present(p.filter(at))
                pending[n.id] = _present(p.filter(pc.invert(at)))
            out = _union([ins[0], fb], r.schemas[n.id])
        else:
            evaluator = TASK_EVALUATORS.get(n.op)
            if evaluator is None:
                raise ValueError(f"operator {n.op} cannot run inside a task")
            out = evaluator(r, n, ins)
        out = _present(out if out is None else conform(out, r.schemas[n.id]))
        # routed by every task alike; a collection entered whole has nothing after round 0
        if router is not None and n.id in router.keys and (first or n.op != "enter" or n.id in pools):
            out = router.route(r.con, n.id, out, r.schemas[n.id])
        if out is not None and n.arranged and n.op not in ("enter", "variable"):
            out = _present(consolidate(out))
        fr[n.id] = out
    return fr


def _join(r: _Round, n: TaskNode, ins: list) -> pa.Table | None:
    """``join`` and ``semijoin``."""
    return None if ins[0] is None and ins[1] is None else r.join(n, ins[0], ins[1])


def _concat(r: _Round, n: TaskNode, ins: list) -> pa.Table | None:
    return _union(ins, r.schemas[n.id])


def _one_input(fn):
    """The evaluator of an operator of one input, called only when that input changed."""
    return lambda r, n, ins: None if ins[0] is None else fn(r, n, ins[0])


def negated(t: pa.Table) -> pa.Table:
    """The updates of ``t`` with their diffs negated."""
    return t.set_column(t.schema.get_field_index("diff"), "diff", pc.negate(t.column("diff")))


def _negate(r: _Round, n: TaskNode, t: pa.Table) -> pa.Table:
    return negated(t)


TaskEvaluator = Callable[["_Round", TaskNode, list], "pa.Table | None"]

#: Every operator a loop's task evaluates besides its own ``enter`` and ``variable``, and the
#: function that turns its inputs' changes in one round (``None``: no changes) into its own:
#: the in-task counterpart of ``EVALUATORS`` (ops/run/evaluate.py). Operators marked
#: ``in_task`` in ops/dataflow/operators.py are the loop planner's promise that they are here.
TASK_EVALUATORS: dict[str, TaskEvaluator] = {
    "select": _one_input(lambda r, n, t: r.select(n, t)),
    "filter": _one_input(lambda r, n, t: r.filter(n, t)),
    "negate": _one_input(_negate),
    "consolidate": _one_input(lambda r, n, t: consolidate(t)),
    "arrange": _one_input(lambda r, n, t: t),
    "concat": _concat,
    "join": _join,
    "semijoin": _join,
    "reduce": _one_input(lambda r, n, t: r.reduce(n, t)),
    "distinct": _one_input(lambda r, n, t: r.reduce(n, t)),
    "threshold": _one_input(lambda r, n, t: r.reduce(n, t)),
}


def _feed_back(r: _Round, body: Body, fr: dict, pending: dict, by_id: dict, last: str) -> int:
    """Each variable's change in this round (its result minus its initial value), delayed
    to the next iteration (or to its priority) and added to its pending updates; returns
    how many updates were fed back."""
    updates = 0
    for v, init, result in body.variables:
        res, ini = fr.get(result), fr.get(init)
        neg = None if ini is None else ini.set_column(ini.schema.get_field_index("diff"), "diff",
                                                      pc.negate(ini.column("diff")))
        change = _union([res, neg], r.schemas[v])
        if change is not None:
            if by_id[v].priority is None:
                change = change.set_column(change.schema.get_field_index(last), last,
                                           pc.add(change.column(last), 1))
            else:
                change = r.delay_at(change, by_id[v].priority)
            updates += change.num_rows
        merged = _union([pending[v], change], r.schemas[v])
        pending[v] = None if merged is None else _present(consolidate(merged))
    return updates


def _leaves(r: _Round, body: Body, collected: dict[int, list[pa.Table]], router) -> dict[int, pa.Table]:
    """Each leave's changes over every round, out of the loop (the iteration summed away)."""
    last = r.tcols[-1]
    outer = time_columns(body.d - 1)
    leaves = {}
    for l, inner in body.leaves:
        t = _union(collected[l], r.schemas[inner])
        if router is not None:  # equal rows (and outer times) meet in one task
            t = router.route_by(r.con, t, [c for c in r.schemas[inner].names if c not in (last, "diff")],
                                r.schemas[inner])
        if t is None:
            continue
        t = t.drop_columns([last])
        t = t.rename_columns([c for c in t.column_names[:len(t.column_names) - len(outer) - 1]] + outer + ["diff"])
        leaves[l] = _present(consolidate(t))
    return leaves


def _held_rows(*held: dict) -> int:
    """Rows of the tables the task holds (each table once: a round's output may be both
    state and a record)."""
    tables = {}
    for d in held:
        for v in d.values():
            for t in (v if isinstance(v, list) else [v]):
                if t is not None:
                    tables[id(t)] = t.num_rows
    return sum(tables.values())


def _least_iterations(pools: dict[int, pa.Table | None], last: str) -> dict[int, int]:
    """Node id -> the least iteration its pool holds (pools holding nothing left out)."""
    return {k: pc.min(t.column(last)).as_py() for k, t in pools.items() if t is not None}


def _refused(mins: dict[int, int], least: int) -> Outcome:
    """A pool holds a record whose priority was null or negative (``least``, of this task
    or of another): the loop stops at once, and the driver says which node and value
    (``ops.loops.priority.check_iteration``) from the task that holds it."""
    nid, value = min(mins.items(), key=lambda kv: kv[1], default=(None, None))
    if value != least:
        return Outcome({}, {}, 0, 0, True)
    return Outcome({}, {}, 0, 0, True, refused=(nid, value))
