"""A join's output changes from both sides' updates, by a sweep over time (numpy).

The change of ``L ⋈ R`` at time ``t`` (one-dimensional) is ``ΔL(t) ⋈ R(≤ t) + L(< t) ⋈ ΔR(t)``:
every change of one side meets the other side's collection as it is then, never its
history. Per side and data row, the updates summed in time order cut time into intervals
of constant non-zero multiplicity; a change of the other side of the same key at a time
inside an interval pairs with it. Changes are sorted by (key, time), and the changes inside
an interval are found with ``searchsorted`` and expanded with ``repeat``/``arange``: the
work is the pairs the output is made of before consolidation — (changes of one side) ×
(rows of the other side alive then) — not (updates of one side) × (updates of the other).

Times of ``d >= 2`` coordinates: a pair of updates at ``s`` and ``u`` meets at ``s ∨ u``,
coordinate by coordinate. Grouping each side's updates by (data row, every coordinate but
the first) makes the first coordinate a one-dimensional join of those rows' histories,
and the other coordinates of the pair's time the maximum of both rows' — so the same
sweep over the first coordinate, with those coordinates part of the row, is exact for
every ``d``. A row's other coordinates are what differential dataflow would advance to the
meet of the times still to come; here they stay exact, so the rows a sweep keeps alive are
the distinct (data, other coordinates) of a side (few, for a loop's iterations).

Only pairs with at least one update of this run (``_new``) are output; pairs of two old
updates were output by earlier runs. Old updates are advanced, in the first coordinate, to
the earliest new time (no pair with a new update can tell them apart), which collapses a
key's stored history to its live rows. Counting each pair once::

    new L changes × all of R alive at or before  +  old L changes × new R alive at or before
  + new R changes × all of L alive strictly before  +  old R changes × new L alive strictly before

A *history* row (``HIST``) stands for everything before the rows a call is given (a hot
key's earlier slices, ``ops/operators/join_task.py``): it is alive from before every time and never
a change itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ops.columnar import exclusive_cumsum, new_flags, np_int, row_ids, seg_cumsum_
from storage.lattice import time_columns
from storage.row_order import group_sum

SIDE = "_ddcli_side"  # 0: the left side's update, 1: the right side's
HIST = "_ddcli_hist"  # true: a row of the accumulated history before the rows given


@dataclass(frozen=True)
class JoinSpec:
    """What a join task computes (no Spark objects: it is pickled to the tasks).

    ``key``: the columns both sides are matched on (null-safely); ``left``/``right``: each
    side's other data columns (``right`` empty for a semijoin, whose right side counts per
    key); ``half``: only new left changes against the right side as it is at their time,
    placed at the left change's time (the as-of join, one-dimensional)."""

    key: tuple[str, ...]
    left: tuple[str, ...]
    right: tuple[str, ...]
    d: int
    half: bool = False

    @property
    def tcols(self) -> list[str]:
        return time_columns(self.d)

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """key, left, right, time columns, diff (the types of ``input_schema``, the tasks' input)."""
        fields = [input_schema.field(c) for c in (*self.key, *self.left, *self.right)]
        return pa.schema(fields + [pa.field(t, pa.int64()) for t in self.tcols] + [pa.field("diff", pa.int64())])


@dataclass
class _Side:
    """One side's updates as integer arrays: per update its row (an id over key, data and
    the time coordinates after the first), key, rank of its first time coordinate
    (0 for history rows), diff and whether it is new."""

    row: np.ndarray
    key: np.ndarray
    rank: np.ndarray
    diff: np.ndarray
    new: np.ndarray


def join_table(table: pa.Table, spec: JoinSpec) -> pa.Table:
    """The consolidated output changes of the join for the rows of ``table`` (both sides'
    updates, ``SIDE``, ``_new``, optional ``HIST``): columns of ``spec.output_schema``."""
    schema = spec.output_schema(table.schema)
    n = table.num_rows
    if n == 0:
        return schema.empty_table()
    side = np_int(table.column(SIDE)).astype(bool)
    new = new_flags(table)
    hist = np.asarray(table.column(HIST).to_numpy(zero_copy_only=False), bool) if HIST in table.column_names \
        else np.zeros(n, bool)
    emit_new = new & ~hist
    if not emit_new.any():
        return schema.empty_table()
    tcols = spec.tcols
    x = np_int(table.column(tcols[0]))
    if not (hist & new).any():
        # old updates advanced to the earliest new time: pairs with new updates cannot tell
        # them apart (a new history row is earlier than that, and may pair with any of them)
        x = np.where(~new & ~hist, np.maximum(x, x[emit_new].min()), x)
    key, keys = row_ids(table, list(spec.key), ordered=False)
    ranks, width, time_of = _ranks(x, hist, keys)
    diff = np_int(table.column("diff"))
    rest = [np_int(table.column(t)) for t in tcols[1:]]
    # a data row's id (the side is part of it), and a row's: with the other time coordinates
    value = value_ids(table, side, spec)
    row = _with_coordinates(value, rest)
    idx_l, idx_r = np.flatnonzero(~side), np.flatnonzero(side)
    left = _consolidated(_Side(row[idx_l], key[idx_l], ranks[idx_l], diff[idx_l], new[idx_l]))
    right = _consolidated(_Side(row[idx_r], key[idx_r], ranks[idx_r], diff[idx_r], new[idx_r]))

    def term(changes, other: _Side, new: bool | None, strict: bool):
        """The changes against the other side's intervals (none computed for no changes:
        a first run has no old ones)."""
        return stab(changes, _intervals(other, new), width, strict) if len(changes[0]) else None

    if spec.half:
        terms = [term(_changes(left, None), right, None, strict=False)]
    else:
        terms = [term(_changes(left, True), right, None, strict=False),
                 term(_changes(left, False), right, True, strict=False)]
        terms += [t and _flip(t) for t in (term(_changes(right, True), left, None, strict=True),
                                           term(_changes(right, False), left, True, strict=True))]
    terms = [t for t in terms if t is not None]
    if not terms:
        return schema.empty_table()
    lrow, rrow, prank, pdiff = (np.concatenate(c) for c in zip(*terms))
    if len(pdiff) == 0:
        return schema.empty_table()
    rep = np.zeros(int(row.max()) + 1, np.int64)  # per row id: the index of one of its updates
    rep[row] = np.arange(n)
    at_l, at_r = rep[lrow], rep[rrow]
    out_rest = [np.maximum(r[at_l], r[at_r]) for r in rest]
    # distinct row pairs may meet at the same output row and time: sum them per output row
    first, sums = group_sum([value[at_l], value[at_r], prank, *out_rest], pdiff)
    keep = sums != 0
    first, sums = first[keep], sums[keep]
    lrows = table.select([*spec.key, *spec.left]).take(at_l[first])
    rrows = table.select(list(spec.right)).take(at_r[first])
    cols = {c: lrows.column(c) for c in lrows.column_names}
    cols.update({c: rrows.column(c) for c in rrows.column_names})
    cols[tcols[0]] = pa.array(time_of(prank[first]), pa.int64())
    for t, r in zip(tcols[1:], out_rest):
        cols[t] = pa.array(r[first], pa.int64())
    cols["diff"] = pa.array(sums, pa.int64())
    return pa.table(cols).cast(schema)


def value_ids(table: pa.Table, side: np.ndarray, spec: JoinSpec) -> np.ndarray:
    """Dense ids of the rows' (side, key, data columns of their side), each side's computed
    over its own columns only (the other side's are null in its rows): half the rows a
    column, and no nulls, which integer columns are coded without a hash table for."""
    ids = np.zeros(table.num_rows, np.int64)
    seen = 0
    for s, cols in ((False, spec.left), (True, spec.right)):
        idx = np.flatnonzero(side == s)
        if len(idx):
            mine, count = row_ids(table.select([*spec.key, *cols]).take(idx), [*spec.key, *cols], ordered=False)
            ids[idx] = mine + seen
            seen += count
    return ids


def _ranks(x: np.ndarray, hist: np.ndarray, keys: int):
    """Ranks of the first time coordinate that keep its order (0 for history rows), the
    width that packs (key, rank) into one int64, and the map back from ranks to times.
    Offsets from the least time when they pack, else dense ranks (a sort)."""
    live = x[~hist]
    ranks = np.zeros(len(x), np.int64)
    lo, hi = (int(live.min()), int(live.max())) if len(live) else (0, 0)
    span = hi - lo + 1
    if float(span + 2) * (keys + 1) < 2.0 ** 62:
        ranks[~hist] = live - lo + 1
        return ranks, span + 2, lambda r: r - 1 + lo
    times, inverse = np.unique(live, return_inverse=True)
    ranks[~hist] = inverse.reshape(-1) + 1
    return ranks, len(times) + 2, lambda r: times[r - 1]


def _with_coordinates(value: np.ndarray, rest: list[np.ndarray]) -> np.ndarray:
    """Row ids: the data row's id refined by the time coordinates after the first."""
    if not rest:
        return value
    return row_ids(pa.table({f"c{i}": c for i, c in enumerate([value, *rest])}),
                   [f"c{i}" for i in range(len(rest) + 1)], ordered=False)[0]


def _consolidated(s: _Side) -> _Side:
    """Updates summed per (row, rank, new), zeros dropped: in that order."""
    if len(s.row) == 0:
        return s
    first, sums = group_sum([s.row, s.rank, s.new], s.diff)
    keep = sums != 0
    first = first[keep]
    return _Side(s.row[first], s.key[first], s.rank[first], sums[keep], s.new[first])


def _changes(s: _Side, new: bool | None) -> tuple[np.ndarray, ...]:
    """(row, key, rank, diff) of a side's changes (history rows are none): the new ones,
    the old ones, or (None) all, summed per (row, rank)."""
    mask = s.rank > 0
    if new is not None:
        mask &= s.new == new
    row, key, rank, diff = s.row[mask], s.key[mask], s.rank[mask], s.diff[mask]
    if new is None and len(row):
        first, diff = group_sum([row, rank], diff)
        row, key, rank = row[first], key[first], rank[first]
    return row, key, rank, diff


def _intervals(s: _Side, new: bool | None) -> tuple[np.ndarray, ...]:
    """(row, key, start, end, multiplicity) of a side's rows (only its new updates' with
    ``new``): the ranks ``[start, end)`` over which each row's accumulated multiplicity is a
    constant other than zero; ``end`` of the last is past every rank."""
    mask = s.new if new else np.ones(len(s.row), bool)
    row, key, rank, diff = s.row[mask], s.key[mask], s.rank[mask], s.diff[mask]  # sorted by (row, rank)
    if len(row) == 0:
        e = np.zeros(0, np.int64)
        return e, e, e, e, e
    head = np.ones(len(row), bool)
    head[1:] = (row[1:] != row[:-1]) | (rank[1:] != rank[:-1])
    idx = np.flatnonzero(head)  # one entry per (row, rank): the sum of its updates
    return alive_intervals(row[idx], key[idx], rank[idx], np.add.reduceat(diff, idx))


def alive_intervals(row: np.ndarray, key: np.ndarray, rank: np.ndarray, diff: np.ndarray) -> tuple[np.ndarray, ...]:
    """(row, key, start, end, multiplicity) from updates summed per (row, rank) and sorted
    so: each row's accumulated multiplicity over ``[start, end)``, where it is not zero;
    ``end`` of a row's last interval is past every rank."""
    m = diff.copy()
    seg = np.ones(len(row), bool)
    seg[1:] = row[1:] != row[:-1]
    starts = np.flatnonzero(seg)
    if len(row):
        seg_cumsum_(m, starts, np.diff(np.append(starts, len(row))))
    end = np.full(len(row), np.iinfo(np.int64).max, np.int64)
    same = ~seg[1:]
    end[:-1][same] = rank[1:][same]
    alive = m != 0
    return row[alive], key[alive], rank[alive], end[alive], m[alive]


def stab(changes, intervals, width: int, strict: bool, presorted: bool = False) -> tuple[np.ndarray, ...]:
    """Every (change, interval) of the same key with the change's rank inside the interval:
    ``[start, end)``, or with ``strict`` ``(start, end]`` (the interval's row was alive just
    before the change). Ranks are below ``width - 1``; ``presorted``: the changes come sorted
    by (key, rank). Returns (change row, interval row, change rank, product of diffs)."""
    c_row, c_key, c_rank, c_diff = changes
    i_row, i_key, i_start, i_end, i_m = intervals
    if len(c_row) == 0 or len(i_row) == 0:
        e = np.zeros(0, np.int64)
        return e, e, e, e
    code = c_key * width + c_rank
    order = np.arange(len(code)) if presorted else np.argsort(code)
    sorted_code = code if presorted else code[order]
    side = "right" if strict else "left"
    base = i_key * width
    lo = np.searchsorted(sorted_code, base + i_start, side)
    hi = np.searchsorted(sorted_code, base + np.minimum(i_end, width - 1), side)
    count = np.maximum(hi - lo, 0)
    total = int(count.sum())
    interval = np.repeat(np.arange(len(i_row)), count)
    change = order[np.repeat(lo - exclusive_cumsum(count), count) + np.arange(total)]
    return c_row[change], i_row[interval], c_rank[change], c_diff[change] * i_m[interval]


def _flip(term):
    """A right-change term as (left row, right row, rank, diff)."""
    c_row, i_row, rank, diff = term
    return i_row, c_row, rank, diff


def all_pairs(left: pa.Table, right: pa.Table, on: list[str], d: int) -> pa.Table:
    """Every pair of a ``left`` and a ``right`` update with equal ``on`` (null-safely), at the
    join of their times with the product of their diffs, consolidated: columns of ``left``
    but its times and diff, then ``right``'s others, the time columns, diff. The sweep pays
    (updates of one side) × (rows of the other alive then), not the product of both."""
    tcols = time_columns(d)
    lcols = [c for c in left.column_names if c not in tcols and c != "diff"]
    rcols = [c for c in right.column_names if c not in tcols and c != "diff" and c not in on]
    spec = JoinSpec(tuple(on), tuple(c for c in lcols if c not in on), tuple(rcols), d)
    tagged = [_tag(left, 0, True), _tag(right.select([*on, *rcols, *tcols, "diff"]), 1, False)]
    out = join_table(pa.concat_tables(tagged, promote_options="permissive"), spec)
    return out.select([*lcols, *rcols, *tcols, "diff"])


def _tag(t: pa.Table, side: int, new: bool) -> pa.Table:
    n = t.num_rows
    return t.append_column(SIDE, pa.array(np.full(n, side, np.int8))).append_column(
        "_new", pa.array(np.full(n, new, bool)))
