"""A reduce task's rows under a memory budget: its keys' stored old updates, and its input.

For a small run (``ops/reduce/operator.py``) only the new updates are shuffled; each task looks up
the stored old updates of the keys it holds with DuckDB (``ops/reduce/old_updates.py``) and runs
the kernel on both. Three ways, cheapest first:

* a summary of the old updates (``ops/reduce/summaries/insertions.py``: one-dimensional times, new
  updates that only insert): a few rows per key whatever its history; for count, sum and
  agg of sums, averages and counts, a summary of old and new updates alike, retractions
  included (``ops/reduce/summaries/abelian.py``): a few rows per key and new time;
* the old updates whole, when the touched keys hold at most ``budget`` of them;
* otherwise in shares: every row of the touched keys (old and new updates alike) is dealt
  to one of ``ceil(old rows / budget)`` shares by a hash of its value columns, the shares
  are reduced one after another to what the reducer needs of them (the same first stage
  as a big run's split among tasks, ``ops/reduce/operator.py`` ``_split_keys``), and the results
  are reduced together. A hot key whose history retracts never lands whole in the task.
  A reducer whose key cannot be split (user logic, a reduce without value columns) takes
  the touched keys in groups of at most ``budget`` old updates instead; a single key of
  user logic over the grid's cell budget is refused with its error before its rows are read.

Every other reduce task (a first run, a big run of a reducer that cannot be split, a
round of a loop against its view, the second stage of a split) receives all its keys'
rows through the shuffle. It holds them with ``ops/reduce/held_rows.py``: in Arrow up to the
budget, beyond it in a DuckDB table that spills, reduced in the same shares or key groups
(``reduce_held``); a key that cannot be split and is over the budget goes in slices of its
first time coordinate, so a hot key is never taken whole there either.

DuckDB holds the looked-up rows under a memory limit and spills beyond it, so the task's
memory is the limit plus one share. With one-dimensional times every new update is
usually later than every stored one, and then a share's old rows are accumulated to one
update per row at the first new time first: only its live rows reach the kernel.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.columnar import exclusive_cumsum, row_ids
from ops.dataflow.reducers import Distinct, Threshold
from ops.errors import KeyTooLarge
from ops.reduce import kernel as rk
from ops.reduce.held_rows import TABLE, HeldRows
from ops.reduce.old_updates import OldLookup
from ops.reduce.summaries.abelian import abelian_rows, invertible
from ops.reduce.summaries.insertions import accumulate_old_rows, of_insertions, old_summary
from storage.lattice import time_columns
from storage.sql.duck import quote

#: Rows a reduce task brings into Arrow at once (``DDCLI_REDUCE_TASK_ROWS``): old updates
#: looked up, or its input held: about the sweeps' measured ~0.3 GB for a key of 10^6
#: updates (``ops/reduce/operator.py`` ``SPLIT_ROWS``).
TASK_ROWS = 1 << 20
_SHARE = "_ddcli_share"


def task_rows() -> int:
    """The budget, read where the plan is made (the driver) and shipped to the tasks."""
    return max(1, int(os.environ.get("DDCLI_REDUCE_TASK_ROWS", TASK_ROWS)))


def in_shares(reducer: rk.Reducer, values_schema: pa.Schema) -> bool:
    """Whether a key's rows can be reduced share by share: the reducers a big run splits
    among tasks, and those that look at one value row at a time."""
    return bool(values_schema.names) and (isinstance(reducer, (Distinct, Threshold))
                                          or rk.splits(reducer, values_schema))


def reduce_with_lookup(new: pa.Table, files: list[str], key: list[str], values: list[str], d: int,
                       reducer: rk.Reducer, out_arrow: pa.Schema, *, summary: bool, budget: int,
                       shares_ok: bool) -> pa.Table:
    """The output changes of ``reducer`` caused by a task's ``new`` updates (``_new``
    true), its keys' old updates read from ``files``: summarised (``summary``: the reducer
    has one, ``ops/reduce/summaries/insertions.py``), whole, or, over ``budget``, in shares (``shares_ok``)
    or in groups of keys."""
    look, sql = _lookup(new, files, key, values)
    table = _with_old_updates(new, look, sql, key, values, reducer if summary else None, budget)
    if table is not None:
        return rk.reduce_delta(table, key, values, d, reducer)
    if not shares_ok:
        return _by_key_groups(new, files, look, sql, key, values, d, reducer, out_arrow, budget)
    shares = math.ceil(look.old_count(sql) / budget)
    return _by_shares(new, look, sql, key, values, d, reducer, out_arrow, shares)


def with_old_updates(new: pa.Table, files: list[str], key: list[str], values: list[str],
                     summary: rk.Reducer | None = None, budget: int | None = None) -> pa.Table | None:
    """``new`` plus the stored old updates of its keys (``_new`` false): with ``summary``
    and insertions only, a summary of them; None when they are more than ``budget``."""
    look, sql = _lookup(new, files, key, values)
    return _with_old_updates(new, look, sql, key, values, summary, budget)


def _with_old_updates(new: pa.Table, look: OldLookup, sql: str, key: list[str], values: list[str],
                      summary: rk.Reducer | None, budget: int | None) -> pa.Table | None:
    if summary is not None:
        time_col = time_columns(1)[0]
        values_schema = new.select(values).schema
        first_new = pc.min(new.column(time_col)).as_py()
        if pc.min(new.column("diff")).as_py() > 0 and of_insertions(summary, values_schema):
            if _old_before(look, sql, key, values, first_new):  # a few rows per key stand for them
                old = old_summary(look.con, key, values, new.schema, summary, time_col, first_new)
                if old is not None:
                    return _with_old(new, old)
        if invertible(summary, values_schema):  # the keys' totals, summed as the layers are read
            table = abelian_rows(look.con, list(look.what[0]), look.keys, sql, new, key, values, summary, time_col)
            if table is not None:
                return table
    rows = look.old_count(sql)
    if budget is not None and rows > budget:
        return None
    return _with_old(new, look.con.sql(sql).to_arrow_table() if rows else None)


def _old_before(look: OldLookup, sql: str, key: list[str], values: list[str], first_new: int) -> bool:
    """Whether none of the lookup's old updates is later than the first new time
    (accumulated as ``old_rows`` once for the reduces of a task): only then may a summary
    at that time stand for them. Stored state is compacted to the frontier the new
    updates start at, so its updates are often at that very time."""
    if not look.accumulated:
        look.latest_old = accumulate_old_rows(look.con, sql, key, values, time_columns(1)[0])
        look.accumulated = True
    return look.latest_old is None or look.latest_old <= first_new


def _lookup(new: pa.Table, files: list[str], key: list[str], values: list[str]) -> tuple[OldLookup, str]:
    """The task's lookup (kept for the reduces of one task) and the SQL of its keys' old updates."""
    from ops.operators.keyed_reads import keyed_source
    keys = new.select(key).group_by(key, use_threads=False).aggregate([])  # in a stable order: see OldLookup
    look = OldLookup.of(files, keys, key, values)
    if look.sql is None:  # once for the reduces of a task that share the lookup
        look.sql = keyed_source(look.con, files, keys, key)
    return look, look.sql


def _with_old(new: pa.Table, old: pa.Table | None) -> pa.Table:
    """``new`` plus ``old`` (``_new`` false) in ``new``'s schema."""
    if old is None or old.num_rows == 0:
        return new
    names = [c for c in new.column_names if c != "_new"]
    old = old.select(names).append_column("_new", pa.array(np.zeros(old.num_rows, bool)))
    return pa.concat_tables([new, old.select(new.column_names).cast(new.schema)])


def _by_shares(new: pa.Table, look: OldLookup, sql: str, key: list[str], values: list[str], d: int,
               reducer: rk.Reducer, out_arrow: pa.Schema, shares: int) -> pa.Table:
    """The touched keys' rows dealt to ``shares`` shares by their values, each share's old
    and new updates reduced to the first stage in turn, then the second stage over all."""
    con = look.con
    at = pc.min(new.column(time_columns(d)[-1])).as_py()
    con.register("new_rows", new)
    # the share of a row is a hash of its values, cast to the new rows' types on both sides
    share = _share_sql(con, "new_rows", values, shares)
    names = [c for c in new.column_names if c != "_new"]
    cols = ", ".join(quote(c) for c in names)
    con.execute(f"CREATE OR REPLACE TEMP TABLE old_shared AS SELECT {cols}, {share} AS {_SHARE} FROM ({sql})")
    new_share = con.sql(f"SELECT {share} FROM new_rows").to_arrow_table().column(0).to_numpy()
    # old rows stand accumulated at the first new time only when none is later (a run may
    # find stored updates at later times: an input that waited for another's upper)
    tcol = quote(time_columns(d)[-1])
    early = d == 1 and not con.sql(f"SELECT coalesce(max({tcol}) >= {at}, false) FROM old_shared").fetchall()[0][0]
    stage_one = _first_stage(reducer, key, values, d)
    per_row = isinstance(reducer, (Distinct, Threshold))
    firsts = []
    for i in range(shares):
        if early:  # every new update is later than every old one: accumulate the old rows at the first new time
            old = con.sql(_accumulated_sql(f"SELECT * FROM old_shared WHERE {_SHARE} = {i}", key + values,
                                           at)).to_arrow_table()
        else:
            old = con.sql(f"SELECT {cols} FROM old_shared WHERE {_SHARE} = {i}").to_arrow_table()
        mine = new.filter(pa.array(new_share == i))
        if mine.num_rows == 0 and per_row:  # no other share needs its rows
            continue
        part = stage_one(_with_old(mine, old))
        if part is not None and part.num_rows:
            firsts.append(part)
    con.execute("DROP TABLE old_shared")
    con.unregister("new_rows")
    return _second_stage(reducer, key, values, d, out_arrow, firsts)


def _by_key_groups(new: pa.Table, files: list[str], look: OldLookup, sql: str, key: list[str], values: list[str],
                   d: int, reducer: rk.Reducer, out_arrow: pa.Schema, budget: int) -> pa.Table:
    """The touched keys in groups of at most ``budget`` old updates (a key with more is a
    group of its own), each group's old updates read and reduced in turn."""
    from ops.operators.keyed_reads import duckdb_keyed_read
    k = ", ".join(quote(c) for c in key)
    counts = look.con.sql(f"SELECT {k}, count(*) AS _n FROM ({sql}) GROUP BY ALL").to_arrow_table()
    n = counts.column("_n").to_numpy()
    _refuse_oversized(counts, key, reducer, "stored updates")
    group = exclusive_cumsum(n) // budget
    stored = counts.select(key).cast(new.select(key).schema)
    kid, K = row_ids(pa.concat_tables([stored, new.select(key)]), key, ordered=False)
    group_of = np.full(K, -1, np.int64)  # keys without stored updates: -1, no lookup
    group_of[kid[:stored.num_rows]] = group
    new_group = group_of[kid[stored.num_rows:]]
    parts = []
    tcol = time_columns(d)[-1]
    at = pc.min(new.column(tcol)).as_py()
    early = d == 1 and not look.con.sql(f"SELECT coalesce(max({quote(tcol)}) > {at}, false) FROM ({sql})").fetchall()[0][0]
    for g in np.unique(new_group):
        mine = new.filter(pa.array(new_group == g))
        keys = stored.filter(pa.array(group == g))
        if g < 0:
            old = None
        elif early:  # no stored update is later than a new one: a row per live value row
            old = _accumulated_old(look, sql, keys, key, values, at)
        else:
            old = duckdb_keyed_read(files, keys, key)
        out = rk.reduce_delta(_with_old(mine, old), key, values, d, reducer)
        if out.num_rows:
            parts.append(out)
    return pa.concat_tables(parts) if parts else rk.empty_table(out_arrow)


def _accumulated_old(look: OldLookup, sql: str, keys: pa.Table, key: list[str], values: list[str],
                     at: int) -> pa.Table:
    """The stored old updates of ``keys`` accumulated at time ``at`` (d = 1): a key without
    value columns comes back as one row, however long its history."""
    con = look.con
    con.register("group_keys", keys)
    cond = " AND ".join(f"o.{quote(c)} IS NOT DISTINCT FROM g.{quote(c)}" for c in key)
    try:
        return con.sql(_accumulated_sql(f"SELECT o.* FROM ({sql}) o SEMI JOIN group_keys g ON {cond}",
                                        key + values, at)).to_arrow_table()
    finally:
        con.unregister("group_keys")


def _accumulated_sql(source: str, columns: list[str], at: int) -> str:
    """SQL of the rows of ``source`` (one-dimensional times) summed per ``columns`` at time ``at``."""
    cols = ", ".join(quote(c) for c in columns)
    return (f"SELECT {cols}, {int(at)}::BIGINT AS {quote(time_columns(1)[0])}, SUM(diff)::BIGINT AS diff "
            f"FROM ({source}) GROUP BY ALL HAVING SUM(diff) <> 0")


def _first_stage(reducer: rk.Reducer, key: list[str], values: list[str], d: int):
    """What a share is reduced to (the first stage of a split, ``ops/reduce/operator.py``)."""
    if isinstance(reducer, (Distinct, Threshold)):  # one value row at a time: a share's output is final
        return lambda t: rk.reduce_delta(t, key, values, d, reducer)
    if isinstance(reducer, rk.ORDER):
        return lambda t: rk.order_traces(t, key, values, reducer, d=d)
    if d == 1:
        return lambda t: rk.abelian_partials(t, key, values, reducer)
    return lambda t: rk.abelian_synthetic(t, key, values, d, reducer)


def _second_stage(reducer: rk.Reducer, key: list[str], values: list[str], d: int, out_arrow: pa.Schema,
                  firsts: list[pa.Table]) -> pa.Table:
    """The shares' first stages of whole keys into output changes."""
    out_schema = pa.schema(list(out_arrow)[len(key):-1 - d])
    if not firsts:
        return rk.empty_table(out_arrow)
    table = pa.concat_tables(firsts) if len(firsts) > 1 else firsts[0]
    if isinstance(reducer, (Distinct, Threshold)):
        return table
    if isinstance(reducer, rk.ORDER):
        return rk.reduce_delta(table, key, values, d, reducer)
    if d == 1:
        return rk.abelian_from_partials(table, key, reducer, out_schema, out_arrow)
    group = key + time_columns(d) + ["_new", rk.CHANNEL]
    sums = [c for c in rk.synthetic_columns(reducer) if c not in group]
    summed = table.group_by(group, use_threads=False).aggregate([(c, "sum") for c in sums]).rename_columns(group + sums)
    nonzero = [pc.not_equal(summed.column(c), 0) for c in sums]
    summed = summed.filter(nonzero[0] if len(nonzero) == 1 else pc.or_(*nonzero))
    return rk.abelian_from_synthetic(summed, key, d, reducer, out_schema)


def _refuse_oversized(counts: pa.Table, key: list[str], reducer: rk.Reducer, what: str) -> None:
    """The grid's one-line error for a key (``counts``: key columns and ``_n``) of user logic
    with more updates than the grid's cell budget (a key has at least a cell per update).
    The built-in reducers that come here (no value columns to split by) are not refused:
    a key over the budget is reduced in slices of time (:func:`_time_slices`)."""
    if not isinstance(reducer, rk.PerKey):
        return
    n = counts.column("_n").to_numpy()
    cells = rk.memory_budget() // rk.BYTES_PER_CELL
    if n.size and n.max() > cells:
        big = int(np.argmax(n))
        shown = {c: counts.column(c)[big].as_py() for c in key}
        raise KeyTooLarge(f"{reducer}: key {shown} holds {int(n[big]):,} {what}, over the budget of "
                             f"{int(cells):,} cells (DDCLI_REDUCE_MEMORY); split the key or raise the budget")


def reduce_held(held: HeldRows, key: list[str], values: list[str], d: int, reducer: rk.Reducer,
                out_arrow: pa.Schema, *, budget: int, shares_ok: bool) -> pa.Table:
    """The output changes of a task's input rows (old and new updates, ``_new``): whole
    when they are held in Arrow or their touched keys' rows are at most ``budget``, else in
    shares by their values (``shares_ok``) or in groups of keys of about the budget (a key
    with more is a group of its own), each read from DuckDB in turn."""
    if held.spilled:  # reduces sharing one input group by the same key: they keep the same rows
        held.keep_touched(key)
    if not held.spilled or held.rows <= budget:
        return rk.reduce_delta(held.grouped(key) if not held.spilled else held.select(), key, values, d, reducer)
    if shares_ok:
        stage_one = _first_stage(reducer, key, values, d)
        # a share without new updates changes no output of a reducer of one value row at a time
        firsts = [stage_one(t) for t in held_shares(held, values, budget,
                                                    only_new=isinstance(reducer, (Distinct, Threshold)))]
        return _second_stage(reducer, key, values, d, out_arrow, [t for t in firsts if t is not None and t.num_rows])
    con, k = held.con, ", ".join(quote(c) for c in key)
    counts = con.sql(f"SELECT {k}, count(*) AS _n FROM {TABLE} GROUP BY ALL").to_arrow_table()
    _refuse_oversized(counts, key, reducer, "updates in one task")
    groups = counts.select(key).append_column("_g", pa.array(exclusive_cumsum(counts.column("_n").to_numpy()) // budget))
    con.register("key_groups", groups)
    cond = " AND ".join(f"h.{quote(c)} IS NOT DISTINCT FROM g.{quote(c)}" for c in key)
    group_of = groups.column("_g").to_numpy()
    hot = np.bincount(group_of, weights=counts.column("_n").to_numpy() > budget) > 0  # holds a key over the budget
    parts = []
    t0 = time_columns(d)[0]
    for g in np.unique(group_of):
        if hot[g]:  # a key over the budget (with the small keys before it in its group): in slices of time
            outs = [rk.reduce_delta(t, key, values, d, reducer).filter(pc.greater_equal(pc.field(t0), first))
                    for t, first in _time_slices(held, cond, int(g), budget, t0)]
        else:
            outs = [rk.reduce_delta(_held_group(held, cond, int(g)), key, values, d, reducer)]
        parts += [out for out in outs if out.num_rows]
    con.unregister("key_groups")
    return pa.concat_tables(parts) if parts else rk.empty_table(out_arrow)


def _time_slices(held: HeldRows, cond: str, g: int, budget: int, t0: str):
    """The held rows of the keys of group ``g`` (registered as ``key_groups``) in slices of
    consecutive values of the first time coordinate ``t0`` of about ``budget`` rows, equal
    rows summed; each slice with the rows of every earlier value accumulated at the value
    just before it (their other coordinates, and old and new, kept apart), yielded as
    (rows, the slice's first value). At any time whose first coordinate is in the slice,
    the accumulated input is then that of the whole (a carried row is at or before it
    exactly when its other coordinates are), so the slice's output changes there are the
    whole's; those at the carried value belong to the slice before. A single value of
    ``t0`` holding more than the budget is a slice of its own. Nothing here grows with a
    key's updates but the DuckDB tables, which spill."""
    con, t = held.con, quote(t0)
    names = [c for c in held.schema.names if c != "diff"]
    cols = ", ".join(quote(c) for c in names)
    carried = ", ".join(quote(c) for c in names if c != t0)  # what a carried row keeps
    con.execute(f"CREATE OR REPLACE TEMP TABLE _slices AS {_group_sql(g, cond, 'h.*')}")
    firsts = [r[0] for r in con.sql(
        f"SELECT min(t) FROM (SELECT t, (sum(n) OVER (ORDER BY t) - n) // {int(budget)} AS s FROM "
        f"(SELECT {t} AS t, count(*) AS n FROM _slices GROUP BY 1)) GROUP BY s ORDER BY 1").fetchall()]
    con.execute(f"CREATE OR REPLACE TEMP TABLE _carry AS SELECT {carried}, diff FROM _slices LIMIT 0")
    for first, end in zip(firsts, firsts[1:] + [None]):
        upto = "" if end is None else f" AND {t} < {end}"
        con.execute(f"CREATE OR REPLACE TEMP TABLE _slice AS SELECT {cols}, SUM(diff)::BIGINT AS diff FROM _slices "
                    f"WHERE {t} >= {first}{upto} GROUP BY ALL HAVING SUM(diff) <> 0")
        rows = con.sql(f"SELECT {cols}, diff FROM _slice UNION ALL BY NAME "
                       f"SELECT {carried}, {int(first) - 1}::BIGINT AS {t}, diff FROM _carry").to_arrow_table()
        yield rows.select(held.schema.names).cast(held.schema), first
        con.execute(f"CREATE OR REPLACE TEMP TABLE _carry AS SELECT {carried}, SUM(diff)::BIGINT AS diff FROM "
                    f"(SELECT {carried}, diff FROM _carry UNION ALL SELECT {carried}, diff FROM _slice) "
                    f"GROUP BY ALL HAVING SUM(diff) <> 0")
    con.execute("DROP TABLE _slices; DROP TABLE IF EXISTS _slice; DROP TABLE _carry")


def held_shares(held: HeldRows, values: list[str], budget: int, *, only_new: bool = False):
    """A task's held rows in parts of about ``budget`` rows, all updates of a value row in
    one part: the rows whole when they are in Arrow, else shares by a hash of ``values``
    (``only_new``: only the shares that hold a new update)."""
    if not held.spilled:
        yield held.table
        return
    shares = math.ceil(held.rows / budget)
    share = _share_sql(held.con, TABLE, values, shares)
    wanted = range(shares)
    if only_new:
        wanted = sorted(r[0] for r in held.con.sql(f"SELECT DISTINCT {share} FROM {TABLE} WHERE _new").fetchall())
    for i in wanted:
        yield held.select(f"{share} = {i}")


def _share_sql(con, table: str, values: list[str], shares: int) -> str:
    """SQL of a row's share: a hash of its values, cast to ``table``'s types (so that a
    row's updates land in one share wherever they were read from)."""
    types = dict(con.sql(f"SELECT column_name, column_type FROM (DESCRIBE {table})").fetchall())
    return f"hash({', '.join(f'{quote(v)}::{types[v]}' for v in values)}) % {shares}"


def _held_group(held: HeldRows, cond: str, g: int) -> pa.Table:
    """The held rows of the keys of group ``g`` (registered as ``key_groups``), equal rows
    summed: a key without value columns to split it by comes back as one row per time."""
    names = [c for c in held.schema.names if c != "diff"]
    cols = ", ".join(f"h.{quote(c)}" for c in names)
    sql = f"{_group_sql(g, cond, cols + ', SUM(h.diff)::BIGINT AS diff')} GROUP BY ALL HAVING SUM(h.diff) <> 0"
    return held.con.sql(sql).to_arrow_table().select(held.schema.names).cast(held.schema)


def _group_sql(g: int, cond: str, items: str) -> str:
    """SQL selecting ``items`` from the held rows of the keys of group ``g``."""
    return f"SELECT {items} FROM {TABLE} h SEMI JOIN (SELECT * FROM key_groups WHERE _g = {g}) g ON {cond}"
