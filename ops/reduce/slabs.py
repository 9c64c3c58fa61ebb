"""``d >= 2``: a key's slabs of equal last time coordinate, reduced one dimension lower.

Why it is exact. Let a key's distinct last coordinates be ``c_1 < … < c_m``. At a time
``(s, i)`` with ``c_j <= i < c_(j+1)`` the accumulated input is that of the rows with last
coordinate ``<= c_j`` (*slab* ``j``) at ``s``, and it is empty for ``i < c_1``. So the
output restricted to iteration ``c_j`` accumulates to ``F_j - F_(j-1)``, where ``F_j`` is
the reducer over slab ``j``: its updates are ``Y_j - Y_(j-1)``, with ``Y_j`` the
``d - 1`` dimensional output updates of slab ``j`` (``Z(total) - Z(old)`` as everywhere).

Only the slabs at or beyond the key's first new update are computed: below it no new
update is ``<=`` any time, so ``Y_j = 0``. These are the last coordinates at which the
output can change (the interesting last coordinates); within a slab the ``d - 1``
dimensional kernel (the sweeps at ``d = 2``) visits only the times where it changes. A
key thus costs the rows copied into its computed slabs (``sum_j |slab j|``, times a log),
never the grid's ``value rows x grid points``.

Which keys take the slabs. A key with one slab to compute (most keys of a loop round:
its updates sit at the current iteration, or earlier ones hold only old rows) always
does: one copy of its rows, one dimension lower. A key with more slabs takes them when
the rows they copy cost less than the grid kernel's cells for it (``grid_cells``, the
kernel's estimate; :data:`SLAB_ROW_COST` cells per copied row, measured); otherwise it
stays with the grid. Copies are made in chunks of about ``budget`` rows, so a hot key's
slabs never sit in memory all at once (a single slab larger than that goes alone: it is
no larger than the key's own rows). The slab's last coordinate and the next one are
carried as extra key columns while reduced: constant per (key, slab), they change no
grouping and give every output row its place back without a Python loop.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from ops.columnar import exclusive_cumsum, new_flags, np_int, row_ids
from storage.lattice import time_columns
from storage.row_order import group_sum, lex_order

#: Slabs to compute a key may have and still take them whatever the grid would cost.
MAX_SLABS = 1
#: Grid cells one row copied into a slab costs as much as: a key with more slabs takes
#: them while ``copied * this <= cells``. Measured on random d = 2 keys (5 to 2,000 value
#: rows, 5 to 200 distinct coordinates): 1.3-2.5 for min/top_k, 1.1-1.7 for distinct,
#: 0.5 for count.
SLAB_ROW_COST = 2
#: Rows copied into slabs at once.
COPY_BUDGET = 1 << 20
NONE = np.iinfo(np.int64).max  # "no next slab"


def slab_key(d: int) -> tuple[str, str]:
    """Key columns holding a slab's last coordinate and the next slab's, at level ``d``
    (one pair per level: a key of ``d = 3`` is cut again at ``d = 2``)."""
    return f"__slab_time_{d - 1}", f"__slab_next_{d - 1}"


def split(table: pa.Table, key: list[str], d: int,
          grid_cells: Callable[[pa.Table, np.ndarray, int], np.ndarray] | None = None,
          budget: int = COPY_BUDGET) -> tuple[Iterator[pa.Table] | None, pa.Table | None]:
    """(chunks of slab rows, lowered to ``d - 1`` time columns with the slab columns
    appended, for the keys that take the slabs; the rows of the other keys).
    ``grid_cells(table, kid, K)``: the grid kernel's cells per key id ``kid`` (keys with
    several slabs to compute stay with the grid when it is not given)."""
    n = table.num_rows
    last = np_int(table.column(time_columns(d)[-1]))
    kid, K = row_ids(table, key, ordered=False)
    order = lex_order([kid, last])
    ks, ls = kid[order], last[order]
    first = np.ones(n, bool)
    first[1:] = (ks[1:] != ks[:-1]) | (ls[1:] != ls[:-1])
    pair_of = np.cumsum(first) - 1  # per sorted row: its (key, last coordinate) pair
    pair_key, pair_last = ks[first], ls[first]
    P = len(pair_key)
    kstart = np.flatnonzero(np.r_[True, pair_key[1:] != pair_key[:-1]])  # first pair of each key
    m = np.diff(np.r_[kstart, P])
    key_of_pair = np.repeat(np.arange(len(kstart)), m)
    # rows of the key in its slab j: those of its pairs <= j, a prefix of its sorted rows
    row_end = np.cumsum(np.bincount(pair_of, minlength=P))
    row_begin = np.r_[0, row_end][kstart][key_of_pair]
    prefix = row_end - row_begin
    # the first slab holding a new row: nothing below it can change
    holds_new = np.zeros(P, bool)
    holds_new[pair_of[new_flags(table)[order]]] = True
    j0 = np.minimum.reduceat(np.where(holds_new, np.arange(P), P), kstart)
    computed = np.arange(P) >= j0[key_of_pair]
    slabs = np.bincount(key_of_pair[computed], minlength=len(kstart))
    copied = np.bincount(key_of_pair[computed], weights=prefix[computed], minlength=len(kstart))

    take = slabs <= MAX_SLABS
    if grid_cells is not None and not take.all():
        undecided = np.zeros(K, bool)
        undecided[pair_key[kstart[~take]]] = True
        rows = np.flatnonzero(undecided[kid])
        cells = np.asarray(grid_cells(table.take(pa.array(rows)), kid[rows], K), np.float64)[pair_key[kstart]]
        take |= copied * SLAB_ROW_COST <= cells
    slab_kid = np.zeros(K, bool)
    slab_kid[pair_key[kstart[take]]] = True
    row_slab = slab_kid[kid]
    if not row_slab.any():
        return None, table
    rest = None if row_slab.all() else table.filter(pa.array(~row_slab))

    pairs = np.flatnonzero(computed & take[key_of_pair])
    has_next = np.r_[key_of_pair[1:] == key_of_pair[:-1], False]
    nxt = np.where(has_next, np.r_[pair_last[1:], NONE], NONE)
    return _chunks(table, d, order, pairs, row_begin, prefix, pair_last, nxt, budget), rest


def _chunks(table, d, order, pairs, row_begin, prefix, pair_last, nxt, budget) -> Iterator[pa.Table]:
    """The slab copies of ``pairs`` in chunks of about ``budget`` rows."""
    tcols, low = time_columns(d), time_columns(d - 1)
    at, nx = slab_key(d)
    lens = prefix[pairs]
    chunk = exclusive_cumsum(lens) // max(int(budget), 1)
    bounds = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1], True])
    for b0, b1 in zip(bounds[:-1], bounds[1:]):
        p, ln = pairs[b0:b1], lens[b0:b1]
        pos = np.repeat(row_begin[p] - exclusive_cumsum(ln), ln) + np.arange(int(ln.sum()))
        part = table.take(pa.array(order[pos])).drop_columns([tcols[-1]])
        part = part.append_column(at, pa.array(np.repeat(pair_last[p], ln), pa.int64()))
        part = part.append_column(nx, pa.array(np.repeat(nxt[p], ln), pa.int64()))
        yield part.rename_columns([low[tcols.index(c)] if c in tcols else c for c in part.column_names])


def lift(out: pa.Table, key: list[str], d: int, result_schema: pa.Schema) -> pa.Table:
    """Slab outputs ``Y_j`` (``d - 1`` time columns) as ``d`` dimensional updates: ``Y_j``
    at ``c_j`` and ``-Y_j`` at ``c_(j+1)``, consolidated."""
    tcols, low = time_columns(d), time_columns(d - 1)
    at, nx = slab_key(d)
    nxt = np_int(out.column(nx))
    named = out.rename_columns([tcols[low.index(c)] if c in low else c for c in out.column_names])
    pos = named.drop_columns([nx]).rename_columns([tcols[-1] if c == at else c for c in named.column_names if c != nx])
    pos = pos.select(result_schema.names).cast(result_schema)
    moved = np.flatnonzero(nxt != NONE)
    if not len(moved):
        return pos
    neg = named.take(pa.array(moved))
    neg = neg.set_column(neg.schema.get_field_index(at), at, pa.array(nxt[moved], pa.int64()))
    neg = neg.set_column(neg.schema.get_field_index("diff"), "diff", pa.array(-np_int(neg.column("diff"))))
    neg = neg.drop_columns([nx]).rename_columns([tcols[-1] if c == at else c for c in neg.column_names if c != nx])
    both = pa.concat_tables([pos, neg.select(result_schema.names).cast(result_schema)])
    ids, _ = row_ids(both, [c for c in result_schema.names if c != "diff"], ordered=False)
    rep, total = group_sum([ids], np_int(both.column("diff")))
    nz = total != 0
    both = both.take(pa.array(rep[nz]))
    return both.set_column(both.schema.get_field_index("diff"), "diff", pa.array(total[nz], pa.int64()))
