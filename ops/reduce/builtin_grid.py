"""``reduce`` for partially ordered times (``d >= 2``) without a (value rows x grid) array.

The grid kernel evaluates ``f`` on every (value row, grid point) cell of a key: with many
distinct rows per key that product, not the updates, sets the cost. The built-in
reducers avoid it on the same kernel:

* **abelian** (``count``, ``sum``, ``count_distinct``): a key's output at a time depends
  on two numbers only, its weight (the count or the sum) and how many rows make it
  present (a non-zero count; a positive one for ``count_distinct``). Whether a row is
  present is a question about that row alone, answered on the grid of each (key, value
  row). The key's grid then holds two synthetic rows instead of all of them: the
  weight's updates and the presence changes. A sum's weight travels in its own column
  (``WEIGHT``: int64, or the exact bytes of ops/exact_sum.py), accumulated along the grid beside the counts.
* **order** (``min``, ``max``, ``top_k``): the first k records of a collection are the
  first k of the union of the first k of any split of its rows. A key whose cells exceed
  the budget has its value rows dealt into shares small enough for the budget; each share
  is reduced to its first k records over time (full rows, as traces of the old collection
  and of whole minus old), and the reduce runs again over those much fewer rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ops import exact_sum
from ops.reduce.grid import grid_cells, grid_delta
from ops.columnar import COUNT, GROUP, groups_of, new_flags, np_int, row_ids
from ops.dataflow.reducers import Count, CountDistinct, Max, Reducer, Sum, Threshold, TopK
from storage.lattice import time_columns

CHANNEL = "_channel"  # 0: the weight's updates, 1: presence changes
WEIGHT = "_ddcli_weight"  # a sum's weight on channel 0 (0 on channel 1)
SHARE = "_share"


def _as(table: pa.Table, new: bool) -> pa.Table:
    flags = pa.array(np.full(table.num_rows, new))
    if "_new" in table.column_names:
        return table.set_column(table.schema.get_field_index("_new"), "_new", flags)
    return table.append_column("_new", flags)


def _traces(table: pa.Table, key: list[str], values: list[str], d: int, reducer: Reducer,
            out_schema: pa.Schema, result_schema: pa.Schema, max_cells: int) -> tuple[list, list]:
    """The output trace of the old collection alone, and of whole minus old."""
    new = new_flags(table)
    delta = grid_delta(table, key, values, d, reducer, out_schema, result_schema, max_cells)
    old_rows = table.filter(pa.array(~new))
    old = grid_delta(_as(old_rows, True), key, values, d, reducer, out_schema, result_schema, max_cells) \
        if old_rows.num_rows else []
    return old, delta


# ------------------------------------------------------------------ abelian


class _Scalar(Reducer):
    """``f`` over the two synthetic rows of a key: channel 0 accumulates the weight,
    channel 1 the number of rows present. Output: the weight (or, for ``count_distinct``,
    the number of rows) when some row is present. ``weight``: the column that carries a
    sum's weight (the grid accumulates it, ``ops/reduce/grid.py``); a count's is ``COUNT``."""

    def __init__(self, name: str, type_: pa.DataType, rows_count: bool, weight: str | None):
        self.name, self.type, self.rows_count, self.weight = name, type_, rows_count, weight

    def output_schema(self, values_schema):
        return pa.schema([pa.field(self.name, self.type)])

    def __call__(self, rows):
        ug, inv = groups_of(rows)
        ch = np_int(rows.column(CHANNEL))
        cnt = np_int(rows.column(COUNT))
        w = cnt if self.weight is None else exact_sum.from_arrow(rows.column(self.weight))
        weight = np.zeros(len(ug), w.dtype)
        present = np.zeros(len(ug), np.int64)
        np.add.at(weight, inv[ch == 0], w[ch == 0])
        np.add.at(present, inv[ch == 1], cnt[ch == 1])
        value = present if self.rows_count else weight
        keep = present > 0
        return pa.table({GROUP: pa.array(ug[keep], pa.int64()), self.name: exact_sum.values(value[keep], self.type),
                         COUNT: pa.array(np.ones(int(keep.sum())), pa.int64())})


def abelian_pays(table: pa.Table, key: list[str], values: list[str], reducer: Reducer) -> bool:
    """Two synthetic rows (and the presence grids) beat the plain grid once keys hold more
    than a few distinct value rows."""
    if not isinstance(reducer, (Count, Sum, CountDistinct)):
        return False
    kid, K = row_ids(table, key, ordered=False)
    kv, P = row_ids(table, values, base=kid, ordered=False)
    return P > 4 * K


def abelian_grid(table: pa.Table, key: list[str], values: list[str], d: int, reducer: Reducer,
                 out_schema: pa.Schema, result_schema: pa.Schema, max_cells: int) -> list[pa.Table]:
    syn = abelian_synthetic(table, key, values, d, reducer, max_cells)
    if syn is None:
        return []
    scalar = scalar_of(reducer, out_schema)
    return grid_delta(syn, key, [CHANNEL], d, scalar, out_schema, result_schema, max_cells, weight=scalar.weight)


def scalar_of(reducer: Reducer, out_schema: pa.Schema) -> "_Scalar":
    """``reducer`` over a key's two synthetic rows (:func:`abelian_synthetic`)."""
    name = out_schema.names[0]
    return _Scalar(name, out_schema.field(name).type, isinstance(reducer, CountDistinct),
                   WEIGHT if isinstance(reducer, Sum) else None)


def synthetic_columns(reducer: Reducer) -> list[str]:
    """The columns of a key's synthetic rows besides the key and time columns."""
    return ["diff", "_new", CHANNEL] + ([WEIGHT] if isinstance(reducer, Sum) else [])


def abelian_synthetic(table: pa.Table, key: list[str], values: list[str], d: int, reducer: Reducer,
                      max_cells: int) -> pa.Table | None:
    """A key's synthetic rows: key and time columns, ``diff``, ``_new`` and ``_channel``
    (0: the weight's updates, 1: presence changes, from each value row's own grid), and
    for a sum ``WEIGHT``, the weight (value x diff on channel 0). Rows of different value rows
    add up, so the synthetic rows of shares of a key's value rows (``ops/reduce/operator.py``'s two
    stages) sum to the key's."""
    tcols = time_columns(d)
    rows_count = isinstance(reducer, CountDistinct)
    present = (lambda c: (np.asarray(c) > 0).astype(np.int64)) if rows_count else \
        (lambda c: (np.asarray(c) != 0).astype(np.int64))
    row_key = key + values
    row_schema = pa.schema([table.schema.field(c) for c in row_key] + [pa.field(c, pa.int64()) for c in tcols]
                           + [pa.field("diff", pa.int64())])
    old, delta = _traces(table, row_key, [], d, Threshold(present), pa.schema([]), row_schema, max_cells)
    key_cols = key + tcols
    parts = [_channel(p.select(key_cols + ["diff"]), 1, False) for p in old]
    parts += [_channel(p.select(key_cols + ["diff"]), 1, True) for p in delta]
    if not rows_count:
        weights = table.select(key_cols + ["diff"]).append_column("_new", pa.array(new_flags(table)))
        if isinstance(reducer, Sum):  # presence changes weigh nothing
            w = _sum_weights(table, values, reducer)
            parts = [p.append_column(WEIGHT, exact_sum.to_arrow(np.zeros(p.num_rows, w.dtype))) for p in parts]
            weights = weights.append_column(WEIGHT, exact_sum.to_arrow(w))
        parts.append(_channel(weights, 0, None))
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return None
    names = key_cols + synthetic_columns(reducer)
    schema = parts[0].select(names).schema
    return pa.concat_tables([p.select(names).cast(schema) for p in parts])


def _sum_weights(table: pa.Table, values: list[str], reducer: Sum) -> np.ndarray:
    """value x diff per update, exactly (ops/exact_sum.py; a null adds 0)."""
    return exact_sum.weights(table.column(reducer.col), reducer.out_type(table.select(values).schema),
                             np_int(table.column("diff")))


def _channel(t: pa.Table, channel: int, new: bool | None) -> pa.Table:
    t = t.append_column(CHANNEL, pa.array(np.full(t.num_rows, channel, np.int64)))
    return t if new is None else _as(t, new)


# ------------------------------------------------------------------ order


def full_rows(reducer: Reducer) -> TopK:
    """The same order as ``reducer``, keeping whole value rows."""
    if isinstance(reducer, TopK):
        return reducer
    return TopK(1, [reducer.col], descending=isinstance(reducer, Max))


def order_grid(table: pa.Table, key: list[str], values: list[str], d: int, reducer: Reducer,
               out_schema: pa.Schema, result_schema: pa.Schema, max_cells: int, limit_cells: int,
               depth: int = 0) -> list[pa.Table]:
    """``min``/``max``/``top_k``; keys over ``limit_cells`` are reduced in shares first."""
    tcols = time_columns(d)
    kid, K = row_ids(table, key, ordered=False)
    kv, _ = row_ids(table, values, base=kid, ordered=False)
    cells = grid_cells(table, kid, K, values, d)
    shares = np.maximum(1, np.ceil(cells / max(limit_cells, 1))).astype(np.int64)
    big = shares[kid] > 1
    if not big.any() or depth >= 3:
        return grid_delta(table, key, values, d, reducer, out_schema, result_schema, max_cells)
    parts = []
    if not big.all():
        parts += grid_delta(table.filter(pa.array(~big)), key, values, d, reducer, out_schema, result_schema, max_cells)
    hot = table.filter(pa.array(big))
    share = (kv[big] % shares[kid[big]]).astype(np.int64)
    hot = hot.append_column(SHARE, pa.array(share))
    full = full_rows(reducer)
    share_key = key + [SHARE]
    share_schema = pa.schema([hot.schema.field(c) for c in share_key + values] + [pa.field(c, pa.int64()) for c in tcols]
                             + [pa.field("diff", pa.int64())])
    old, delta = _traces(hot, share_key, values, d, full, full.output_schema(hot.select(values).schema),
                         share_schema, max_cells)
    firsts = [_as(p, False) for p in old] + [_as(p, True) for p in delta]
    firsts = [p.drop_columns([SHARE]) for p in firsts if p.num_rows]
    if firsts:
        parts += order_grid(pa.concat_tables(firsts), key, values, d, reducer, out_schema, result_schema,
                            max_cells, limit_cells, depth + 1)
    return parts
