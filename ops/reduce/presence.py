"""``distinct`` and ``threshold`` at ``d >= 2``: each row's multiplicity on its own grid, in one pass.

These reducers look at one value row at a time: the output multiplicity of a row at a
time is ``fn(count of the row accumulated at that time)``. For a row (a *unit*: key and
value columns) the accumulated count only changes on the row's grid (the product of the
distinct values each time coordinate takes among its updates), so its output changes are
the ``d``-dimensional finite differences of ``E = fn(total) - fn(old)`` over that grid
(``Z(total) - Z(old)``, as in ``ops/reduce/grid.py``). Here that is computed for every
unit at once in flat int64 arrays: each update dropped into its grid cell, prefix sums
along each coordinate (segmented cumulative sums, one coordinate at a time), ``E`` per
cell, its finite differences, and the non-zero cells are the output. No reducer call and
no per-unit tables: a loop round's distinct over tens of thousands of updates costs a few
milliseconds.

The dense cells are bounded by the updates: when the units' grids together hold more
than :data:`CELLS_PER_UPDATE` cells per update (rows whose times spread over both
coordinates), :func:`presence_delta` declines and the general kernels (slabs one
dimension lower, the chunked grid) take the table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ops.columnar import exclusive_cumsum, new_flags, np_int, ranks_within, row_ids, seg_cumsum_
from storage.lattice import time_columns

#: Grid cells per update above which the dense pass declines (it then costs more than
#: the slabs' copies of the rows); a loop round's units hold some 2-3.
CELLS_PER_UPDATE = 16


def presence_delta(table: pa.Table, units: list[str], d: int, fn, result_schema: pa.Schema,
                   max_cells: int) -> pa.Table | None:
    """Output updates (``units``, time columns, ``diff``; consolidated) of multiplicity
    ``fn(count)`` (presence when ``fn`` is None) per unit caused by the new updates
    (``_new``) of ``table``; None when the grids would hold too many cells (over
    ``CELLS_PER_UPDATE`` per update or over ``max_cells``)."""
    n = table.num_rows
    tcols = time_columns(d)
    uid, U = row_ids(table, units)
    diff = np_int(table.column("diff"))
    new = new_flags(table)
    fresh_diff = np.where(new, diff, 0)
    coords = [np_int(table.column(c)) for c in tcols]
    coords[0] = _advanced_to_first_new(coords[0], uid, U, new)

    # per coordinate: each unit's sorted distinct values, and each update's rank among them
    rank, size, start, values = zip(*[ranks_within(uid, U, x) for x in coords])

    # cells in mixed radix, last coordinate fastest: unit u's cells are base[u] .. base[u + 1]
    cells_of = np.ones(U, np.float64)  # (in floats: a product of d sizes may pass int64 before it is refused)
    for i in range(d):
        cells_of *= size[i]
    if cells_of.sum() > min(max(CELLS_PER_UPDATE * n, 1024), max_cells):
        return None
    cells_of = cells_of.astype(np.int64)
    cells = int(cells_of.sum())
    base = exclusive_cumsum(cells_of)
    cell = np.zeros(n, np.int64)
    for i in range(d):
        cell *= size[i][uid]
        cell += rank[i]
    cell += base[uid]
    total, fresh = _summed(cell, diff, cells), _summed(cell, fresh_diff, cells)
    unit, coord = _grid_coordinates(size)

    # accumulate along each coordinate: a segmented prefix sum over the cells laid out with
    # that coordinate last (the last one is already; the others are moved by a permutation)
    layouts = [_moved_last(i, unit, coord, size, base) for i in range(d - 1)] + [None]
    for i, layout in enumerate(layouts):
        starts = np.flatnonzero(coord[i] == 0) if layout is None else layout[1]
        lens = np.diff(np.append(starts, cells))
        for a in (total, fresh):
            if layout is None:
                seg_cumsum_(a, starts, lens)
            else:
                moved = np.empty_like(a)
                moved[layout[0]] = a
                seg_cumsum_(moved, starts, lens)
                a[:] = moved[layout[0]]

    e = _multiplicity(fn, total)
    e -= _multiplicity(fn, total - fresh)
    # finite differences along each coordinate: a cell minus its predecessor along it
    for i, layout in enumerate(layouts):
        moved = e if layout is None else _scattered(e, layout[0])
        first = coord[i] == 0 if layout is None else layout[2]
        before = np.empty_like(moved)
        before[0] = 0
        before[1:] = moved[:-1]
        before[first] = 0
        moved -= before
        if layout is not None:
            e = moved[layout[0]]
    out = np.flatnonzero(e)
    ou = unit[out]
    reps = np.empty(U, np.int64)
    reps[uid] = np.arange(n, dtype=np.int64)
    take = pa.array(reps[ou])
    cols = {c: table.column(c).take(take) for c in units}
    for i, c in enumerate(tcols):
        cols[c] = pa.array(values[i][start[i][ou] + coord[i][out]], pa.int64())
    cols["diff"] = pa.array(e[out], pa.int64())
    return pa.table(cols).select(result_schema.names).cast(result_schema)


def _advanced_to_first_new(x: np.ndarray, uid: np.ndarray, U: int, new: np.ndarray) -> np.ndarray:
    """The first time coordinate of each old update raised to the least of its unit's new
    updates (as a join's sweep does, ops/operators/join_sweep.py). No output can change
    at a time below that one (no new update is at or before it), and at every other time
    an old update counts exactly when it did: the output is the same, and a unit's long
    history before its first new time collapses to one coordinate value (a smaller grid)."""
    least = np.full(U, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(least, uid[new], x[new])
    least[least == np.iinfo(np.int64).max] = np.iinfo(np.int64).min  # a unit without new updates: as it is
    return np.where(new, x, np.maximum(x, least[uid]))


def _summed(cell: np.ndarray, diff: np.ndarray, cells: int) -> np.ndarray:
    """``diff`` summed per cell: by ``bincount`` (float64, exact while the counts stay
    below 2^53, as they always do in practice), else exactly in int64."""
    if len(diff) and float(np.abs(diff).max()) * len(diff) < 2.0 ** 53:
        return np.bincount(cell, weights=diff, minlength=cells).astype(np.int64)
    out = np.zeros(cells, np.int64)
    np.add.at(out, cell, diff)
    return out


def _grid_coordinates(size: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Every cell's unit and coordinates (ranks), in cell order: each coordinate expands
    the cells built so far by that coordinate's size, with repeats rather than divisions."""
    unit = np.arange(len(size[0]), dtype=np.int64)
    coord: list[np.ndarray] = []
    for n_i in size:
        reps = n_i[unit]
        inner = np.arange(int(reps.sum()), dtype=np.int64) - np.repeat(exclusive_cumsum(reps), reps)
        coord = [np.repeat(c, reps) for c in coord] + [inner]
        unit = np.repeat(unit, reps)
    return unit, coord


def _moved_last(i: int, unit: np.ndarray, coord: list[np.ndarray], size: list[np.ndarray],
                base: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells laid out with coordinate ``i`` last (each unit's cells stay its own): each
    cell's position there, where the runs along ``i`` start, and which positions start one."""
    order = [j for j in range(len(coord)) if j != i] + [i]
    pos = np.zeros(len(unit), np.int64)
    for j in order:
        pos *= size[j][unit]
        pos += coord[j]
    pos += base[unit]
    first = np.zeros(len(unit), bool)
    first[pos] = coord[i] == 0
    return pos, np.flatnonzero(first), first


def _scattered(a: np.ndarray, pos: np.ndarray) -> np.ndarray:
    out = np.empty_like(a)
    out[pos] = a
    return out


def _multiplicity(fn, count: np.ndarray) -> np.ndarray:
    """``fn(count)`` where the count is non-zero, 0 where the row is absent; presence
    (``count > 0``) when ``fn`` is None."""
    if fn is None:
        return (count > 0).astype(np.int64)
    m = np.zeros(len(count), np.int64)
    nz = np.flatnonzero(count)
    if len(nz):
        m[nz] = np.asarray(fn(count[nz])).astype(np.int64).reshape(-1)
    return m
