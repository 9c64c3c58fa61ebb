"""``reduce`` for one-dimensional times: sweeps whose cost follows the updates, not a grid.

With ``d = 1`` a key's accumulated input is a sequence of collections, one per distinct
time of the key. Rather than evaluating the reducer on the whole collection at every one
of those times (distinct value rows x times, the grid kernel's cost), each reducer family
is computed from the *changes* along the time axis:

* **per value row** (``Distinct``, ``Threshold``): a value row's output depends only on
  its own accumulated count, so one segmented prefix sum per (key, value row) gives it;
* **abelian** (``Count``, ``Sum``, ``CountDistinct``): per (key, time) totals of the
  changes, then a prefix sum per key;
* **order** (``Min``, ``Max``, ``TopK``): each value row is *present* with a constant
  multiplicity between two of its updates, an interval of the key's times. The first
  ``k`` present records at every time are a stabbing query over those intervals, answered
  for all times at once with a segment tree over time indices (one numpy pass per tree
  level), then differenced between consecutive times.

All of it is sorts, prefix sums and per-level numpy passes: O(updates · log) per key plus
the output changes, whatever the number of distinct rows or times.

Incrementality is the kernel's: the output of a run is ``Z(total) - Z(old)``. Both traces
agree before the key's first new time ``t0``, so every time is first advanced to ``t0``
(``max(t, t0)``, compaction to ``{t0}``): the two collections then start at ``t0`` and
only times from there on cost anything.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ops import exact_sum
from ops.dataflow import reducers as R
from ops.columnar import new_flags, np_int, seg_cumsum_, seg_cumsum_any_, sql_order
from storage.row_order import group_sum, lex_order

OLD = 1  # side of the old collection (0: the total collection)


class Sweep:
    """One chunk of keys, prepared once: both sides (total, old), times advanced to each
    key's first new time, updates consolidated per (side, key, value row, time)."""

    def __init__(self, table: pa.Table, kid: np.ndarray, kv: np.ndarray, kv_rep: np.ndarray,
                 kv_key: np.ndarray, K: int, values: list[str], advance: bool = True):
        self.table, self.K, self.kv_rep, self.kv_key, self.values = table, K, kv_rep, kv_key, values
        t = np_int(table.column("time"))
        diff = np_int(table.column("diff"))
        new = new_flags(table)
        if advance:  # (not when another task's rows of the same key may differ earlier)
            t0 = np.full(K, np.iinfo(np.int64).max, np.int64)
            np.minimum.at(t0, kid[new], t[new])
            t = np.maximum(t, t0[kid])
        old = ~new
        # side 0 holds every update, side 1 the old ones
        self.row = np.concatenate([np.arange(len(t)), np.flatnonzero(old)])
        side = np.concatenate([np.zeros(len(t), np.int64), np.ones(int(old.sum()), np.int64)])
        kv2, t2 = kv[self.row] * 2 + side, t[self.row]
        c2 = diff[self.row]
        rep, c = group_sum([kv2, t2], c2)  # sorted by (pair, time)
        keep = c != 0
        rep, c = rep[keep], c[keep]
        self.pair = kv2[rep]  # (key, value row) * 2 + side; updates sorted by (pair, time)
        self.t = t2[rep]
        self.c = c
        self.upd_row = self.row[rep]  # a table row of each consolidated update
        self.g = kv_key[self.pair // 2] * 2 + self.pair % 2  # (key, side) group
        # accumulated count of the pair after / before each update
        start = np.ones(len(c), bool)
        start[1:] = self.pair[1:] != self.pair[:-1]
        idx = np.flatnonzero(start)
        self.acc = c.copy()
        if len(c):
            seg_cumsum_(self.acc, idx, np.diff(np.append(idx, len(c))))
        self.prev = self.acc - c
        self.pair_start = start

    def value_of_pair(self, pair: np.ndarray) -> np.ndarray:
        """A table row holding the value row of each pair."""
        return self.kv_rep[pair // 2]


def _timeline(g: np.ndarray, t: np.ndarray, n_groups: int):
    """Distinct (group, time) points sorted, and the point of each (g, t)."""
    if len(g) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, np.zeros(n_groups + 1, np.int64)
    order = lex_order([g, t])
    gs, ts = g[order], t[order]
    first = np.ones(len(gs), bool)
    first[1:] = (gs[1:] != gs[:-1]) | (ts[1:] != ts[:-1])
    point = np.empty(len(g), np.int64)
    point[order] = np.cumsum(first) - 1
    pg, pt = gs[first], ts[first]
    bounds = np.searchsorted(pg, np.arange(n_groups + 1))
    return pg, pt, point, bounds


def abelian_partials(s: Sweep, reducer) -> tuple:
    """``Count``, ``Sum``, ``CountDistinct`` before accumulation: per (key, side) group and
    time, the change of the weight (the count or sum) and of the number of rows that make
    the key present. Partials of disjoint sets of value rows add up, so a hot key's rows
    may be split among tasks and their partials summed (``abelian_changes``)."""
    if isinstance(reducer, R.CountDistinct):
        live, live_prev = s.acc > 0, s.prev > 0
        weight = np.zeros(len(s.c), np.int64)
    else:
        live, live_prev = s.acc != 0, s.prev != 0
        if isinstance(reducer, R.Count):
            weight = s.c
        else:  # Sum: int64 for integer columns, exact Python ints otherwise (ops/exact_sum.py)
            out_t = reducer.out_type(s.table.select([reducer.col]).schema)
            weight = exact_sum.weights(s.table.column(reducer.col).take(pa.array(s.upd_row)), out_t, s.c)
    pg, pt, point, _ = _timeline(s.g, s.t, 2 * s.K)
    dw = np.zeros(len(pg), weight.dtype)
    np.add.at(dw, point, weight)
    dn = np.zeros(len(pg), np.int64)
    np.add.at(dn, point, live.astype(np.int64) - live_prev.astype(np.int64))
    return pg, pt, dw, dn


def insert_only_partials(table: pa.Table, kid: np.ndarray, K: int, reducer, advance: bool = True) -> tuple:
    """``abelian_partials`` of ``Count``/``Sum`` when every update is an insertion (all
    diffs > 0): no row's count can be negative, so a key is present exactly when its
    total multiplicity is positive, and value rows need not be told apart at all."""
    t = np_int(table.column("time"))
    diff = np_int(table.column("diff"))
    new = new_flags(table)
    if advance:
        t0 = np.full(K, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(t0, kid[new], t[new])
        t = np.maximum(t, t0[kid])
    weight = diff
    if isinstance(reducer, R.Sum):
        weight = exact_sum.weights(table.column(reducer.col), reducer.out_type(table.select([reducer.col]).schema),
                                   diff)
    old = np.flatnonzero(~new)
    g = np.concatenate([kid * 2, kid[old] * 2 + OLD])
    pg, pt, point, _ = _timeline(g, np.concatenate([t, t[old]]), 2 * K)
    dw = np.zeros(len(pg), weight.dtype)
    np.add.at(dw, point, np.concatenate([weight, weight[old]]))
    dn = np.zeros(len(pg), np.int64)
    np.add.at(dn, point, np.concatenate([diff, diff[old]]))
    return pg, pt, dw, dn


def abelian_changes(reducer, pg, pt, dw, dn) -> tuple:
    """Output changes (group ids, times, values, diffs; groups are key * 2 + side) from
    partials sorted by (group, time), one row per (group, time)."""
    n = len(pg)
    start = np.ones(n, bool)
    start[1:] = pg[1:] != pg[:-1]
    idx = np.flatnonzero(start)
    lens = np.diff(np.append(idx, n))
    w, nl = dw.copy(), dn.copy()
    if n:
        seg_cumsum_(nl, idx, lens)
        seg_cumsum_any_(w, idx, lens)
    w_prev = w - dw  # exact: int64, or Python ints for doubles and decimals
    n_prev = nl - dn
    if isinstance(reducer, R.CountDistinct):
        w, w_prev = nl, n_prev
    now, before = nl > 0, n_prev > 0
    out_g = np.concatenate([pg[before], pg[now]])
    out_t = np.concatenate([pt[before], pt[now]])
    out_v = np.concatenate([w_prev[before], w[now]])
    out_d = np.concatenate([-np.ones(int(before.sum()), np.int64), np.ones(int(now.sum()), np.int64)])
    return out_g, out_t, out_v, signed(out_g, out_d)


def signed(pair_or_group: np.ndarray, diff: np.ndarray) -> np.ndarray:
    """Side-specific changes as changes of ``Z(total) - Z(old)``: the old side negated."""
    return diff * np.where(pair_or_group % 2 == OLD, -1, 1)


def per_row(s: Sweep, fn) -> tuple:
    """``Distinct``/``Threshold``: (pairs, times, side-specific diffs) of value rows with
    multiplicity ``fn(count)`` (0 for an absent row)."""
    acc_m = np.where(s.acc != 0, np.asarray(fn(s.acc)).astype(np.int64).reshape(-1), 0) if len(s.acc) else s.acc
    prev_m = np.zeros(len(s.prev), np.int64)
    nz = s.prev != 0
    if nz.any():
        prev_m[nz] = np.asarray(fn(s.prev[nz])).astype(np.int64).reshape(-1)
    d = acc_m - prev_m
    keep = d != 0
    return s.pair[keep], s.t[keep], d[keep]


# ------------------------------------------------------------------ order reducers


def _ranks(s: Sweep, reducer) -> np.ndarray:
    """Rank of every value row (by kv id) in the reducer's order within its key."""
    P = len(s.kv_rep)
    reps = s.table.take(pa.array(s.kv_rep))
    cols = {"_key": pa.array(s.kv_key, pa.int64())}
    keys = [("_key", "ascending")]
    if isinstance(reducer, R.TopK):
        rest = [c for c in s.values if c not in reducer.order_by]
        for i, (c, direction) in enumerate(zip(reducer.order_by, reducer.directions)):
            cols[f"_o{i}"] = reps.column(c)
            keys.append((f"_o{i}", direction))
        for i, c in enumerate(rest):
            cols[f"_r{i}"] = reps.column(c)
            keys.append((f"_r{i}", "ascending"))
    else:
        cols["_o0"] = reps.column(reducer.col)
        keys.append(("_o0", reducer._order))
    order = sql_order(pa.table(cols), keys)  # nulls last, NaN the greatest number
    rank = np.empty(P, np.int64)
    rank[order] = np.arange(P)
    return rank


def _ever_first_k(g, t, pair, c, pair_start, rank_of_kv, k: int, n_groups: int) -> np.ndarray:
    """With insertions only (every consolidated change ``c > 0``), the updates of the value
    rows that are among the first ``k`` records of their group at some time.

    Nothing ever leaves, so a value row that is not among the first ``k`` when it first
    appears never will be, and the first ``k`` at every time are those of the rows kept.
    Per time point, the ``k`` best ranks (with multiplicity) of the group's records up
    to then: the best ``k`` inserted at each point, then a running merge along the
    group's points by doubling (log2(points) vectorised steps of ``points x 2k``)."""
    pg, _pt, point, _ = _timeline(g, t, n_groups)
    M = len(pg)
    r = rank_of_kv[pair // 2]
    m = np.minimum(c, k)
    er, ep = np.repeat(r, m), np.repeat(point, m)
    o = np.lexsort((er, ep))
    er, ep = er[o], ep[o]
    first = np.ones(len(ep), bool)
    first[1:] = ep[1:] != ep[:-1]
    starts = np.flatnonzero(first)
    pos = np.arange(len(ep)) - np.repeat(starts, np.diff(np.append(starts, len(ep))))
    inside = pos < k
    BIG = np.iinfo(np.int64).max
    best = np.full((M, k), BIG, np.int64)
    best[ep[inside], pos[inside]] = er[inside]
    step = 1
    while step < M:
        i = np.arange(step, M)
        i = i[pg[i] == pg[i - step]]
        if not len(i):  # groups are contiguous: no longer span either
            break
        best[i] = np.sort(np.concatenate([best[i], best[i - step]], axis=1), axis=1)[:, :k]
        step *= 2
    kth = best[:, k - 1]
    starts = np.flatnonzero(pair_start)
    among = r[starts] <= kth[point[starts]]  # at the row's first point (its own copies count)
    return np.repeat(among, np.diff(np.append(starts, len(pair))))


def top_k(s: Sweep, reducer, k: int) -> tuple:
    """The first ``k`` present records at every time: (pairs, times, side-specific diffs)."""
    if k <= 0 or len(s.c) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    rank_of_kv = _ranks(s, reducer)
    g, t, acc, pair, pair_start = s.g, s.t, s.acc, s.pair, s.pair_start
    if (s.c > 0).all():  # insertions only: drop the value rows that never reach the first k
        keep = _ever_first_k(g, t, pair, s.c, pair_start, rank_of_kv, k, 2 * s.K)
        if not keep.all():
            g, t, acc, pair, pair_start = g[keep], t[keep], acc[keep], pair[keep], pair_start[keep]
    pg, pt, point, bounds = _timeline(g, t, 2 * s.K)
    M = len(pg)
    group_end = bounds[g + 1]  # one past the group's last point
    # each update opens an interval of constant count, up to the pair's next update
    nxt = np.empty(len(g), np.int64)
    nxt[:-1] = point[1:]
    last = np.r_[pair_start[1:], True]  # the pair's last update: open to the group's end
    nxt[last] = group_end[last]
    live = acc > 0
    a, b = point[live], nxt[live]
    mult = np.minimum(acc[live], k)
    rank = rank_of_kv[pair[live] // 2]
    pair = pair[live]

    size = 1
    while size < M:
        size *= 2
    # canonical segment-tree nodes of every interval [a, b)
    nodes, items = [], []
    lo, hi, item = a + size, b + size, np.arange(len(a))
    while len(lo):
        act = lo < hi
        lo, hi, item = lo[act], hi[act], item[act]
        m = (lo & 1) == 1
        nodes.append(lo[m]); items.append(item[m])
        lo = lo + m
        m = (hi & 1) == 1
        hi = hi - m
        nodes.append(hi[m]); items.append(item[m])
        lo, hi = lo >> 1, hi >> 1
    node = np.concatenate(nodes) if nodes else np.zeros(0, np.int64)
    item = np.concatenate(items) if items else np.zeros(0, np.int64)

    # per node: its k smallest ranks, one pass of np.minimum.at each (ranks are unique
    # within a key, a node lies within one key's times, and k distinct records cover the
    # first k by multiplicity); no sort of the (node, interval) pairs
    BIG = np.iinfo(np.int64).max
    top_r = np.full((2 * size, k), BIG, np.int64)
    top_m = np.zeros((2 * size, k), np.int64)
    top_p = np.full((2 * size, k), -1, np.int64)
    node_rank = rank[item]
    for j in range(k):
        if not len(node):
            break
        best = np.full(2 * size, BIG, np.int64)
        np.minimum.at(best, node, node_rank)
        win = node_rank == best[node]
        top_r[node[win], j] = node_rank[win]
        top_m[node[win], j] = mult[item[win]]
        top_p[node[win], j] = pair[item[win]]
        node, item, node_rank = node[~win], item[~win], node_rank[~win]
    # push down: a node's list merged with its parent's (which holds all its ancestors')
    level = 2
    if k == 1:  # min and max: the better of node and parent, no sort (ties: the parent's, as below)
        r1, m1, p1 = top_r[:, 0], top_m[:, 0], top_p[:, 0]  # contiguous views
        while level < 2 * size:
            here = slice(level, 2 * level)
            pr = np.repeat(r1[level // 2:level], 2)
            up = pr <= r1[here]
            r1[here] = np.where(up, pr, r1[here])
            m1[here] = np.where(up, np.repeat(m1[level // 2:level], 2), m1[here])
            p1[here] = np.where(up, np.repeat(p1[level // 2:level], 2), p1[here])
            level *= 2
    while level < 2 * size:
        n = np.arange(level, 2 * level)
        par = n >> 1
        cr = np.concatenate([top_r[par], top_r[n]], axis=1)
        cm = np.concatenate([top_m[par], top_m[n]], axis=1)
        cp = np.concatenate([top_p[par], top_p[n]], axis=1)
        o = np.argsort(cr, axis=1, kind="stable")
        cr, cm, cp = (np.take_along_axis(x, o, axis=1) for x in (cr, cm, cp))
        before = np.cumsum(cm, axis=1) - cm
        cm = np.minimum(cm, np.maximum(k - before, 0))
        # keep the first k columns (entries past k records have multiplicity 0)
        top_r[n], top_m[n], top_p[n] = cr[:, :k], cm[:, :k], cp[:, :k]
        level *= 2
    leaf_m = top_m[size:size + M]
    leaf_p = top_p[size:size + M]
    if k == 1:  # one record (multiplicity 1) or none per point: changes where it differs from the point before
        lm, lp = leaf_m[:, 0], leaf_p[:, 0]
        before = np.r_[False, pg[1:] == pg[:-1]]  # the point before is of the same group
        pm = np.where(before, np.r_[0, lm[:-1]], 0)
        pp = np.r_[-1, lp[:-1]]
        kept = (lm > 0) & (pm > 0) & (lp == pp)
        add, drop = np.flatnonzero((lm > 0) & ~kept), np.flatnonzero((pm > 0) & ~kept)
        return (np.concatenate([lp[add], pp[drop]]), pt[np.concatenate([add, drop])],
                np.concatenate([lm[add], -pm[drop]]))
    # records at each point minus records at the point before (same group)
    pts = np.repeat(np.arange(M), k)
    lm, lp = leaf_m.reshape(-1), leaf_p.reshape(-1)
    has = lm > 0
    prev_ok = np.r_[False, pg[1:] == pg[:-1]]
    nxt_pts = pts + 1
    nxt_ok = np.zeros(len(pts), bool)
    inb = nxt_pts < M
    nxt_ok[inb] = prev_ok[nxt_pts[inb]]
    sel2 = has & nxt_ok
    out_pt = np.concatenate([pts[has], nxt_pts[sel2]])
    out_p = np.concatenate([lp[has], lp[sel2]])
    out_d = np.concatenate([lm[has], -lm[sel2]])
    rep, out_d = group_sum([out_pt, out_p], out_d)
    keep = out_d != 0
    rep, out_d = rep[keep], out_d[keep]
    out_pt, out_p = out_pt[rep], out_p[rep]
    return out_p, pt[out_pt], out_d
