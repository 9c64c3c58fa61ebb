"""The grid kernel: ``f`` evaluated on each key's grid of times (docs/architecture.md: reduce).

For a key, the accumulated input only changes on the key's *grid* (the product of the
distinct values each time coordinate takes among the key's updates), so ``F(g) = f(input
at g)`` is evaluated on grid points only and the output updates are the d-dimensional
finite differences of ``F``. Incrementality: the output of a run is the finite
differences of ``E = F_total - F_old``, and ``E(g)`` is zero wherever no new update is
``<= g``, so ``f`` only runs at grid points where the new updates change the input.

Cost, per key with ``V`` distinct value rows and grid size ``G = prod_i n_i``: a dense
``V x G`` array. That is the right shape for user reducers (``reduce_per_key``), which see
whole collections, and for ``d >= 2``; one-dimensional built-in reducers use the sweeps
of ``ops.reduce.sweep`` instead. Keys are processed in chunks of about ``max_cells``
cells; a single key larger than that is refused (:class:`KeyTooLarge`) rather than
allowed to take a worker's memory down.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pyarrow as pa

from ops import exact_sum
from ops.columnar import (COUNT, GROUP, exclusive_cumsum, new_flags, np_int, ranks_within, row_ids,
                          seg_cumsum_any_)
from ops.errors import KeyTooLarge
from storage.lattice import time_columns
from storage.row_order import group_sum, lex_order


def grid_cells(table: pa.Table, kid: np.ndarray, K: int, values: list[str], d: int,
               per_row: bool = False) -> np.ndarray:
    """Dense cells per key id (``kid``, ``0 .. K - 1``) the grid kernel would build:
    ``value rows x grid points``, or with ``per_row`` the sum of each (key, value row)'s
    own grid (the reducers that look at one row, or its presence, at a time)."""
    kv, P = row_ids(table, values, base=kid, ordered=False)
    unit, U = (kv, P) if per_row else (kid, K)
    size = np.ones(U, np.float64)
    for c in time_columns(d):  # distinct coordinates per unit
        t = np_int(table.column(c))
        o = lex_order([unit, t])
        u, ts = unit[o], t[o]
        first = np.r_[True, (u[1:] != u[:-1]) | (ts[1:] != ts[:-1])] if len(o) else np.zeros(0, bool)
        size *= np.bincount(u[first], minlength=U)
    if per_row:
        unit_key = np.zeros(P, np.int64)
        unit_key[kv] = kid
        return np.bincount(unit_key, weights=size, minlength=K)
    return size * np.bincount(kid[np.unique(kv, return_index=True)[1]], minlength=K)


def grid_delta(table: pa.Table, key: list[str], values: list[str], d: int, reducer, out_schema: pa.Schema,
               result_schema: pa.Schema, max_cells: int, limit_cells: int | None = None,
               weight: str | None = None) -> list[pa.Table]:
    """Output changes (unsorted parts) of ``reducer`` for the touched keys of ``table``;
    a key needing more than ``limit_cells`` dense cells raises :class:`KeyTooLarge`.

    ``weight`` names a numeric column accumulated along the grid like ``diff`` and handed
    to ``reducer`` (as that column) beside ``COUNT``: a sum's weight on its synthetic rows
    (``ops/reduce/builtin_grid.py``), which for a sum of floats an int64 count cannot carry."""
    n = table.num_rows
    tcols = time_columns(d)
    # keys and (key, value row) pairs; kv ids are sorted by key
    kid, K = row_ids(table, key)
    kv, P = row_ids(table, values, base=kid)
    rows = np.arange(n, dtype=np.int64)
    key_rep = np.empty(K, np.int64)
    key_rep[kid] = rows
    kv_rep = np.empty(P, np.int64)
    kv_rep[kv] = rows
    kv_key = kid[kv_rep]

    # per coordinate: each key's sorted distinct values, and each update's rank in them
    ranks, ncoord, tstart, tvals = (list(x) for x in zip(*[ranks_within(kid, K, np_int(table.column(c)))
                                                          for c in tcols]))

    # what every chunk of keys shares (whole-table arrays are indexed by row)
    ctx = SimpleNamespace(
        table=table,
        key=key,
        values=values,
        d=d,
        reducer=reducer,
        out_schema=out_schema,
        result_schema=result_schema,
        diff=np_int(table.column("diff")),
        new=new_flags(table),
        weight=weight,
        w=None if weight is None else exact_sum.from_arrow(table.column(weight)),
        ranks=ranks,
        tstart=tstart,
        tvals=tvals,
    )

    # chunks of whole keys, each about max_cells dense cells (a huge key goes alone)
    kv_per_key = np.bincount(kv_key, minlength=K).astype(np.int64)
    gsize = np.ones(K, np.int64)
    for cnt in ncoord:
        gsize *= cnt
    chunk = exclusive_cumsum(gsize * kv_per_key) // max(int(max_cells), 1)
    kbounds = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1], True])
    row_order = np.argsort(kid, kind="stable")
    row_start = np.r_[0, np.cumsum(np.bincount(kid, minlength=K))]
    kv_start = np.r_[0, np.cumsum(kv_per_key)]
    cells = gsize * kv_per_key
    if limit_cells is not None and len(cells) and cells.max() > limit_cells:
        big = int(np.argmax(cells))
        shown = {c: table.column(c)[int(key_rep[big])].as_py() for c in key}
        raise KeyTooLarge(
            f"{reducer!r}: key {shown} needs {int(cells[big]):,} cells ({int(kv_per_key[big]):,} distinct value rows "
            f"x {int(gsize[big]):,} grid points), over the budget of {int(limit_cells):,} "
            f"(DDCLI_REDUCE_MEMORY); split the key or raise the budget")
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
    return parts


def _reduce_keys(ctx, sel, kid, kv, ncoord, kv_key, kv_rep, key_rep, k0):
    """reduce_delta for the keys ``k0 ..`` whose rows are ``sel``; ids here are chunk-local."""
    d, table = ctx.d, ctx.table
    g = _grid(d, ncoord, len(key_rep))
    cells = _accumulated_cells(ctx, sel, kid, kv, kv_key, len(kv_rep), g)
    changed = _changed_points(ctx, g, cells, kv_rep)
    if changed is None:
        return None
    rin, point_ids = changed
    rout = ctx.reducer(rin)
    outcols = ctx.out_schema.names
    for c in [GROUP, COUNT] + outcols:
        if c not in rout.column_names:
            raise ValueError(f"reducer {ctx.reducer!r} returned no column {c!r}")
    if rout.num_rows == 0:
        return None
    z = _output_changes(rout, outcols, point_ids, g, ncoord, d)
    if z is None:
        return None
    z_pt, z_rep, z_cnt = z

    # back to columns: key values, output values, grid coordinates -> times
    zkey = g.gkey[z_pt]
    cols = {}
    ktake, otake = pa.array(key_rep[zkey]), pa.array(z_rep)
    for c in ctx.key:
        cols[c] = table.column(c).take(ktake)
    for f in ctx.out_schema:
        cols[f.name] = rout.column(f.name).take(otake).cast(f.type)
    for i, c in enumerate(time_columns(d)):
        cols[c] = pa.array(ctx.tvals[i][ctx.tstart[i][zkey + k0] + g.gcoord[i][z_pt]], pa.int64())
    cols["diff"] = pa.array(z_cnt, pa.int64())
    return pa.table(cols, schema=ctx.result_schema)


@dataclass
class _Grid:
    """The mixed-radix layout of a chunk's keys' grids, last coordinate fastest: each key's
    grid size and first point, and per grid point its key, its coordinates and (for the axis
    permutations) its index within the key's grid with coordinate ``i`` last."""

    strides: list
    gsize: np.ndarray
    gbase: np.ndarray
    gkey: np.ndarray
    gcoord: list
    gperm: list


def _grid(d: int, ncoord: list, keys: int) -> _Grid:
    strides = [None] * d
    s = np.ones(keys, np.int64)
    for i in reversed(range(d)):
        strides[i] = s
        s = s * ncoord[i]
    gsize = s
    gbase = exclusive_cumsum(gsize)
    gkey = np.repeat(np.arange(keys, dtype=np.int64), gsize)
    glocal = np.arange(len(gkey), dtype=np.int64) - gbase[gkey]
    gcoord, gperm = [], []
    for i in range(d):
        st_i, n_i = strides[i][gkey], ncoord[i][gkey]
        q = glocal // st_i
        r_i = q % n_i
        gcoord.append(r_i)
        gperm.append(((q // n_i) * st_i + (glocal - q * st_i)) * n_i + r_i)
    return _Grid(strides, gsize, gbase, gkey, gcoord, gperm)


@dataclass
class _Cells:
    """One copy of its key's grid per (key, value row), blocks in value-row order: each
    cell's value row and grid point, and the input accumulated there (in total, and of the
    new updates; a sum's weight in total and of the old updates)."""

    kv: np.ndarray
    gid: np.ndarray
    total: np.ndarray
    fresh: np.ndarray
    wtotal: np.ndarray | None
    wold: np.ndarray | None


def _accumulated_cells(ctx, sel, kid, kv, kv_key, value_rows: int, g: _Grid) -> _Cells:
    """The dense cells of the chunk, each holding the input accumulated at its grid point."""
    d = ctx.d
    diff, new = ctx.diff[sel], ctx.new[sel]
    cell_count = g.gsize[kv_key]
    cbase = exclusive_cumsum(cell_count)
    C = int(cell_count.sum())
    cell_kv = np.repeat(np.arange(value_rows, dtype=np.int64), cell_count)
    base = cbase[cell_kv]
    gid = np.arange(C, dtype=np.int64)
    gid -= base
    gid += g.gbase[kv_key][cell_kv]  # the cell's grid point

    at = cbase[kv]
    for i in range(d):
        at += ctx.ranks[i][sel] * g.strides[i][kid]
    total = np.zeros(C, np.int64)
    fresh = np.zeros(C, np.int64)
    np.add.at(total, at, diff)
    np.add.at(fresh, at, np.where(new, diff, 0))
    sums = [total, fresh]
    wtotal = wold = None
    if ctx.weight is not None:  # the total weight and the old updates' own (not total - new: floats)
        w = ctx.w[sel]
        wtotal, wold = np.zeros(C, w.dtype), np.zeros(C, w.dtype)
        np.add.at(wtotal, at, w)
        np.add.at(wold, at, np.where(new, 0, w))
        sums += [wtotal, wold]

    # accumulate: prefix sum along each coordinate within each block
    for i in range(d):
        first = g.gcoord[i][gid] == 0
        if i == d - 1:  # contiguous runs already
            idx = np.flatnonzero(first)
            lens = np.diff(np.append(idx, C))
            for a in sums:
                seg_cumsum_any_(a, idx, lens)
            continue
        # move coordinate i last: a permutation within the block, no sort needed
        pos = base + g.gperm[i][gid]
        start = np.empty(C, bool)
        start[pos] = first
        idx = np.flatnonzero(start)
        lens = np.diff(np.append(idx, C))
        for a in sums:
            tr = np.empty_like(a)
            tr[pos] = a
            seg_cumsum_any_(tr, idx, lens)
            a[:] = tr[pos]
        del pos, start, tr
    return _Cells(cell_kv, gid, total, fresh, wtotal, wold)


def _changed_points(ctx, g: _Grid, cells: _Cells, kv_rep) -> tuple[pa.Table, np.ndarray] | None:
    """The reducer's input at the grid points where the new updates change the accumulated
    input (``E = F_total - F_old``: group ``2p`` the total at point ``p``, ``2p + 1`` the
    old), and those points; None when there are none."""
    total, fresh = cells.total, cells.fresh
    touched, has_t, has_o = fresh != 0, total != 0, total != fresh
    if ctx.weight is not None:
        touched |= cells.wtotal != cells.wold
        has_t |= cells.wtotal != 0
        has_o |= cells.wold != 0
    changed = np.zeros(len(g.gkey), bool)
    changed[cells.gid[touched]] = True
    point_ids = np.flatnonzero(changed)
    compact = np.cumsum(changed) - 1
    in_pt = changed[cells.gid]
    cells_t = np.flatnonzero(in_pt & has_t)
    cells_o = np.flatnonzero(in_pt & has_o)
    group = np.concatenate([2 * compact[cells.gid[cells_t]], 2 * compact[cells.gid[cells_o]] + 1])
    if len(group) == 0:
        return None
    count = np.concatenate([total[cells_t], total[cells_o] - fresh[cells_o]])
    take = pa.array(kv_rep[cells.kv[np.concatenate([cells_t, cells_o])]])
    weights = {} if ctx.weight is None else \
        {ctx.weight: exact_sum.to_arrow(np.concatenate([cells.wtotal[cells_t], cells.wold[cells_o]]))}
    rin = pa.table(
        {
            GROUP: pa.array(group, pa.int64()),
            **{c: ctx.table.column(c).take(take) for c in ctx.values},
            COUNT: pa.array(count, pa.int64()),
            **weights,
        }
    )
    return rin, point_ids


def _output_changes(rout: pa.Table, outcols: list[str], point_ids: np.ndarray, g: _Grid, ncoord: list,
                    d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The output's changes from the reducer's output at the changed points: ``E``
    consolidated, then its finite differences (each ``E`` row shifted to its successors
    with a sign). Per change its grid point, its row of ``rout`` and its count."""
    og = np_int(rout.column(GROUP))
    e_cnt = np_int(rout.column(COUNT)) * np.where(og % 2 == 1, -1, 1)
    e_pt = point_ids[og // 2]
    # without output columns (distinct, threshold: one count per point) E and its finite
    # differences are summed per grid point in dense arrays, not sorted
    dense = not outcols
    ocode = np.zeros(len(og), np.int64) if dense else row_ids(rout, outcols)[0]
    if dense:
        e_pt, e_cnt = _dense_sum(e_pt, e_cnt, len(g.gkey))
        rep = np.zeros(len(e_pt), np.int64)
    else:
        rep, e_cnt = group_sum([e_pt, ocode], e_cnt)
        keep = e_cnt != 0
        rep, e_cnt = rep[keep], e_cnt[keep]
        e_pt = e_pt[rep]
    pkey = g.gkey[e_pt]
    z_pt, z_rep, z_cnt = [], [], []
    for S in range(1 << d):
        ok = np.ones(len(e_pt), bool)
        shift = np.zeros(len(e_pt), np.int64)
        for i in range(d):
            if S >> i & 1:
                ok &= g.gcoord[i][e_pt] < ncoord[i][pkey] - 1
                shift += g.strides[i][pkey]
        sign = -1 if bin(S).count("1") % 2 else 1
        z_pt.append((e_pt + shift)[ok])
        z_rep.append(rep[ok])
        z_cnt.append(sign * e_cnt[ok])
    z_pt, z_rep, z_cnt = (np.concatenate(a) for a in (z_pt, z_rep, z_cnt))
    if dense:
        z_pt, z_cnt = _dense_sum(z_pt, z_cnt, len(g.gkey))
        if not len(z_pt):
            return None
        return z_pt, np.zeros(len(z_pt), np.int64), z_cnt
    r2, z_cnt = group_sum([z_pt, ocode[z_rep]], z_cnt)
    keep = z_cnt != 0
    if not keep.any():
        return None
    r2, z_cnt = r2[keep], z_cnt[keep]
    return z_pt[r2], z_rep[r2], z_cnt


def _dense_sum(point: np.ndarray, count: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts summed per grid point (``0 .. points - 1``): the non-zero points and their sums."""
    acc = np.zeros(points, np.int64)
    np.add.at(acc, point, count)
    nz = np.flatnonzero(acc)
    return nz, acc[nz]
