"""Keys with few distinct last time coordinates: reduced one dimension lower, slab by slab.

Inside a loop, a round's reduce input is nearly *flat* in the iteration coordinate: the
round's new updates sit at the current iteration and everything earlier is advanced to it;
only state from earlier runs can sit at a few later iterations. The dense grid kernel pays
for ``outer times x iterations`` cells per key and a high constant per row; this module
turns such keys into ``d - 1`` dimensional problems that the sweeps solve.

Why it is exact. Let a key's distinct last coordinates be ``c_1 < … < c_m``. At a time
``(s, i)`` with ``c_j <= i < c_(j+1)`` the accumulated input is that of the rows with last
coordinate ``<= c_j`` (*slab* ``j``) at ``s``, and it is empty for ``i < c_1``. So the
output restricted to iteration ``c_j`` accumulates to ``F_j - F_(j-1)``, where ``F_j`` is
the reducer over slab ``j``: its updates are ``Y_j - Y_(j-1)``, with ``Y_j`` the
``d - 1`` dimensional output updates of slab ``j`` (``Z(total) - Z(old)`` as everywhere).
A flat key (``m = 1``) is one slab and needs no subtraction.

A key with more than :data:`MAX_SLABS` distinct last coordinates stays with the grid (its
rows would be copied into too many slabs). The slab's last coordinate and the next one are
carried as extra key columns while reduced: constant per (key, slab), they change no
grouping and give every output row its place back without a Python loop.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ops.reduce_util import exclusive_cumsum, group_sum, lex_order, np_int, row_ids
from storage.lattice import time_columns

MAX_SLABS = 1  # distinct last coordinates a key may have and still be reduced by slabs (see below)
NONE = np.iinfo(np.int64).max  # "no next slab"


def slab_key(d: int) -> tuple[str, str]:
    """Key columns holding a slab's last coordinate and the next slab's, at level ``d``
    (one pair per level: a key of ``d = 3`` is cut again at ``d = 2``)."""
    return f"__slab_time_{d - 1}", f"__slab_next_{d - 1}"


def split(table: pa.Table, key: list[str], d: int) -> tuple[pa.Table | None, pa.Table | None]:
    """(the rows of keys with at most :data:`MAX_SLABS` distinct last coordinates, copied
    into their slabs and lowered to ``d - 1`` time columns; the rows of the other keys)."""
    tcols = time_columns(d)
    last = np_int(table.column(tcols[-1]))
    kid, _ = row_ids(table, key, ordered=False)
    order = lex_order([kid, last])
    ks, ls = kid[order], last[order]
    first = np.ones(len(order), bool)
    first[1:] = (ks[1:] != ks[:-1]) | (ls[1:] != ls[:-1])
    pair_key, pair_last = ks[first], ls[first]  # distinct (key, last), sorted
    key_start = np.flatnonzero(np.r_[True, pair_key[1:] != pair_key[:-1]])
    m = np.diff(np.r_[key_start, len(pair_key)])  # slabs per key (by position among keys present)
    slot = np.empty(int(kid.max()) + 1 if len(kid) else 0, np.int64)
    slot[pair_key[key_start]] = np.arange(len(key_start))
    k_slot = slot[kid]
    keep = m[k_slot] <= MAX_SLABS
    if not keep.any():
        return None, table
    rest = None if keep.all() else table.filter(pa.array(~keep))

    # each row's slab index a (rank of its last coordinate in its key), copied to slabs a..m-1
    pair_of_row = np.empty(len(order), np.int64)
    pair_of_row[order] = np.cumsum(first) - 1
    a = pair_of_row - key_start[k_slot]
    rows = np.flatnonzero(keep)
    reps = m[k_slot[rows]] - a[rows]
    src = np.repeat(rows, reps)
    j = a[src] + (np.arange(len(src)) - np.repeat(exclusive_cumsum(reps), reps))
    base = key_start[k_slot[src]]
    here = pair_last[base + j]
    has_next = j + 1 < m[k_slot[src]]
    nxt = np.where(has_next, pair_last[np.minimum(base + j + 1, len(pair_last) - 1)], NONE)

    slabs = table.take(pa.array(src)).drop_columns([tcols[-1]])
    at, nx = slab_key(d)
    slabs = slabs.append_column(at, pa.array(here, pa.int64())).append_column(nx, pa.array(nxt, pa.int64()))
    low = time_columns(d - 1)
    return slabs.rename_columns([low[tcols.index(c)] if c in tcols else c for c in slabs.column_names]), rest


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
