"""The ``reduce`` kernel: output changes of ``f(input accumulated at t)`` for a delta.

A pure function over Arrow tables, meant to run inside Spark's ``mapInArrow`` on
key-partitioned data (all updates of a key in one batch). It follows the design note of
DESIGN.md §4: for a key, the accumulated input only changes on the key's *grid* (the
product of the distinct values each time coordinate takes among the key's updates), so
``F(g) = f(input at g)`` is evaluated on grid points only and the output updates are the
d-dimensional finite differences of ``F``.

Incrementality: the output of a run is ``Z_total - Z_old`` = finite differences of
``E = F_total - F_old``. ``E(g)`` is zero wherever the new updates accumulated at ``g``
cancel (in particular wherever no new update is ``<= g``), so ``f`` only runs at grid
points where the new updates change the accumulated input.

Everything is numpy / pyarrow.compute over many keys and grid points at once; Python
loops run over the ``d`` coordinates, the ``2^d`` subsets, and chunks of keys that bound
memory (``max_cells``) -- never per row, key or grid point (except in ``PerKey``, the
user-defined escape hatch, which calls its function once per group).

Cost, per key with ``V`` distinct value rows and grid size ``G = prod_i n_i``: the
accumulation fills a dense ``V x G`` array (one segmented prefix sum per coordinate, via a
sort-free permutation), and ``f`` reads the full accumulated collection (twice: total and
old) at every grid point the delta changes -- like DD, whose reduce also re-reads a key's
input at every interesting time. The one-off sorts (key ids, value ids, ranks) are
O(n log n) in the key's updates. Old updates compacted onto the consumed frontier add one
value per coordinate, so ``n_i`` is about the new distinct values of coordinate ``i``, + 1.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.lattice import time_columns

__all__ = [
    "GROUP",
    "COUNT",
    "reduce_delta",
    "Reducer",
    "Count",
    "CountDistinct",
    "Sum",
    "Min",
    "Max",
    "Distinct",
    "Threshold",
    "TopK",
    "PerKey",
]

GROUP = "_group"
COUNT = "_count"
_RESERVED = {GROUP, COUNT, "diff", "_new"}


# ============================================================== small vectorised helpers


def _np_int(col) -> np.ndarray:
    """An int64 numpy copy of an Arrow column (nulls are an error: counts/times must be set)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.null_count:
        raise ValueError("unexpected null in a time/diff/count column")
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)


def _densify(x: np.ndarray) -> tuple[np.ndarray, int]:
    u, inv = np.unique(x, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(u)


def _leaves(col):
    """The columns whose codes together identify a value: structs by their fields, floats
    with -0.0 folded into 0.0 (they compare equal)."""
    t = col.type
    if pa.types.is_struct(t):
        yield pc.is_valid(col)
        for child in col.flatten():
            yield from _leaves(child)
    elif pa.types.is_floating(t):
        yield pc.add(col, pa.scalar(0, t))
    elif pa.types.is_dictionary(t):
        yield col.cast(t.value_type)
    else:
        yield col


def _codes(col) -> tuple[np.ndarray, int]:
    """Dense codes of a column's values (null is a value) and how many there are."""
    try:
        enc = pc.dictionary_encode(col, null_encoding="encode")
    except pa.ArrowNotImplementedError as e:
        raise TypeError(f"reduce: cannot group by values of type {col.type} (use a primitive, string or struct column)") from e
    if isinstance(enc, pa.ChunkedArray):  # one dictionary shared by all chunks
        if enc.num_chunks == 0:
            return np.zeros(0, np.int64), 0
        codes = np.concatenate([np.asarray(ch.indices.to_numpy(zero_copy_only=False), np.int64) for ch in enc.chunks])
        return codes, len(enc.chunk(0).dictionary)
    return np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64), len(enc.dictionary)


def _row_ids(table: pa.Table, cols: Sequence[str], base: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Dense ids of distinct rows over ``cols``, refining ``base`` ids if given.

    The ids are sorted like ``base`` (then the columns' codes), and re-densified after
    each column so the combined code never overflows.
    """
    n = table.num_rows
    if base is None:
        ids, count = np.zeros(n, np.int64), (1 if n else 0)
    else:
        ids = base
        count = int(ids.max()) + 1 if n else 0
    for c in cols:
        for leaf in _leaves(table.column(c)):
            codes, m = _codes(leaf)
            ids, count = _densify(ids * max(m, 1) + codes)
    return ids, count


def _group_sum(keys: Sequence[np.ndarray], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum ``values`` over rows with equal ``keys``; returns (one representative row, sums)."""
    if len(values) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(tuple(reversed(keys)))
    start = np.zeros(len(order), bool)
    start[0] = True
    for k in keys:
        ks = k[order]
        start[1:] |= ks[1:] != ks[:-1]
    idx = np.flatnonzero(start)
    return order[idx], np.add.reduceat(values[order], idx)


def _seg_cumsum_(x: np.ndarray, idx: np.ndarray, lens: np.ndarray) -> None:
    """In place: cumulative sums restarting at positions ``idx`` (segment lengths ``lens``).

    ``idx[0]`` must be 0. int64 wrap-around in the running sum cancels out.
    """
    head = x[idx]
    np.cumsum(x, out=x)
    x -= np.repeat(x[idx] - head, lens)


def _exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x), np.int64)
    np.cumsum(x[:-1], out=out[1:])
    return out


def _groups_of(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(distinct group ids, index of each row's group) for a reducer input."""
    g = _np_int(rows.column(GROUP))
    ug, inv = np.unique(g, return_inverse=True)
    return ug, inv.reshape(-1)


def _empty_table(schema: pa.Schema) -> pa.Table:
    return pa.table({f.name: pa.array([], f.type) for f in schema}, schema=schema)


# ============================================================== the kernel

#: Dense accumulation cells (value rows x grid points) handled at once; keys are
#: processed in chunks of about this many cells to bound memory (~100 bytes a cell).
CELL_BUDGET = 1 << 21


def _touched_keys_only(table: pa.Table, key: list[str]) -> pa.Table:
    """Drop the old updates of keys without a new update: their output cannot change
    (callers may pass a whole arrangement rather than pay for a semi-join)."""
    new = np.asarray(table.column("_new").to_numpy(zero_copy_only=False), dtype=bool)
    if new.all():
        return table
    kid, k = _row_ids(table, key)
    touched = np.zeros(k, bool)
    touched[kid[new]] = True
    keep = touched[kid]
    return table if keep.all() else table.filter(pa.array(keep))


def reduce_delta(
    table: pa.Table,
    key: list[str],
    values: list[str],
    d: int,
    reducer: "Reducer",
    *,
    max_cells: int = CELL_BUDGET,
) -> pa.Table:
    """Output updates of ``reducer`` caused by this run's new updates (``_new``).

    ``table`` holds every update (old and new) of each key in the delta. Returns key
    columns, the reducer's output columns, time columns and ``diff``, consolidated and
    sorted, equal to ``Z_total - Z_old`` (see the module docstring). ``max_cells`` bounds
    the working set (keys are processed in chunks); it does not change the result.
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
    n = table.num_rows
    if n == 0:
        return _empty_table(result_schema)

    # keys and (key, value row) pairs; kv ids are sorted by key
    kid, K = _row_ids(table, key)
    kv, P = _row_ids(table, values, base=kid)
    rows = np.arange(n, dtype=np.int64)
    key_rep = np.empty(K, np.int64)
    key_rep[kid] = rows
    kv_rep = np.empty(P, np.int64)
    kv_rep[kv] = rows
    kv_key = kid[kv_rep]

    # per coordinate: each key's sorted distinct values, and each update's rank in them
    ranks, ncoord, tstart, tvals = [], [], [], []
    for c in tcols:
        t = _np_int(table.column(c))
        order = np.lexsort((t, kid))
        ks, ts = kid[order], t[order]
        first = np.ones(n, bool)
        first[1:] = (ks[1:] != ks[:-1]) | (ts[1:] != ts[:-1])
        cnt = np.bincount(ks[first], minlength=K).astype(np.int64)
        st = _exclusive_cumsum(cnt)
        r = np.empty(n, np.int64)
        r[order] = np.cumsum(first) - 1 - st[ks]
        ranks.append(r)
        ncoord.append(cnt)
        tstart.append(st)
        tvals.append(ts[first])

    # what every chunk of keys shares (whole-table arrays are indexed by row)
    ctx = SimpleNamespace(
        table=table,
        key=key,
        values=values,
        d=d,
        reducer=reducer,
        out_schema=out_schema,
        result_schema=result_schema,
        diff=_np_int(table.column("diff")),
        new=(
            np.asarray(table.column("_new").to_numpy(zero_copy_only=False), dtype=bool)
            if "_new" in table.column_names
            else np.ones(n, bool)
        ),
        ranks=ranks,
        tstart=tstart,
        tvals=tvals,
    )

    # chunks of whole keys, each about max_cells dense cells (a huge key goes alone)
    kv_per_key = np.bincount(kv_key, minlength=K).astype(np.int64)
    gsize = np.ones(K, np.int64)
    for cnt in ncoord:
        gsize *= cnt
    chunk = _exclusive_cumsum(gsize * kv_per_key) // max(int(max_cells), 1)
    kbounds = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1], True])
    row_order = np.argsort(kid, kind="stable")
    row_start = np.r_[0, np.cumsum(np.bincount(kid, minlength=K))]
    kv_start = np.r_[0, np.cumsum(kv_per_key)]
    parts = []
    for k0, k1 in zip(kbounds[:-1], kbounds[1:]):
        sel = row_order[row_start[k0] : row_start[k1]]
        part = _reduce_keys(
            ctx,
            sel,
            kid[sel] - k0,
            kv[sel] - kv_start[k0],
            [nc[k0:k1] for nc in ncoord],
            kv_key[kv_start[k0] : kv_start[k1]] - k0,
            kv_rep[kv_start[k0] : kv_start[k1]],
            key_rep[k0:k1],
            k0,
        )
        if part is not None:
            parts.append(part)
    if not parts:
        return _empty_table(result_schema)
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    try:
        return out.sort_by([(c, "ascending") for c in key + out_schema.names + tcols])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return out  # unsortable column types: consolidated, just not ordered


def _reduce_keys(ctx, sel, kid, kv, ncoord, kv_key, kv_rep, key_rep, k0):
    """reduce_delta for the keys ``k0 ..`` whose rows are ``sel``; ids here are chunk-local."""
    d, table = ctx.d, ctx.table
    K, P = len(key_rep), len(kv_rep)
    diff, new = ctx.diff[sel], ctx.new[sel]

    # mixed-radix layout of each key's grid, last coordinate fastest; per grid point its
    # key, coordinates, and (for the axis permutations) its index with coordinate i last
    strides = [None] * d
    s = np.ones(K, np.int64)
    for i in reversed(range(d)):
        strides[i] = s
        s = s * ncoord[i]
    gsize = s
    gbase = _exclusive_cumsum(gsize)
    gkey = np.repeat(np.arange(K, dtype=np.int64), gsize)
    glocal = np.arange(len(gkey), dtype=np.int64) - gbase[gkey]
    gcoord, gperm = [], []
    for i in range(d):
        st_i, n_i = strides[i][gkey], ncoord[i][gkey]
        q = glocal // st_i
        r_i = q % n_i
        gcoord.append(r_i)
        gperm.append(((q // n_i) * st_i + (glocal - q * st_i)) * n_i + r_i)
    del glocal

    # dense cells: one copy of its key's grid per (key, value row), blocks in kv order
    cell_count = gsize[kv_key]
    cbase = _exclusive_cumsum(cell_count)
    C = int(cell_count.sum())
    cell_kv = np.repeat(np.arange(P, dtype=np.int64), cell_count)
    base = cbase[cell_kv]
    gid = np.arange(C, dtype=np.int64)
    gid -= base
    gid += gbase[kv_key][cell_kv]  # the cell's grid point

    at = cbase[kv]
    for i in range(d):
        at += ctx.ranks[i][sel] * strides[i][kid]
    total = np.zeros(C, np.int64)
    fresh = np.zeros(C, np.int64)
    np.add.at(total, at, diff)
    np.add.at(fresh, at, np.where(new, diff, 0))

    # accumulate: prefix sum along each coordinate within each block
    for i in range(d):
        first = gcoord[i][gid] == 0
        if i == d - 1:  # contiguous runs already
            idx = np.flatnonzero(first)
            lens = np.diff(np.append(idx, C))
            for a in (total, fresh):
                _seg_cumsum_(a, idx, lens)
            continue
        # move coordinate i last: a permutation within the block, no sort needed
        pos = base + gperm[i][gid]
        start = np.empty(C, bool)
        start[pos] = first
        idx = np.flatnonzero(start)
        lens = np.diff(np.append(idx, C))
        for a in (total, fresh):
            tr = np.empty_like(a)
            tr[pos] = a
            _seg_cumsum_(tr, idx, lens)
            a[:] = tr[pos]
        del pos, start, tr
    del base

    # grid points where the new updates change the accumulated input: E = F_total - F_old
    changed = np.zeros(len(gkey), bool)
    changed[gid[fresh != 0]] = True
    point_ids = np.flatnonzero(changed)
    compact = np.cumsum(changed) - 1
    in_pt = changed[gid]
    cells_t = np.flatnonzero(in_pt & (total != 0))
    cells_o = np.flatnonzero(in_pt & (total != fresh))
    group = np.concatenate([2 * compact[gid[cells_t]], 2 * compact[gid[cells_o]] + 1])
    if len(group) == 0:
        return None
    count = np.concatenate([total[cells_t], total[cells_o] - fresh[cells_o]])
    take = pa.array(kv_rep[cell_kv[np.concatenate([cells_t, cells_o])]])
    del gid, cell_kv, total, fresh, in_pt
    rin = pa.table(
        {
            GROUP: pa.array(group, pa.int64()),
            **{c: table.column(c).take(take) for c in ctx.values},
            COUNT: pa.array(count, pa.int64()),
        }
    )

    rout = ctx.reducer(rin)
    outcols = ctx.out_schema.names
    for c in [GROUP, COUNT] + outcols:
        if c not in rout.column_names:
            raise ValueError(f"reducer {ctx.reducer!r} returned no column {c!r}")
    if rout.num_rows == 0:
        return None
    og = _np_int(rout.column(GROUP))
    e_cnt = _np_int(rout.column(COUNT)) * np.where(og % 2 == 1, -1, 1)
    e_pt = point_ids[og // 2]
    ocode, _ = _row_ids(rout, outcols)

    # consolidate E, then finite differences: shift each E row to successors with sign
    rep, e_cnt = _group_sum([e_pt, ocode], e_cnt)
    keep = e_cnt != 0
    rep, e_cnt = rep[keep], e_cnt[keep]
    e_pt = e_pt[rep]
    pkey = gkey[e_pt]
    z_pt, z_rep, z_cnt = [], [], []
    for S in range(1 << d):
        ok = np.ones(len(e_pt), bool)
        shift = np.zeros(len(e_pt), np.int64)
        for i in range(d):
            if S >> i & 1:
                ok &= gcoord[i][e_pt] < ncoord[i][pkey] - 1
                shift += strides[i][pkey]
        sign = -1 if bin(S).count("1") % 2 else 1
        z_pt.append((e_pt + shift)[ok])
        z_rep.append(rep[ok])
        z_cnt.append(sign * e_cnt[ok])
    z_pt, z_rep, z_cnt = (np.concatenate(a) for a in (z_pt, z_rep, z_cnt))
    r2, z_cnt = _group_sum([z_pt, ocode[z_rep]], z_cnt)
    keep = z_cnt != 0
    if not keep.any():
        return None
    r2, z_cnt = r2[keep], z_cnt[keep]
    z_pt, z_rep = z_pt[r2], z_rep[r2]

    # back to columns: key values, output values, grid coordinates -> times
    zkey = gkey[z_pt]
    cols = {}
    ktake, otake = pa.array(key_rep[zkey]), pa.array(z_rep)
    for c in ctx.key:
        cols[c] = table.column(c).take(ktake)
    for f in ctx.out_schema:
        cols[f.name] = rout.column(f.name).take(otake).cast(f.type)
    for i, c in enumerate(time_columns(d)):
        cols[c] = pa.array(ctx.tvals[i][ctx.tstart[i][zkey + k0] + gcoord[i][z_pt]], pa.int64())
    cols["diff"] = pa.array(z_cnt, pa.int64())
    return pa.table(cols, schema=ctx.result_schema)


# ============================================================== reducers


class Reducer:
    """``f`` for many groups at once: rows ``_group`` + value columns + ``_count`` in,
    ``_group`` + output columns + ``_count`` out. Input counts are non-zero and each
    value row appears at most once per group."""

    def output_schema(self, values_schema: pa.Schema) -> pa.Schema:
        """The output columns (without ``_group``/``_count``), known before Spark runs."""
        raise NotImplementedError

    def __call__(self, rows: pa.Table) -> pa.Table:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


def _out(groups, columns: dict, counts=None) -> pa.Table:
    n = len(groups)
    cnt = np.ones(n, np.int64) if counts is None else counts
    return pa.table({GROUP: pa.array(groups, pa.int64()), **columns, COUNT: pa.array(cnt, pa.int64())})


def _check_col(values_schema: pa.Schema, col: str) -> pa.Field:
    if col not in values_schema.names:
        raise ValueError(f"column {col!r} is not a value column (value columns: {values_schema.names})")
    return values_schema.field(col)


def _positive(rows: pa.Table) -> pa.Table:
    return rows.filter(pc.greater(rows.column(COUNT), 0))


class Count(Reducer):
    """DD ``count``: total multiplicity of a key's accumulated input, one row per key."""

    def __init__(self, name: str = "count"):
        self.name = name

    def output_schema(self, values_schema):
        return pa.schema([pa.field(self.name, pa.int64())])

    def __call__(self, rows):
        ug, inv = _groups_of(rows)
        s = np.zeros(len(ug), np.int64)
        np.add.at(s, inv, _np_int(rows.column(COUNT)))
        return _out(ug, {self.name: pa.array(s, pa.int64())})


class CountDistinct(Reducer):
    """Number of distinct value rows present (count > 0); ``Count`` of ``Distinct``, so
    groups with no positive row produce nothing."""

    def __init__(self, name: str = "distinct"):
        self.name = name

    def output_schema(self, values_schema):
        return pa.schema([pa.field(self.name, pa.int64())])

    def __call__(self, rows):
        ug, inv = _groups_of(_positive(rows))
        return _out(ug, {self.name: pa.array(np.bincount(inv, minlength=len(ug)), pa.int64())})


class Sum(Reducer):
    """``sum(col * count)``; int64 for integer columns, float64 for floats; nulls add 0."""

    def __init__(self, col: str, name: str | None = None):
        self.col, self.name = col, name or "sum"

    def output_schema(self, values_schema):
        t = _check_col(values_schema, self.col).type
        if pa.types.is_integer(t) or pa.types.is_boolean(t):
            return pa.schema([pa.field(self.name, pa.int64())])
        if pa.types.is_floating(t):
            return pa.schema([pa.field(self.name, pa.float64())])
        raise TypeError(f"Sum({self.col!r}): column type {t} is not numeric")

    def __call__(self, rows):
        out_t = self.output_schema(rows.schema).field(self.name).type
        dtype = np.int64 if out_t == pa.int64() else np.float64
        col = rows.column(self.col)
        col = pc.fill_null(col.cast(out_t), pa.scalar(0, out_t))
        v = np.asarray(col.to_numpy(), dtype=dtype)
        ug, inv = _groups_of(rows)
        s = np.zeros(len(ug), dtype)
        np.add.at(s, inv, v * _np_int(rows.column(COUNT)))
        return _out(ug, {self.name: pa.array(s, out_t)})


class _Extreme(Reducer):
    _order = "ascending"
    _default = ""

    def __init__(self, col: str, name: str | None = None):
        self.col, self.name = col, name or self._default

    def output_schema(self, values_schema):
        return pa.schema([pa.field(self.name, _check_col(values_schema, self.col).type)])

    def __call__(self, rows):
        rows = _positive(rows).sort_by([(GROUP, "ascending"), (self.col, self._order)])
        g = _np_int(rows.column(GROUP))
        first = np.ones(len(g), bool)
        first[1:] = g[1:] != g[:-1]
        idx = pa.array(np.flatnonzero(first))
        return _out(g[first], {self.name: rows.column(self.col).take(idx)})


class Min(_Extreme):
    """Least value of ``col`` among rows present (count > 0); nulls only if all are null."""

    _order, _default = "ascending", "min"


class Max(_Extreme):
    """Greatest value of ``col`` among rows present (count > 0); nulls only if all are null."""

    _order, _default = "descending", "max"


class Distinct(Reducer):
    """Each value row present (count > 0), once."""

    def output_schema(self, values_schema):
        return values_schema

    def __call__(self, rows):
        rows = _positive(rows)
        return rows.set_column(rows.schema.get_field_index(COUNT), COUNT, pa.array(np.ones(rows.num_rows, np.int64)))


class Threshold(Reducer):
    """Each value row with multiplicity ``fn(count)``; ``fn`` maps an int64 array to an array."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray]):
        self.fn = fn

    def output_schema(self, values_schema):
        return values_schema

    def __call__(self, rows):
        m = np.asarray(self.fn(_np_int(rows.column(COUNT)))).astype(np.int64).reshape(-1)
        rows = rows.set_column(rows.schema.get_field_index(COUNT), COUNT, pa.array(m, pa.int64()))
        return rows.filter(pa.array(m != 0))


class TopK(Reducer):
    """The first ``k`` records (with multiplicity) per key in ``order_by`` order, then the
    remaining value columns ascending as tie-break; rows with count <= 0 are ignored."""

    def __init__(self, k: int, order_by: list[str], descending: bool = False):
        if k < 0:
            raise ValueError("TopK: k must be >= 0")
        self.k, self.order_by, self.descending = int(k), list(order_by), bool(descending)

    def output_schema(self, values_schema):
        for c in self.order_by:
            _check_col(values_schema, c)
        return values_schema

    def __call__(self, rows):
        rest = [c for c in rows.column_names if c not in (GROUP, COUNT) and c not in self.order_by]
        direction = "descending" if self.descending else "ascending"
        rows = _positive(rows).sort_by(
            [(GROUP, "ascending")] + [(c, direction) for c in self.order_by] + [(c, "ascending") for c in rest]
        )
        g = _np_int(rows.column(GROUP))
        c = _np_int(rows.column(COUNT))
        start = np.ones(len(g), bool)
        start[1:] = g[1:] != g[:-1]
        idx = np.flatnonzero(start)
        before = c.copy()
        _seg_cumsum_(before, idx, np.diff(np.append(idx, len(c))))
        before -= c
        m = np.minimum(c, np.maximum(self.k - before, 0))
        rows = rows.set_column(rows.schema.get_field_index(COUNT), COUNT, pa.array(m, pa.int64()))
        return rows.filter(pa.array(m > 0))


class PerKey(Reducer):
    """User-defined ``fn(rows) -> rows`` on one group's value rows plus ``_count``.

    The escape hatch: it loops in Python once per (key, grid point) group, so prefer the
    vectorised reducers. The output may carry ``_count`` (default 1). Without ``schema``,
    the output schema is inferred by calling ``fn`` on an empty table.
    """

    def __init__(self, fn: Callable[[pa.Table], pa.Table], schema: pa.Schema | None = None):
        self.fn, self.schema = fn, schema

    def output_schema(self, values_schema):
        if self.schema is not None:
            return pa.schema(self.schema)
        probe = _empty_table(pa.schema(list(values_schema) + [pa.field(COUNT, pa.int64())]))
        try:
            res = self.fn(probe)
        except Exception as e:  # noqa: BLE001 - tell the user how to avoid the probe
            raise ValueError(f"PerKey: could not infer the output schema ({e}); pass schema=") from e
        return pa.schema([f for f in res.schema if f.name != COUNT])

    def __call__(self, rows):
        schema = self.output_schema(pa.schema([f for f in rows.schema if f.name not in (GROUP, COUNT)]))
        g = _np_int(rows.column(GROUP))
        order = np.argsort(g, kind="stable")
        rows, g = rows.take(pa.array(order)), g[order]
        bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1], True]) if len(g) else np.zeros(1, np.int64)
        body = rows.drop_columns([GROUP])
        parts = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            res = self.fn(body.slice(a, b - a))
            cnt = (
                _np_int(res.column(COUNT)) if COUNT in res.column_names else np.ones(res.num_rows, np.int64)
            )
            cols = {f.name: res.column(f.name).cast(f.type) for f in schema}
            parts.append(_out(np.full(res.num_rows, g[a], np.int64), cols, cnt))
        if not parts:
            return _out(np.zeros(0, np.int64), {f.name: pa.array([], f.type) for f in schema}, np.zeros(0, np.int64))
        out = pa.concat_tables(parts)
        return out.filter(pc.not_equal(out.column(COUNT), 0))
