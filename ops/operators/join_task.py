"""A join task's rows under a memory budget: its keys' stored old updates, and its input.

A join's updates are partitioned by key (``ops/operators/join.py``); each task computes the output
changes of its keys with the sweep of ``ops/operators/join_sweep.py``. What a task holds:

* For a small run against stored arrangements, only the new updates come through the
  shuffle; the task reads the stored old updates of the keys they touch with DuckDB (which
  prunes the key-sorted layers' row groups), advanced to the task's earliest new time and
  summed there: a key's live rows, however long its history. A side's old updates are only
  read for the keys the other side changes (nothing else pairs with them).
* Its rows are held with ``ops/reduce/held_rows.py``: in Arrow up to the budget
  (``DDCLI_REDUCE_TASK_ROWS``, the one reduce tasks use), beyond it in a DuckDB table that
  spills. More rows than a slice (``SLICE_ROWS``, or the budget if less) are cut into
  parts of that size in (key, first time coordinate) order, and each part is joined in
  turn with the rows of its keys accumulated over the parts before it (history rows,
  ``HIST``): a hot key is streamed through time, holding its live rows and one part. A key
  whose live rows alone are over the budget is refused with one clear error.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.columnar import new_flags, np_int, row_ids
from ops.operators.join_sweep import HIST, SIDE, JoinSpec, join_table, value_ids
from ops.reduce.held_rows import TABLE, HeldRows
from storage.row_order import group_sum, lex_order
from storage.sql.query import quote

PART = "_ddcli_part"
#: Rows the sweep takes at once (at most the task's budget): its working arrays are a few
#: dozen bytes a row, so a task's rows beyond this go in parts in time order.
SLICE_ROWS = 1 << 18


class TooManyLiveRows(ValueError):
    """A key's accumulated rows do not fit a task's budget."""


def join_task(batches: Iterable[pa.RecordBatch], spec: JoinSpec, budget: int,
              lookup: tuple[list[str], list[str]] | None = None, hold: int | None = None,
              history: pa.Table | None = None) -> Iterator[pa.RecordBatch]:
    """The output batches of one task: ``batches`` (both sides' updates, ``SIDE``,
    ``_new``), plus with ``lookup`` each side's stored old updates of the keys the other
    side changes, read from that side's layer files. ``hold``: the rows held in Arrow
    before the rest spill (the budget unless given). ``history``: the live rows of the
    batches' keys before their times (:func:`live_history`), when a task takes a range of
    times only."""
    if lookup is not None:
        batches = _with_stored(list(batches), spec, lookup)
    held = HeldRows(batches, hold or budget)
    try:
        if held.rows == 0:
            return
        size = min(budget, SLICE_ROWS)
        parts = _spilled_parts(held, spec, size) if held.spilled else _parts_in_memory(held.table, spec, size)
        for out in _sweep(parts, spec, budget, history):
            if out.num_rows:
                yield from out.to_batches()
    finally:
        held.close()


def _with_stored(batches: list[pa.RecordBatch], spec: JoinSpec, lookup) -> Iterator[pa.RecordBatch]:
    """The task's new updates, then the stored old updates each side pairs with them."""
    from ops.operators.keyed_reads import keyed_source
    from ops.reduce.old_updates import lookup_connection

    new = pa.Table.from_batches(batches) if batches else None
    if new is None or new.num_rows == 0:
        return
    yield from new.to_batches()
    key, tcols = list(spec.key), spec.tcols
    at = pc.min(new.column(tcols[0])).as_py()  # every pair with a new update is at or after it
    side = np_int(new.column(SIDE))
    for s, files in enumerate(lookup):
        other = new.filter(pa.array(side != s))  # the keys whose old rows of side s pair with something
        if not files or other.num_rows == 0:
            continue
        keys = other.select(key).group_by(key, use_threads=False).aggregate([])
        mine = list(spec.key) + list(spec.left if s == 0 else spec.right)
        group = ", ".join(quote(c) for c in mine + tcols[1:])
        con = lookup_connection(files)
        try:
            con.register("touched_keys", keys)
            sql = (f"SELECT {group}, greatest({quote(tcols[0])}, {int(at)})::BIGINT AS {quote(tcols[0])}, "
                   f"SUM(diff)::BIGINT AS diff FROM ({keyed_source(con, files, keys, key)}) "
                   f"GROUP BY ALL HAVING SUM(diff) <> 0")
            for b in con.sql(sql).to_arrow_reader(1 << 16):
                yield from as_side(pa.Table.from_batches([b]), new.schema, s, new=False).to_batches()
        finally:
            con.close()


def as_side(rows: pa.Table, schema: pa.Schema, side: int, *, new: bool) -> pa.Table:
    """Rows of one side (``new``: this run's updates, else stored ones) in the task's input
    schema (the other side's columns null)."""
    n = rows.num_rows
    cols = []
    for f in schema:
        if f.name == SIDE:
            cols.append(pa.array(np.full(n, side), f.type))
        elif f.name == "_new":
            cols.append(pa.array(np.full(n, new, bool)))
        elif f.name in rows.column_names:
            cols.append(rows.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _sweep(parts: Iterator[pa.Table], spec: JoinSpec, budget: int, history: pa.Table | None = None
           ) -> Iterator[pa.Table]:
    """The output of consecutive parts of a task's rows in (key, first time coordinate)
    order, each joined with the history of its keys in the parts before it (the first with
    ``history``)."""
    part = next(parts, None)
    while part is not None:
        following = next(parts, None)
        table = part if history is None else pa.concat_tables([history, part.cast(history.schema)])
        yield join_table(table, spec)
        if following is not None:
            history = _history(table, following, spec, budget)
        part = following


def _parts_in_memory(table: pa.Table, spec: JoinSpec, size: int) -> Iterator[pa.Table]:
    """``table`` in parts of about ``size`` rows (whole, when it is no more): ordered by
    key and first time coordinate, never cutting the rows of one (key, time) apart."""
    hist = pa.array(np.zeros(table.num_rows, bool))
    if table.num_rows <= size:
        yield table.append_column(HIST, hist)
        return
    key, _ = row_ids(table, list(spec.key), ordered=False)
    x = np_int(table.column(spec.tcols[0]))
    order = lex_order([key, x])
    k, t = key[order], x[order]
    head = np.ones(len(order), bool)
    head[1:] = (k[1:] != k[:-1]) | (t[1:] != t[:-1])
    starts = np.flatnonzero(head)
    part = np.repeat(starts // size, np.diff(np.append(starts, len(order))))  # rows before a group, in parts
    cuts = np.flatnonzero(np.diff(part)) + 1
    table = table.append_column(HIST, hist)
    for rows in np.split(order, cuts):
        yield table.take(rows)


def _spilled_parts(held: HeldRows, spec: JoinSpec, size: int) -> Iterator[pa.Table]:
    """Spilled rows in parts of about ``size`` rows, as :func:`_parts_in_memory` cuts them."""
    con, key = held.con, [quote(c) for c in spec.key]
    t0 = quote(spec.tcols[0])
    k = ", ".join(key)
    cond = " AND ".join(f"h.{c} IS NOT DISTINCT FROM p.{c}" for c in key)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _parted AS SELECT h.*, p.{PART} FROM {TABLE} h JOIN ("
        f"SELECT {k}, {t0}, (sum(n) OVER (ORDER BY {k}, {t0} ROWS UNBOUNDED PRECEDING) - n) // {int(size)} "
        f"AS {PART} FROM (SELECT {k}, {t0}, count(*) AS n FROM {TABLE} GROUP BY ALL)) p "
        f"ON {cond} AND h.{t0} = p.{t0} ORDER BY p.{PART}")
    con.execute(f"DROP TABLE {TABLE}")
    parts = int(con.sql(f"SELECT coalesce(max({PART}), -1) + 1 FROM _parted").fetchall()[0][0])
    for i in range(parts):
        rows = con.sql(f"SELECT * EXCLUDE ({PART}) FROM _parted WHERE {PART} = {int(i)}").to_arrow_table()
        rows = rows.cast(held.schema)
        yield rows.append_column(HIST, pa.array(np.zeros(rows.num_rows, bool)))
    con.execute("DROP TABLE _parted")


def live_history(before: pa.Table, rows: pa.Table, spec: JoinSpec, budget: int) -> pa.Table | None:
    """The history rows (``HIST``) that updates ``before`` (a task's input rows at earlier
    times) leave for the keys of ``rows``: their live rows, summed."""
    return _history(before.append_column(HIST, pa.array(np.zeros(before.num_rows, bool))),
                    rows.select([*spec.key]), spec, budget)


def _history(table: pa.Table, following: pa.Table, spec: JoinSpec, budget: int) -> pa.Table | None:
    """The rows of ``table`` whose keys continue into ``following``, summed per side, data
    row, newness and time coordinates after the first: history rows for the next part."""
    key = list(spec.key)
    ids, _ = row_ids(pa.concat_tables([table.select(key), following.select(key).cast(table.select(key).schema)]),
                     key, ordered=False)
    continuing = np.isin(ids[:table.num_rows], ids[table.num_rows:])
    rows = table.filter(pa.array(continuing))
    if rows.num_rows == 0:
        return None
    value = value_ids(rows, np_int(rows.column(SIDE)).astype(bool), spec)
    first, sums = group_sum([value, new_flags(rows).astype(np.int64), *(np_int(rows.column(t)) for t in spec.tcols[1:])],
                            np_int(rows.column("diff")))
    keep = sums != 0
    live = rows.take(first[keep])
    if live.num_rows > budget:  # (several keys may: a key's own rows are what must fit)
        per_key, _ = row_ids(live, key, ordered=False)
        counts = np.bincount(per_key)
        if counts.max() > budget:
            worst = live.select(key).take([int(np.flatnonzero(per_key == counts.argmax())[0])])
            raise TooManyLiveRows(f"join: {int(counts.max())} live rows of one key ({worst.to_pylist()[0]}) "
                                  f"are more than a task holds (DDCLI_REDUCE_TASK_ROWS={budget})")
    live = live.set_column(live.schema.get_field_index("diff"), "diff", pa.array(sums[keep], pa.int64()))
    return live.set_column(live.schema.get_field_index(HIST), HIST, pa.array(np.ones(live.num_rows, bool)))
