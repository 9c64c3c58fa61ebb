"""The ``reduce`` kernel: output changes of ``f(input accumulated at t)`` for a delta.

A pure function over Arrow tables, meant to run inside Spark's ``mapInArrow`` on
key-partitioned data (all updates of a key in one batch). The output of a run is
``Z(total) - Z(old)``: the output trace of the whole input minus that of the input
without this run's new updates (``_new``), both exact at every time.

Which kernel computes it depends on the reducer and the time dimension:

* ``d = 1`` and a built-in reducer: the sweeps of ``ops.reduce.sweep`` -- per value row
  (distinct, threshold), abelian (count, sum, count_distinct) or order (min, max, top_k)
  -- cost O(updates · log) per key plus the output changes, for any number of distinct
  value rows and times;
* ``d = 1`` and ``window``: ``ops.reduce.window_sweep``, the rows each change moves;
* ``d >= 2``: a key's slabs of equal last coordinate, from its first new update on, one
  dimension lower (``ops.reduce.slabs``), when they cost less than its grid -- always for
  a key with one such slab (most keys of a loop round);
* otherwise (user reducers, ``d >= 2``): the grid kernel of ``ops.reduce.grid``.
  ``Distinct`` and ``Threshold`` look at one value row at a time, so for ``d >= 2`` they
  run on the grid of each (key, value row) rather than of each key.

Memory: keys are processed in chunks of about ``max_rows`` updates (sweeps) or
``max_cells`` dense cells (grid); a key is never split across chunks, and a grid key over
the memory budget is refused with a clear error (:class:`~ops.errors.KeyTooLarge`).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from ops import exact_sum
from ops.columnar import COUNT, GROUP, empty_table, new_flags, np_int, row_ids
from ops.dataflow.reducers import (Count,  # noqa: F401 - the reducers are part of this module's interface
                                   CountDistinct, Distinct, Max, Min, PerKey, Reducer, Sum, Threshold, TopK,
                                   presence)
from ops.dataflow.window_reducer import Window
from ops.errors import KeyTooLarge
from ops.reduce import builtin_grid as lattice
from ops.reduce import slabs as rf
from ops.reduce import sweep as sw
from ops.reduce.grid import grid_cells, grid_delta
from ops.reduce.presence import presence_delta
from ops.reduce.window_sweep import window_delta
from storage.lattice import time_columns
from storage.layer import strictly_ascending
from storage.row_order import group_sum, lex_order

__all__ = [
    "GROUP", "COUNT", "reduce_delta", "Reducer", "Count", "CountDistinct", "Sum", "Min", "Max",
    "Distinct", "Threshold", "TopK", "PerKey", "KeyTooLarge", "memory_budget",
]

_RESERVED = {GROUP, COUNT, "diff", "_new"}

#: Dense grid cells (value rows x grid points) handled at once by the grid kernel.
CELL_BUDGET = 1 << 21
#: Updates handled at once by the sweeps (a slice of whole keys): measured on the bench's
#: top_k stage, 2^17 rows of a partition cost a worker ~0.25 GB where 2^20 cost ~0.5 GB.
ROW_BUDGET = 1 << 17
#: Bytes a dense grid cell costs the grid kernel, all its arrays together (measured).
BYTES_PER_CELL = 120


def memory_budget() -> int:
    """Bytes one reduce task may use for a single key's dense grid
    (``DDCLI_REDUCE_MEMORY``, e.g. ``512m``, ``2g``; default 1 GiB)."""
    raw = os.environ.get("DDCLI_REDUCE_MEMORY", "1g").strip().lower()
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(raw[-1:], 1)
    try:
        return int(float(raw.rstrip("kmg")) * scale)
    except ValueError:
        raise ValueError(f"DDCLI_REDUCE_MEMORY={raw!r} is not a size such as 512m or 2g") from None


def _touched_keys_only(table: pa.Table, key: list[str]) -> pa.Table:
    """Drop the old updates of keys without a new update: their output cannot change
    (callers may pass a whole arrangement rather than pay for a semi-join)."""
    new = new_flags(table)
    if new.all():
        return table
    kid, k = row_ids(table, key, ordered=False)
    touched = np.zeros(k, bool)
    touched[kid[new]] = True
    keep = touched[kid]
    return table if keep.all() else table.filter(pa.array(keep))


SWEEPABLE = (Count, Sum, CountDistinct, Distinct, Threshold, Min, Max, TopK)


def reduce_delta(table: pa.Table, key: list[str], values: list[str], d: int, reducer: Reducer,
                 **budgets) -> pa.Table:
    """:func:`_reduce_delta`; a sum that outgrows its decimal type is refused naming its key."""
    return exact_sum.naming_the_key(lambda t: _reduce_delta(t, key, values, d, reducer, **budgets), table, list(key),
                          f"reduce {reducer!r}")


def _reduce_delta(
    table: pa.Table,
    key: list[str],
    values: list[str],
    d: int,
    reducer: Reducer,
    *,
    max_cells: int = CELL_BUDGET,
    max_rows: int = ROW_BUDGET,
    limit_bytes: int | None = None,
) -> pa.Table:
    """Output updates of ``reducer`` caused by this run's new updates (``_new``).

    ``table`` holds every update (old and new) of each key in the delta. Returns key
    columns, the reducer's output columns, time columns and ``diff``, consolidated and
    sorted, equal to ``Z_total - Z_old``. ``max_cells``/``max_rows`` set the chunk sizes
    and ``limit_bytes`` the memory a single grid key may take (default
    :func:`memory_budget`); none of them changes the result.
    """
    key, values = list(key), list(values)
    tcols = time_columns(d)
    for c in key + values + tcols + ["diff"]:
        if c not in table.column_names:
            raise ValueError(f"reduce input lacks column {c!r} (has {table.column_names})")
    out_schema = reducer.output_schema(table.select(values).schema)
    clash = set(out_schema.names) & (set(key) | set(tcols) | _RESERVED)
    if clash:
        raise ValueError(f"reducer output columns {sorted(clash)} clash with key/time/internal columns")
    result_schema = pa.schema(
        [table.schema.field(c) for c in key]
        + list(out_schema)
        + [pa.field(c, pa.int64()) for c in tcols]
        + [pa.field("diff", pa.int64())]
    )
    if "_new" in table.column_names:
        table = _touched_keys_only(table, key)
    if table.num_rows == 0:
        return empty_table(result_schema)

    if d >= 2 and isinstance(reducer, (Distinct, Threshold)):  # every row's grid at once, when small
        fn = reducer.fn if isinstance(reducer, Threshold) and reducer.fn is not presence else None
        out = presence_delta(table, key + values, d, fn, result_schema, max_cells)
        if out is not None:
            return _sorted(out, key + out_schema.names + tcols)
    flat_parts = []
    if d >= 2:  # keys whose slabs cost less than their grid: one dimension lower
        chunks, table = rf.split(table, key, d, grid_cells=_grid_cells(reducer, values, d))
        if chunks is not None:
            lows = [_reduce_delta(c, key + list(rf.slab_key(d)), values, d - 1, reducer, max_cells=max_cells,
                                 max_rows=max_rows, limit_bytes=limit_bytes) for c in chunks]
            lows = [t for t in lows if t.num_rows]
            if lows:
                flat_parts = [rf.lift(pa.concat_tables(lows) if len(lows) > 1 else lows[0], key, d, result_schema)]
    parts = [] if table is None else _dispatch(table, key, values, d, reducer, out_schema, result_schema,
                                               max_cells, max_rows, limit_bytes)
    parts = [*flat_parts, *parts]
    if not parts:
        return empty_table(result_schema)
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return _sorted(out, key + out_schema.names + tcols)


def _sorted(out: pa.Table, order: list[str]) -> pa.Table:
    if strictly_ascending(out, order):  # count and sum of rows sorted by key come out in order
        return out
    try:
        return out.sort_by([(c, "ascending") for c in order])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return out  # unsortable column types: consolidated, just not ordered


def _multiplicity_fn(reducer: Reducer):
    """A row's output multiplicity as a function of its count: ``Threshold``'s own, or
    ``Distinct``'s presence."""
    return reducer.fn if isinstance(reducer, Threshold) else presence


def _grid_cells(reducer: Reducer, values: list[str], d: int):
    """The grid kernel's dense cells per key, as ``_dispatch`` would run it: the grid of
    each (key, value row) for the reducers that look at one row at a time (or, abelian,
    at a row's presence), ``value rows x grid points`` for the others."""
    per_row = isinstance(reducer, (Distinct, Threshold, Count, Sum, CountDistinct))
    return lambda table, kid, K: grid_cells(table, kid, K, values, d, per_row)


def _dispatch(table, key, values, d, reducer, out_schema, result_schema, max_cells, max_rows, limit_bytes):
    """The kernel for ``reducer`` at ``d``: unsorted parts of the result."""
    limit = (memory_budget() if limit_bytes is None else limit_bytes) // BYTES_PER_CELL
    if d == 1 and isinstance(reducer, SWEEPABLE):
        parts = _sweep_parts(table, key, values, reducer, out_schema, result_schema, max_rows)
    elif d == 1 and isinstance(reducer, Window):  # the rows a change moves, not its partition
        parts = [window_delta(sub, key, values, reducer, out_schema, result_schema, max_cells, limit)
                 for sub in key_slices(table, key, max_rows)]
        parts = [p for p in parts if p is not None]
    elif isinstance(reducer, (Distinct, Threshold)):
        # one value row at a time: the grid of each (key, value row), not of each key
        fn = _multiplicity_fn(reducer)
        parts = grid_delta(table, key + values, [], d, Threshold(fn), pa.schema([]),
                           pa.schema([result_schema.field(c) for c in key + values] + list(result_schema)[len(key) + len(values):]),
                           max_cells, limit)
        parts = [p.select(result_schema.names) for p in parts]
    elif lattice.abelian_pays(table, key, values, reducer):
        parts = lattice.abelian_grid(table, key, values, d, reducer, out_schema, result_schema, max_cells)
    elif isinstance(reducer, (Min, Max, TopK)):
        parts = lattice.order_grid(table, key, values, d, reducer, out_schema, result_schema, max_cells, limit)
    else:  # user reducers (and the synthetic rows' scalar): the whole collection at every grid
        # point, a key over the memory budget refused with one line rather than taking the worker down
        parts = grid_delta(table, key, values, d, reducer, out_schema, result_schema, max_cells, limit,
                           weight=getattr(reducer, "weight", None))
    return parts


# ------------------------------------------------------------------ one-dimensional sweeps


def _sweep_parts(table, key, values, reducer, out_schema, result_schema, max_rows) -> list[pa.Table]:
    """Chunks of whole keys of about ``max_rows`` updates each, swept one by one."""
    parts = []
    for sub in key_slices(table, key, max_rows):
        part = _sweep_chunk(sub, key, values, reducer, out_schema, result_schema)
        if part is not None:
            parts.append(part)
    return parts


def key_slices(table: pa.Table, key: list[str], max_rows: int):
    """``table`` as slices of whole keys of about ``max_rows`` updates each (a key larger
    than that is a slice of its own): the sweeps' arrays are sized by a slice, not by the
    task's partition."""
    if table.num_rows <= max_rows:
        yield table
        return
    kid, K = row_ids(table, key, ordered=False)  # ids in order of first appearance
    counts = np.bincount(kid, minlength=K)
    chunk = np.r_[0, np.cumsum(counts)[:-1]] // max(int(max_rows), 1)
    kbounds = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1], True])
    row_start = np.r_[0, np.cumsum(counts)]
    grouped = not (kid[1:] < kid[:-1]).any()  # each key's rows together already (ops/reduce/held_rows.py)
    order = None if grouped else np.argsort(kid, kind="stable")
    for k0, k1 in zip(kbounds[:-1], kbounds[1:]):
        lo, hi = int(row_start[k0]), int(row_start[k1])
        yield table.slice(lo, hi - lo) if grouped else table.take(pa.array(order[lo:hi]))


def _sweep_chunk(table, key, values, reducer, out_schema, result_schema) -> pa.Table | None:
    if isinstance(reducer, ABELIAN):
        pg, pt, dw, dn, key_rep = _partials(table, key, values, reducer, advance=True)
        g, t, val, diff = sw.abelian_changes(reducer, pg, pt, dw, dn)
        return _assemble(table, key, key_rep, g // 2, t, val, diff, out_schema, result_schema)
    s, key_rep = _prepare(table, key, values)
    if isinstance(reducer, (Distinct, Threshold)):
        pair, t, diff = sw.per_row(s, _multiplicity_fn(reducer))
    else:
        pair, t, diff = sw.top_k(s, reducer, reducer.k if isinstance(reducer, TopK) else 1)
    diff = sw.signed(pair, diff)
    take = pa.array(s.value_of_pair(pair))
    if isinstance(reducer, (Min, Max)):
        out_cols = {reducer.name: table.column(reducer.col).take(take)}
    else:
        out_cols = {c: table.column(c).take(take) for c in values}
    out_cols = {f.name: out_cols[f.name].cast(f.type) for f in out_schema}
    return _assemble(table, key, key_rep, s.kv_key[pair // 2], t, out_cols, diff, out_schema, result_schema)


def _prepare(table, key, values, advance: bool = True):
    kid, K = row_ids(table, key, ordered=False)
    kv, P = row_ids(table, values, base=kid, ordered=False)
    rows = np.arange(table.num_rows, dtype=np.int64)
    key_rep = np.empty(K, np.int64)
    key_rep[kid] = rows
    kv_rep = np.empty(P, np.int64)
    kv_rep[kv] = rows
    return sw.Sweep(table, kid, kv, kv_rep, kid[kv_rep], K, values, advance=advance), key_rep


def _partials(table, key, values, reducer, advance: bool) -> tuple:
    """Per (key, side) group and time: changes of the weight and of the key's presence."""
    if isinstance(reducer, (Count, Sum)) and np_int(table.column("diff")).min() > 0:
        kid, K = row_ids(table, key, ordered=False)
        key_rep = np.empty(K, np.int64)
        key_rep[kid] = np.arange(table.num_rows, dtype=np.int64)
        return (*sw.insert_only_partials(table, kid, K, reducer, advance), key_rep)
    s, key_rep = _prepare(table, key, values, advance=advance)
    return (*sw.abelian_partials(s, reducer), key_rep)


def _assemble(table, key, key_rep, okey, t, out, diff, out_schema, result_schema) -> pa.Table | None:
    """The result table, consolidated by (key, output row, time): equal output values may
    come from different value rows. ``out``: the output column's values (one-column
    reducers, a numpy array) or a dict of output columns."""
    if isinstance(out, dict):
        out_cols = out
        codes = [row_ids(pa.table(out_cols), list(out_cols), ordered=False)[0]] if out_cols else []
    elif out.dtype == object:  # exact sums: their values, told apart by the values
        name = out_schema.names[0]
        out_cols = {name: exact_sum.values(out, out_schema.field(name).type)}
        codes = [row_ids(pa.table(out_cols), [name], ordered=False)[0]]
    else:
        name = out_schema.names[0]
        out_cols, codes = {name: pa.array(out, out_schema.field(name).type)}, [out]
    if len(diff) == 0:
        return None
    rep, diff = group_sum([okey, *codes, t], diff)
    keep = diff != 0
    if not keep.any():
        return None
    rep, diff = rep[keep], diff[keep]
    cols = {c: table.column(c).take(pa.array(key_rep[okey[rep]])) for c in key}
    taker = pa.array(rep)
    for f in out_schema:
        cols[f.name] = out_cols[f.name].take(taker)
    cols["time"] = pa.array(t[rep], pa.int64())
    cols["diff"] = pa.array(diff, pa.int64())
    return pa.table(cols, schema=result_schema)


# ------------------------------------------------------------------ a hot key split among tasks
# Two stages (ops/reduce/operator.py plans them): the first sees a share of each key's value rows
# (rows hashed to tasks), the second the first's small results for whole keys.

SIDE, DW, DN, SALT = "_side", "_dw", "_dn", "_salt"
CHANNEL, WEIGHT, synthetic_columns = lattice.CHANNEL, lattice.WEIGHT, lattice.synthetic_columns
ABELIAN = (Count, Sum, CountDistinct)
ORDER = (Min, Max, TopK)


def partial_weight_type(reducer, values_schema: pa.Schema) -> pa.DataType:
    """The type of the weights that travel between a reduce's two stages (int64)."""
    return pa.int64()


def abelian_partials(table: pa.Table, key: list[str], values: list[str], reducer) -> pa.Table:
    """Stage one of count/sum/count_distinct: per (key, side, time) the change of the
    weight (``_dw``) and of the number of rows making the key present (``_dn``), over the
    value rows this task holds. Times are not advanced: another task's rows of the key
    may be new earlier."""
    wtype = partial_weight_type(reducer, table.select(values).schema)
    if table.num_rows == 0:
        return pa.table({**{c: table.column(c) for c in key}, SIDE: pa.array([], pa.int64()),
                         "time": pa.array([], pa.int64()), DW: pa.array([], wtype), DN: pa.array([], pa.int64())})
    pg, pt, dw, dn, key_rep = _partials(table, key, values, reducer, advance=False)
    cols = {c: table.column(c).take(pa.array(key_rep[pg // 2])) for c in key}
    return pa.table({**cols, SIDE: pa.array(pg % 2, pa.int64()), "time": pa.array(pt, pa.int64()),
                     DW: pa.array(dw, wtype), DN: pa.array(dn, pa.int64())})


def abelian_from_partials(table: pa.Table, key: list[str], reducer, out_schema: pa.Schema,
                          result_schema: pa.Schema) -> pa.Table:
    """Stage two: the partials of whole keys summed and accumulated into output changes."""
    if table.num_rows == 0:
        return empty_table(result_schema)
    kid, K = row_ids(table, key, ordered=False)
    key_rep = np.empty(K, np.int64)
    key_rep[kid] = np.arange(table.num_rows, dtype=np.int64)
    g = kid * 2 + np_int(table.column(SIDE))
    t = np_int(table.column("time"))
    dw = table.column(DW).to_numpy()
    dn = np_int(table.column(DN))
    order = lex_order([g, t])
    g, t, dw, dn = g[order], t[order], dw[order], dn[order]
    first = np.ones(len(g), bool)
    first[1:] = (g[1:] != g[:-1]) | (t[1:] != t[:-1])
    idx = np.flatnonzero(first)
    dw, dn = np.add.reduceat(dw, idx), np.add.reduceat(dn, idx)
    og, ot, ov, od = sw.abelian_changes(reducer, g[idx], t[idx], dw, dn)
    part = _assemble(table, key, key_rep, og // 2, ot, ov, od, out_schema, result_schema)
    if part is None:
        return empty_table(result_schema)
    return part


def splits(reducer: Reducer, values_schema: pa.Schema) -> bool:
    """Whether a key's value rows can be dealt to tasks for ``reducer`` (two stages):
    every built-in reducer that looks at more than one value row at a time, except a sum
    of doubles or decimals, whose exact partial sums are no int64 that Spark and Arrow
    could add between the stages."""
    if isinstance(reducer, Sum) and exact_sum.is_exact(reducer.out_type(values_schema)):
        return False
    return isinstance(reducer, ORDER + ABELIAN)


def abelian_synthetic(table: pa.Table, key: list[str], values: list[str], d: int, reducer) -> pa.Table | None:
    """Stage one of count/sum/count_distinct for ``d >= 2``: the synthetic rows of the
    share of each key's value rows this task holds (``ops/reduce/builtin_grid.py``); stage two
    sums them per (key, time, side, channel) and reduces them with
    :func:`abelian_from_synthetic`."""
    return lattice.abelian_synthetic(table, key, values, d, reducer, CELL_BUDGET)


def abelian_from_synthetic(table: pa.Table, key: list[str], d: int, reducer, out_schema: pa.Schema) -> pa.Table:
    """Stage two for ``d >= 2``: the summed synthetic rows of whole keys into output changes."""
    return reduce_delta(table, key, [lattice.CHANNEL], d, lattice.scalar_of(reducer, out_schema))


def order_traces(table: pa.Table, key: list[str], values: list[str], reducer, *, d: int = 1,
                 max_rows: int = ROW_BUDGET) -> pa.Table:
    """Stage one of min/max/top_k for a share of each key's value rows (``key`` includes
    the share's salt): the share's output trace of the old collection (``_new`` false)
    and the trace of the whole minus it (``_new`` true), as value rows. The first k
    records of a collection are the first k of the union of its shares' first k, at every
    time, so stage two is the same reduce over these rows."""
    if table.num_rows == 0:
        return table
    if d >= 2:  # the reduce itself, keeping whole value rows, on both collections
        full = lattice.full_rows(reducer)
        new = new_flags(table)
        old_rows = table.filter(pa.array(~new))
        flags = lambda t, v: t.append_column("_new", pa.array(np.full(t.num_rows, v)))  # noqa: E731
        parts = [flags(reduce_delta(table, key, values, d, full), True)]
        if old_rows.num_rows:
            old_all = old_rows.drop_columns(["_new"]).append_column("_new", pa.array(np.ones(old_rows.num_rows, bool)))
            parts.append(flags(reduce_delta(old_all, key, values, d, full), False))
        return pa.concat_tables(parts)
    slices = [_order_traces_slice(sub, key, values, reducer) for sub in key_slices(table, key, max_rows)]
    return pa.concat_tables(slices) if len(slices) > 1 else slices[0]


def _order_traces_slice(table: pa.Table, key: list[str], values: list[str], reducer) -> pa.Table:
    s, _ = _prepare(table, key, values, advance=False)
    pair, t, diff = sw.top_k(s, reducer, reducer.k if isinstance(reducer, TopK) else 1)
    old = pair % 2 == sw.OLD
    rep, delta = group_sum([pair // 2, t], sw.signed(pair, diff))
    keep = delta != 0
    rep, delta = rep[keep], delta[keep]
    rows = np.concatenate([s.value_of_pair(pair[old]), s.value_of_pair(pair[rep])])
    out = table.take(pa.array(rows)).select(key + values)
    return out.append_column("time", pa.array(np.concatenate([t[old], t[rep]]), pa.int64())) \
        .append_column("diff", pa.array(np.concatenate([diff[old], delta]), pa.int64())) \
        .append_column("_new", pa.array(np.r_[np.zeros(int(old.sum()), bool), np.ones(len(rep), bool)]))
