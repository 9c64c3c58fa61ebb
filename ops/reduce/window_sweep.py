"""``window`` for one-dimensional times: a change recomputes the rows of its partition it
affects, not the partition (docs/architecture.md: reduce).

A key's (partition's) distinct value rows are sorted once in the window's order, its
*universe*; the input at any time is a multiplicity per universe position. The times at
which the key changes are its *steps*, in order. A step that changes positions ``p``
moves the values of the rows ``p - fwd .. p + back`` only (``Window.reach``: ``lead``,
``lag``, ROWS n PRECEDING / m FOLLOWING), the rows whose order value lies within a
RANGE frame's offsets of ``p``'s (``Reach.values``), or, with ranks and frames from the partition's
first row, every row from ``p`` (from the first of its peers) on, and with frames to the
partition's last row every row up to ``p`` (to the last of its peers); what the rows after
a segment contribute to the latter is ``Offsets.after``. So per step the kernel takes the
*segments* of positions those rows and their own inputs cover (a position is reached by
counting the rows of positions no step of the run touches, which hold the same rows
before and after every step), evaluates the window functions over each segment as it is
before and after the step (``Window.columns``), with what the partition's rows before
the segment contribute (``Offsets``: the key's totals after the step, which change by the
step's changes only, minus the segment's own), and emits the new rows minus the old,
consolidated: rows whose values did not move cancel. A row inside a segment but outside
every change's reach sees the same rows before and after the step (and the same
garbage, if its own inputs leave the segment), so it cancels too.

Exactness at every time: the output of a run is ``Z(total) - Z(old)`` (ops/reduce/kernel.py),
both from the input accumulated before the key's first new time (the *base*), swept over
the later times of all updates, and of the old ones (none in a run whose new times all
follow the stored ones, the usual case).

Cost: a sort of the touched partitions' distinct rows and prefix sums over them, then the
segments' rows: O(reach) rows for a change of ``lag``/``lead``/ROWS frames, the rows from
the change to the partition's end for ranks and running totals (one row at the tail: one
row). Segments go in chunks of about ``max_cells`` positions; one over ``limit_cells`` is
refused with :class:`~ops.errors.KeyTooLarge`. Times of more coordinates take the grid
(ops/reduce/grid.py), which recomputes the whole partition at each time it changes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops import exact_sum
from ops.columnar import GROUP, new_flags, np_int, row_ids, seg_cumsum_any_, sql_order
from ops.dataflow.window_reducer import Offsets, Window, unbounded, value_positions
from ops.errors import KeyTooLarge
from storage.row_order import group_sum, lex_order


def window_delta(table: pa.Table, key: list[str], values: list[str], reducer: Window, out_schema: pa.Schema,
                 result_schema: pa.Schema, max_cells: int, limit_cells: int | None) -> pa.Table | None:
    """The output changes of ``reducer`` for the keys of ``table`` (old and new updates,
    ``_new``, one time column), consolidated; None when nothing changes."""
    kid, K = row_ids(table, key, ordered=False)
    time, diff, new = np_int(table.column("time")), np_int(table.column("diff")), new_flags(table)
    first_new = np.full(K, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_new, kid[new], time[new])
    base = time < first_new[kid]  # all old: accumulated, the state both sides start from
    uni = _Universe(table, kid, K, values, reducer)
    bm = np.zeros(uni.size, np.int64)
    np.add.at(bm, uni.row_pos[base], diff[base])
    parts = []
    for rows, sign in ((~base, 1), (~base & ~new, -1)):
        if rows.any():
            sweep = _Sweep(uni, bm, uni.row_pos[rows], time[rows], diff[rows], reducer, out_schema)
            for u, t, cols, d in sweep.changes(key, max_cells, limit_cells):
                parts.append((u, t, cols, sign * d))
    if not parts:
        return None
    u, t, d = (np.concatenate([p[i] for p in parts]) for i in (0, 1, 3))
    cols = pa.concat_tables([pa.table(p[2]) for p in parts])
    code = row_ids(cols, cols.column_names, ordered=False)[0]
    rep, d = group_sum([u, t, code], d)
    keep = d != 0
    if not keep.any():
        return None
    rep, d = rep[keep], d[keep]
    u, taker = u[rep], pa.array(rep)
    out = {c: table.column(c).take(pa.array(uni.key_rep[uni.key[u]])) for c in key}
    out.update({c: uni.rows.column(c).take(pa.array(u)) for c in values})
    out.update({c: cols.column(c).take(taker) for c in cols.column_names})
    out["time"], out["diff"] = pa.array(t[rep], pa.int64()), pa.array(d, pa.int64())
    return pa.table({f.name: out[f.name].cast(f.type) for f in result_schema}, schema=result_schema)


class _Universe:
    """The distinct value rows of each key, sorted by key then the window's order: per
    position its key, the first and last position of its key and of its peer group (the
    rows equal in the window's order), and a peer group id; per input row its position."""

    def __init__(self, table: pa.Table, kid: np.ndarray, K: int, values: list[str], reducer: Window):
        uid, P = row_ids(table, values, base=kid, ordered=False)
        rep = np.empty(P, np.int64)
        rep[uid] = np.arange(table.num_rows, dtype=np.int64)
        taker = pa.array(rep)
        rows = pa.table({GROUP: pa.array(kid[rep], pa.int64()), **{c: table.column(c).take(taker) for c in values}})
        keys = [(GROUP, "ascending"), *zip(reducer.order_by, reducer.directions),
                *[(c, "ascending") for c in reducer.rest(values)]]
        order = sql_order(rows, keys)
        self.rows = rows.take(pa.array(order))
        self.values, self.size = values, P
        pos = np.empty(P, np.int64)
        pos[order] = np.arange(P, dtype=np.int64)
        self.row_pos = pos[uid]
        self.key = kid[rep][order]
        self.key_rep = np.empty(K, np.int64)
        self.key_rep[kid] = np.arange(table.num_rows, dtype=np.int64)
        self.keys = table  # its key columns, at ``key_rep``
        index = np.arange(P, dtype=np.int64)
        self.key_first, self.key_last = _runs(index, np.r_[True, self.key[1:] != self.key[:-1]])
        peer = row_ids(self.rows, [GROUP, *reducer.order_by], ordered=False)[0]
        starts = np.r_[True, peer[1:] != peer[:-1]]
        self.peer_first, self.peer_last = _runs(index, starts)
        self.peer_id = np.cumsum(starts) - 1


def _runs(index: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each position's run's first and last position, the runs beginning where ``starts``."""
    n = len(index)
    first = np.maximum.accumulate(np.where(starts, index, 0))
    ends = np.r_[starts[1:], True]
    last = np.minimum.accumulate(np.where(ends, index, n)[::-1])[::-1]
    return first, last


class _Sweep:
    """One stream of changes (universe positions ``u``, times ``t``, diffs ``d``) over the
    base multiplicities ``bm``: its steps, each position's multiplicity after each of its
    changes, and the key's totals after each step."""

    def __init__(self, uni: _Universe, bm: np.ndarray, u, t, d, reducer: Window, out_schema: pa.Schema):
        self.uni, self.bm, self.reducer, self.out_schema = uni, bm, reducer, out_schema
        k = uni.key[u]
        o = lex_order([k, t])
        ks, ts = k[o], t[o]
        first = np.r_[True, (ks[1:] != ks[:-1]) | (ts[1:] != ts[:-1])]
        step = np.empty(len(u), np.int64)
        step[o] = np.cumsum(first) - 1
        self.step_key, self.step_time = ks[first], ts[first]
        self.steps = S = len(self.step_key)
        rep, delta = group_sum([u, step], d)  # sorted by position, then step
        keep = delta != 0
        self.pu, self.ps, self.pd = u[rep[keep]], step[rep[keep]], delta[keep]
        runs = np.flatnonzero(np.r_[True, self.pu[1:] != self.pu[:-1]]) if len(self.pu) else np.zeros(0, np.int64)
        cum = self.pd.copy()
        if len(cum):
            seg_cumsum_any_(cum, runs, np.diff(np.append(runs, len(cum))))
        self.after = bm[self.pu] + cum
        self.code = self.pu * S + self.ps  # ascending
        self.gain = np.maximum(self.after, 0) - np.maximum(self.after - self.pd, 0)  # expanded rows added

    def multiplicity(self, u: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Rows of position ``u`` after step ``step`` (a step before the key's first: the base)."""
        i = np.searchsorted(self.code, u * self.steps + step, side="right") - 1
        j = np.maximum(i, 0)
        hit = (i >= 0) & (self.pu[j] == u) if len(self.pu) else np.zeros(len(u), bool)
        return np.maximum(np.where(hit, self.after[j] if len(self.pu) else 0, self.bm[u]), 0)

    def segments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per step, the positions whose rows a change of the step moves and those rows'
        inputs, as merged intervals: (step, first position, last position)."""
        uni, reach = self.uni, self.reducer.reach()
        pu, ps = self.pu, self.ps
        # the rows moved: from lead's reach before the change, or the first of its peers, to
        # lag's and ROWS frames' reach after it (to the end with prefix functions), and those
        # whose RANGE frame by value holds the change's value; their inputs: lag's and ROWS
        # frames' reach before those, lead's after, and their RANGE frames by value
        untouched = np.maximum(self.bm, 0)
        untouched[pu] = 0
        cp = np.zeros(uni.size + 1, np.int64)
        np.cumsum(untouched, out=cp[1:])
        kf, kl = uni.key_first[pu], uni.key_last[pu]

        def back(p, rows):  # the last position with ``rows`` untouched rows between it and p
            return np.minimum(np.searchsorted(cp, cp[p] - rows, side="right") - 1, p)

        def ahead(p, rows):  # the first position with ``rows`` untouched rows between p and it
            return np.maximum(np.searchsorted(cp, cp[p + 1] + rows, side="left") - 1, p)

        first = uni.peer_first[pu] if reach.peers else pu
        last = uni.peer_last[pu] if reach.peers else pu
        moved_a = np.maximum(back(first, reach.fwd), kf)
        moved_b = np.minimum(ahead(last, reach.back), kl)
        for preceding, following in reach.values:  # a row at k sees [k - preceding, k + following]
            moved_a = self._by_value(pu, following, "lo", moved_a)
            moved_b = self._by_value(pu, preceding, "hi", moved_b)
        a, b = back(moved_a, reach.back), ahead(moved_b, reach.fwd)
        for preceding, following in reach.values:
            a = self._by_value(moved_a, preceding, "lo", a)
            b = self._by_value(moved_b, following, "hi", b)
        a = uni.key_first[pu] if reach.suffix else np.maximum(a, uni.key_first[pu])
        b = uni.key_last[pu] if reach.prefix else np.minimum(b, uni.key_last[pu])
        if reach.peers:  # a rank or a RANGE frame sees a whole peer group
            a, b = uni.peer_first[a], uni.peer_last[b]
        o = lex_order([ps, a])
        ps, a, b = ps[o], a[o], b[o]
        reach_end = np.maximum.accumulate(ps * (uni.size + 1) + b) - ps * (uni.size + 1)
        start = np.r_[True, (ps[1:] != ps[:-1]) | (a[1:] > reach_end[:-1])]
        idx = np.flatnonzero(start)
        return ps[idx], a[idx], np.maximum.reduceat(b, idx) if len(idx) else b[idx]

    def _by_value(self, at: np.ndarray, offset, side: str, bound: np.ndarray) -> np.ndarray:
        """``bound`` widened to the first (``side`` "lo") or last ("hi") position whose order
        value lies within ``offset`` of position ``at``'s, in the window's direction (None:
        unbounded on that side, which Reach.prefix/suffix cover)."""
        if offset is None:
            return bound
        rows, reducer = self.uni.rows, self.reducer
        col, groups, taker = rows.column(reducer.order_by[0]), rows.column(GROUP), pa.array(at)
        found = value_positions(groups, col, reducer.directions[0] == "descending", groups.take(taker),
                                col.take(taker), offset, side)
        return np.minimum(bound, found) if side == "lo" else np.maximum(bound, found)

    def changes(self, key: list[str], max_cells: int, limit_cells: int | None):
        """The output changes of every step, chunk by chunk of segments: (positions, times,
        window columns, diffs), not consolidated."""
        if not len(self.pu):  # every change cancelled within its step
            return
        seg_step, seg_a, seg_b = self.segments()
        lens = seg_b - seg_a + 1
        if limit_cells is not None and len(lens) and lens.max() > limit_cells:
            big = int(np.argmax(lens))
            raise KeyTooLarge(f"{self.reducer}: a change of key {self._shown(key, seg_a[big])} moves "
                              f"{int(lens[big]):,} distinct rows, over the budget of {int(limit_cells):,} "
                              f"(DDCLI_REDUCE_MEMORY); split the key or raise the budget")
        chunk = (np.cumsum(lens) - lens) // max(int(max_cells), 1)
        bounds = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1], True])
        reach = self.reducer.reach()
        totals = self._totals() if reach.prefix or reach.suffix else None
        for s0, s1 in zip(bounds[:-1], bounds[1:]):
            part = self._chunk(seg_step[s0:s1], seg_a[s0:s1], lens[s0:s1], totals)
            if part is not None:
                yield part

    def _shown(self, key: list[str], pos) -> dict:
        k = int(self.uni.key_rep[self.uni.key[int(pos)]])
        return {c: self.uni.keys.column(c)[k].as_py() for c in key}

    def _chunk(self, seg_step, seg_a, lens, totals):
        """A chunk of segments evaluated before (group ``2 s``) and after (``2 s + 1``) their step."""
        uni, n_seg = self.uni, len(seg_step)
        cs = np.repeat(np.arange(n_seg, dtype=np.int64), lens)
        cu = seg_a[cs] + np.arange(len(cs), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
        step = seg_step[cs]
        m_old, m_new = self.multiplicity(cu, step - 1), self.multiplicity(cu, step)
        cells = np.concatenate([np.repeat(np.arange(len(cu)), m_old), np.repeat(np.arange(len(cu)), m_new)])
        group = np.concatenate([np.repeat(2 * cs, m_old), np.repeat(2 * cs + 1, m_new)])
        if not len(group):  # no row present on either side
            return None
        o = np.argsort(group, kind="stable")
        cells, group = cells[o], group[o]
        pos = cu[cells]
        taker = pa.array(pos)
        rows = pa.table({GROUP: pa.array(group, pa.int64()), **{c: uni.rows.column(c).take(taker) for c in uni.values}})
        offsets = None if totals is None else self._offsets(rows, group, seg_step, totals)
        cols = self.reducer.columns(rows, self.out_schema, offsets)
        return pos, self.step_time[seg_step[group // 2]], cols, np.where(group % 2 == 1, 1, -1)

    def _totals(self) -> dict:
        """The key's totals before and after each step: rows, live peer groups, and per
        column of a running aggregate its non-null values and exact sum (the base's, plus
        the changes of the key's steps so far)."""
        uni, bm = self.uni, np.maximum(self.bm, 0)
        keys = len(uni.key_rep)
        starts = np.flatnonzero(np.r_[True, self.step_key[1:] != self.step_key[:-1]])
        lens = np.diff(np.append(starts, self.steps))

        def around_steps(per_key, step_ids, gained):
            delta = _summed(step_ids, gained, self.steps)
            after = delta.copy()
            seg_cumsum_any_(after, starts, lens)
            after = per_key[self.step_key] + after
            return after - delta, after

        totals = {"count": around_steps(_summed(uni.key, bm, keys), self.ps, self.gain)}
        # live peer groups: a group's rows after each step that changes it, and whether it lives
        groups = int(uni.peer_id[-1]) + 1
        group_rows = _summed(uni.peer_id, bm, groups)
        rep, gained = group_sum([uni.peer_id[self.pu], self.ps], self.gain)  # by group, then step
        g = uni.peer_id[self.pu[rep]]
        now = gained.copy()
        runs = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        seg_cumsum_any_(now, runs, np.diff(np.append(runs, len(now))))
        now += group_rows[g]
        lives = (now > 0).astype(np.int64) - (now - gained > 0).astype(np.int64)
        group_key = np.zeros(groups, np.int64)
        group_key[uni.peer_id] = uni.key
        totals["dense"] = around_steps(_summed(group_key, (group_rows > 0).astype(np.int64), keys), self.ps[rep],
                                       lives)
        for fn in self.reducer.functions.values():
            if unbounded(fn) and fn.column is not None and ("n", fn.column) not in totals:
                col = uni.rows.column(fn.column)
                valid = pc.is_valid(col).to_numpy(zero_copy_only=False).astype(np.int64)
                totals["n", fn.column] = around_steps(_summed(uni.key, bm * valid, keys), self.ps,
                                                      self.gain * valid[self.pu])
                sum_t = exact_sum.sum_type(col.type)
                changed = col.take(pa.array(self.pu))
                totals["sum", fn.column] = around_steps(_summed(uni.key, exact_sum.weights(col, sum_t, bm), keys),
                                                        self.ps, exact_sum.weights(changed, sum_t, self.gain))
        return totals

    def _offsets(self, rows: pa.Table, group: np.ndarray, seg_step: np.ndarray, totals: dict) -> Offsets:
        """Per row of the chunk, what the partition's rows before its segment contribute:
        the key's total on the group's side of the step minus the segment's own."""
        G = 2 * len(seg_step)
        after = np.arange(G) % 2 == 1
        at = seg_step[np.arange(G) // 2]

        def before_segment(total, own):
            return (np.where(after, total[1][at], total[0][at]) - own)[group]

        count = before_segment(totals["count"], np.bincount(group, minlength=G).astype(np.int64))
        peer = row_ids(rows, [GROUP, *self.reducer.order_by], ordered=False)[0]
        peer_starts = np.r_[True, peer[1:] != peer[:-1]]
        dense = before_segment(totals["dense"], np.bincount(group[peer_starts], minlength=G).astype(np.int64))
        n, sums = {}, {}
        for name, total in totals.items():
            if name[0] == "n":
                valid = pc.is_valid(rows.column(name[1])).to_numpy(zero_copy_only=False).astype(np.int64)
                n[name[1]] = before_segment(total, _summed(group, valid, G))
            elif name[0] == "sum":
                col = rows.column(name[1])
                w = exact_sum.weights(col, exact_sum.sum_type(col.type), np.ones(len(group), np.int64))
                sums[name[1]] = before_segment(total, _summed(group, w, G))
        rest = Offsets(count, dense, n, sums)
        if not self.reducer.reach().suffix:
            return rest
        # with frames to the partition's last row every segment starts at its key's first
        # row: nothing is before it, the rest is after it
        zero = Offsets(count * 0, dense * 0, {c: v * 0 for c, v in n.items()}, {c: v * 0 for c, v in sums.items()})
        return zero._replace(after=rest)


def _summed(ids: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """``x`` summed per id ``0 .. n - 1`` (int64 or exact Python ints)."""
    out = np.zeros(n, x.dtype if x.dtype == object else np.int64)
    if x.dtype == object:
        out[:] = 0
    np.add.at(out, ids, x)
    return out


