"""A join side that stays put through a loop's rounds: its intervals built once (numpy).

In a loop, one side of a join is often a collection entered from outside (a graph's
edges): after the round that enters it, it no longer changes, while every round brings
changes of the other side. The sweep of ``ops/operators/join_sweep.py`` rebuilds that
side's intervals for the keys a round touches, every round: in the middle rounds of a
batch, nearly the whole side. Here they are built once: per data row, the intervals of the
first time coordinate over which its accumulated multiplicity is a constant other than
zero, sorted by key; and its changes, summed per (row, time), sorted by (key, time). A
round then costs its own changes and the intervals and changes of the keys they touch.

It computes what the sweep computes for a round's changes at two-coordinate times (outer,
iteration), all at the current iteration, against a static side all at or before it:
every pair meets at the current iteration, the first coordinate alone tells rows apart,
and each pair is counted once as the sweep counts it — a left change meets the right
rows alive at or before its time, a right change the left rows alive strictly before::

    round changes × static rows alive then  +  static changes × round rows alive then

Keys are one integer column without nulls; anything else takes the sweep.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ops.columnar import exclusive_cumsum, np_int, row_ids
from ops.operators.join_sweep import alive_intervals, stab
from storage.row_order import group_sum, lex_order


def usable_key(schema: pa.Schema, on: list[str]) -> bool:
    """Keys this module takes: one integer column."""
    return len(on) == 1 and pa.types.is_integer(schema.field(on[0]).type)


def _history(row: np.ndarray, key: np.ndarray, t: np.ndarray, diff: np.ndarray):
    """A side's changes ``(row, key, time, diff)`` summed per (row, time), zeros dropped,
    sorted by (row, time); and its intervals ``(row, key, start, end, multiplicity)`` of
    constant non-zero accumulated multiplicity (``end`` of a row's last one past every time)."""
    first, sums = group_sum([row, t], diff)
    keep = sums != 0
    first, sums = first[keep], sums[keep]
    row, key, t = row[first], key[first], t[first]
    return (row, key, t, sums), alive_intervals(row, key, t, sums)


def _of_keys(sorted_keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions in ``sorted_keys`` of every entry whose key is one of ``wanted`` (distinct)."""
    lo = np.searchsorted(sorted_keys, wanted, "left")
    count = np.searchsorted(sorted_keys, wanted, "right") - lo
    total = int(count.sum())
    return np.repeat(lo - exclusive_cumsum(count), count) + np.arange(total)


class StaticSide:
    """One side's updates (``table``: key, data columns, times, diff), prepared for many
    rounds of changes of the other side. ``left``: it is the join's left side. ``columns``:
    what it gives each output row (the key too when it is the left side)."""

    def __init__(self, table: pa.Table, key: str, data: list[str], tcols: list[str], left: bool):
        self.key, self.left = key, left
        self.columns = [key, *data] if left else list(data)
        k = np_int(table.column(key))
        self.keys = np.unique(k)  # the key values, sorted: a key's id is its position
        vid, count = row_ids(table, [key, *data], ordered=False)
        rep = np.zeros(count, np.int64)
        rep[vid] = np.arange(len(vid))
        self.rows = table.select(self.columns).take(pa.array(rep)) if self.columns else None
        self.last_iteration = int(np_int(table.column(tcols[-1])).max()) if table.num_rows else 0
        t = np_int(table.column(tcols[0]))
        self.t_lo, self.t_hi = (int(t.min()), int(t.max())) if len(t) else (0, 0)
        changes, intervals = _history(vid, np.searchsorted(self.keys, k), t, np_int(table.column("diff")))
        order = np.argsort(intervals[1], kind="stable")
        self.intervals = tuple(a[order] for a in intervals)  # by key
        order = lex_order([changes[1], changes[2]])
        self.changes = tuple(a[order] for a in changes)  # by (key, time)

    @classmethod
    def of(cls, table: pa.Table | None, key: str, data: list[str], tcols: list[str], left: bool):
        """The prepared side, or None when its key has nulls (the sweep matches them)."""
        if table is None or table.column(key).null_count:
            return None
        return cls(table, key, data, tcols, left)

    def pairs(self, changes: pa.Table, data: list[str], tcols: list[str], iteration: int) -> pa.Table | None:
        """The join's output changes from the other side's ``changes`` (its key, ``data``,
        times at ``iteration``, diff): left columns, right columns, times, diff,
        consolidated; None when their keys have nulls or the times do not pack."""
        if changes.column(self.key).null_count:
            return None
        ck = np_int(changes.column(self.key))
        kid = np.minimum(np.searchsorted(self.keys, ck), max(len(self.keys) - 1, 0))
        known = np.flatnonzero(self.keys[kid] == ck) if len(self.keys) else np.zeros(0, np.int64)
        cvid, count = row_ids(changes, [self.key, *data], ordered=False)
        rep = np.zeros(count, np.int64)
        rep[cvid] = np.arange(len(cvid))
        t = np_int(changes.column(tcols[0]))
        lo = min(self.t_lo, int(t.min())) if len(t) else self.t_lo
        hi = max(self.t_hi, int(t.max())) if len(t) else self.t_hi
        width = hi - lo + 2
        if float(len(self.keys) + 1) * width >= 2.0 ** 62:
            return None
        mine, alive = _history(cvid[known], kid[known], t[known], np_int(changes.column("diff"))[known])
        # a left change meets the right rows alive at or before its time; a right change
        # the left rows alive strictly before its time
        terms = [_stab(mine, self.intervals, lo, hi, width, strict=self.left, sorted_changes=False),
                 _stab(self.changes, alive, lo, hi, width, strict=not self.left, sorted_changes=True)]
        crow = np.concatenate([terms[0][0], terms[1][1]])
        srow = np.concatenate([terms[0][1], terms[1][0]])
        time = np.concatenate([terms[0][2], terms[1][2]])
        diff = np.concatenate([terms[0][3], terms[1][3]])
        first, sums = group_sum([crow, srow, time], diff)
        keep = sums != 0
        first, sums = first[keep], sums[keep]
        theirs = changes.select(([] if self.left else [self.key]) + list(data)).take(pa.array(rep[crow[first]]))
        ours = self.rows.take(pa.array(srow[first])) if self.rows is not None else None
        cols = {}
        for part in (ours, theirs) if self.left else (theirs, ours):
            if part is not None:
                cols.update({c: part.column(c) for c in part.column_names})
        cols[tcols[0]] = pa.array(time[first], pa.int64())
        for c in tcols[1:]:
            cols[c] = pa.array(np.full(len(sums), iteration, np.int64))
        cols["diff"] = pa.array(sums, pa.int64())
        return pa.table(cols)


def _stab(changes, intervals, lo: int, hi: int, width: int, *, strict: bool, sorted_changes: bool):
    """The sweep's ``stab`` over the changes and intervals of the keys both hold, times made
    offsets from ``lo`` (ranks; an interval's end past ``hi`` cut to ``hi + 1``). With
    ``sorted_changes`` (by key, time) the changes are not sorted again. Returns (change
    row, interval row, change time, product of diffs)."""
    c_row, c_key, c_t, c_diff = changes
    i_row, i_key, i_start, i_end, i_m = intervals
    if sorted_changes:  # only the changes of the keys the intervals hold
        idx = _of_keys(c_key, np.unique(i_key))
        c_row, c_key, c_t, c_diff = c_row[idx], c_key[idx], c_t[idx], c_diff[idx]
    else:  # only the intervals of the keys the changes hold
        idx = _of_keys(i_key, np.unique(c_key))
        i_row, i_key, i_start, i_end, i_m = i_row[idx], i_key[idx], i_start[idx], i_end[idx], i_m[idx]
    rank = (c_row, c_key, c_t - lo, c_diff)
    spans = (i_row, i_key, i_start - lo, np.minimum(i_end, hi + 1) - lo, i_m)
    c, i, r, d = stab(rank, spans, width, strict, presorted=sorted_changes)
    return c, i, r + lo, d
