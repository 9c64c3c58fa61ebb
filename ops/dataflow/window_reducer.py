"""The ``window`` reducer: every row of a partition with its window functions' values.

A reduce keyed by the partition columns whose ``f`` is the whole partition, each row
with new columns (ops/dataflow/windows.py says what they mean). With one-dimensional
times a change recomputes only the rows of its partition it affects
(ops/reduce/window_sweep.py evaluates the functions over those rows with
:class:`Offsets`, what the rows before them contribute). With more coordinates it is
evaluated like any reducer on the grid of times (ops/reduce/grid.py): one call for many
(partition, time) groups at once, one sort of all their rows and prefix sums over it, no
Python per row or per partition; a change recomputes its whole partition at the times it
touches. Either way the output changes are the rows whose values moved.

Rows are ordered as SQL (DuckDB) orders them: by the order columns in their directions,
nulls last in either direction, NaN the greatest number; rows tied there follow their
other columns ascending, so ``row_number``, ``lag``, ``lead`` and ROWS frames are a
function of the collection, never of the order its history was stored in. A row of
multiplicity ``c`` is ``c`` rows, each with its own ``row_number``.
"""

from __future__ import annotations

import datetime
import decimal
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops import exact_sum
from ops.columnar import COUNT, GROUP, np_int, row_ids, sql_order
from ops.dataflow.reducers import Reducer, sort_directions
from ops.dataflow.windows import WindowFunction, problem, value_frame, value_offset


class Window(Reducer):
    """Each row present (count > 0), as many times as its count, with one column per
    window function, computed over its group's rows in ``order_by`` order (``directions``
    per column; no order: every row a peer of every other). Order columns among
    ``partition_by`` (the reduce's key, which the reducer never sees) are left out."""

    def __init__(self, order_by, descending, functions: dict, partition_by=()):
        if not functions:
            raise ValueError("give at least one window function, e.g. n=row_number()")
        for name, fn in functions.items():
            why = problem(fn)
            if why:
                raise ValueError(f"{name}= {why}")
        if order_by is None or (isinstance(order_by, (list, tuple)) and not order_by and descending in (False, [], ())):
            self.order_by, self.directions = [], []
        else:  # a partition column is constant within a partition: ordering by it changes nothing
            cols, dirs = sort_directions(order_by, descending)
            kept = [i for i, c in enumerate(cols) if c not in partition_by]
            self.order_by, self.directions = [cols[i] for i in kept], [dirs[i] for i in kept]
        self.functions = dict(functions)

    def __str__(self) -> str:  # how an error names it: as the pipeline wrote it
        order = ", ".join(c + (" desc" if d == "descending" else "") for c, d in zip(self.order_by, self.directions))
        return f"window(order by {order or '(none)'}: {', '.join(self.functions)})"

    def output_schema(self, values_schema):
        for c in self.order_by:
            if c not in values_schema.names:
                raise ValueError(f"order_by column {c!r} is not a value column (value columns: {values_schema.names})")
        fields = list(values_schema)
        for name, fn in self.functions.items():
            if value_frame(fn.frame):
                _check_value_frame(name, fn, self.order_by, values_schema)
            if name in values_schema.names:
                raise ValueError(f"window column {name!r} has the name of an input column; rename it")
            fields.append(pa.field(name, _type(name, fn, values_schema)))
        return pa.schema(fields)

    def __call__(self, rows):
        values = [c for c in rows.column_names if c not in (GROUP, COUNT)]
        out_schema = self.output_schema(rows.select(values).schema)
        rows = _ordered(_expanded(rows), self.order_by, self.directions, self.rest(values))
        cols = {GROUP: rows.column(GROUP), **{c: rows.column(c) for c in values}}
        cols.update(self.columns(rows, out_schema))
        cols[COUNT] = pa.array(np.ones(rows.num_rows, np.int64))
        return pa.table(cols)

    def rest(self, values: list[str]) -> list[str]:
        """The value columns that order rows tied in the window's order (ascending)."""
        return [c for c in values if c not in self.order_by]

    def columns(self, rows: pa.Table, out_schema: pa.Schema, offsets: "Offsets | None" = None) -> dict:
        """Each window function's column over ``rows`` (one row per unit of multiplicity,
        by ``GROUP`` then the window's order); with ``offsets``, each group is the end of
        its partition and ``offsets`` what the partition's rows before it contribute."""
        at = _Positions(rows, self.order_by, self.directions)
        prefixes = {}  # a column's prefix sums, shared by the functions over it
        return {name: _evaluate(fn, rows, at, out_schema.field(name).type, prefixes, offsets)
                for name, fn in self.functions.items()}

    def reach(self) -> "Reach":
        """How far a change at a position of the order moves the functions' values."""
        back = fwd = 0
        prefix = suffix = peers = False
        spans = []
        for fn in self.functions.values():
            if fn.kind in ("lag", "lead"):
                back, fwd = (max(back, fn.offset), fwd) if fn.kind == "lag" else (back, max(fwd, fn.offset))
                continue
            if fn.kind in ("row_number", "rank", "dense_rank"):
                prefix = True
                peers = peers or fn.kind != "row_number"
                continue
            frame = fn.frame
            peers = peers or frame.unit == "range"
            if value_frame(frame):
                spans.append(_value_reach(frame))
            if frame.preceding is None:
                prefix = True
            elif frame.unit == "rows":  # a ROWS frame from n rows before: the n rows after a change see it
                back = max(back, frame.preceding)
            if frame.following is None:
                suffix = True
            elif frame.unit == "rows":  # to m rows after: the m rows before a change see it
                fwd = max(fwd, frame.following)
        return Reach(back, fwd, prefix, peers, suffix, tuple(spans))


class Reach(NamedTuple):
    """A change at position ``p`` of a partition's order (one row per unit of multiplicity)
    moves the values of the rows ``p - fwd .. p + back`` (``lead``'s offset and a ROWS
    frame's following rows, ``lag``'s offset and its preceding rows); with ``prefix``
    functions (ranks, frames from the partition's first row) every row from ``p`` on, with
    ``suffix`` ones (frames to the partition's last row) every row up to ``p``; with
    ``peers`` (ranks and RANGE frames see peers as one) the whole of ``p``'s peer group too;
    with ``values`` (per RANGE frame by value offset, its (preceding, following) offsets,
    None: unbounded) every row whose frame holds ``p``'s order value."""

    back: int
    fwd: int
    prefix: bool
    peers: bool
    suffix: bool = False
    values: tuple = ()


class Offsets(NamedTuple):
    """Per row, what the rows of its partition before its group contribute: their number
    (``count``), their distinct orders (``dense``), and per column its non-null values
    (``n``) and their exact sum (``sums``, ops/exact_sum.py); and what the rows after its
    group contribute (``after``: an ``Offsets`` of count, n and sums, None: nothing)."""

    count: np.ndarray
    dense: np.ndarray | None
    n: dict
    sums: dict
    after: "Offsets | None" = None


def unbounded(fn: WindowFunction) -> bool:
    """Whether ``fn`` is a running aggregate from the partition's first row or to its last."""
    return fn.kind in ("sum", "count", "avg") and (fn.frame.preceding is None or fn.frame.following is None)


def _type(name: str, fn: WindowFunction, values_schema: pa.Schema) -> pa.DataType:
    """The type of window column ``name``; a column it cannot take is a ``ValueError``."""
    if fn.column is not None and fn.column not in values_schema.names:
        raise ValueError(f"{name}={fn.kind}({fn.column!r}): {fn.column!r} is not a value column "
                         f"(value columns: {values_schema.names})")
    if fn.kind in ("row_number", "rank", "dense_rank", "count"):
        return pa.int64()
    t = values_schema.field(fn.column).type
    if fn.kind in ("lag", "lead"):
        _default(name, fn, t)
        return t
    out = exact_sum.sum_type(t)
    if out is None:
        raise ValueError(f"{name}={fn.kind}({fn.column!r}): column type {t} is not numeric")
    return out if fn.kind == "sum" else pa.float64()


def _default(name: str, fn: WindowFunction, t: pa.DataType) -> pa.Scalar:
    """``lag``/``lead``'s default as a value of the column's type."""
    if fn.default is None:
        return pa.scalar(None, t)
    value = fn.default
    if pa.types.is_decimal(t) and isinstance(value, float):
        value = decimal.Decimal(repr(value))  # the literal as written, not its binary double
    try:
        return pa.scalar(value, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        pass
    try:
        return pa.scalar(value).cast(t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as e:
        raise ValueError(f"{name}={fn.kind}({fn.column!r}, default={fn.default!r}): the default is no value of "
                         f"the column's type {t} ({e})") from None


def _expanded(rows: pa.Table) -> pa.Table:
    """The rows present, a row of count ``c`` repeated ``c`` times."""
    rows = rows.filter(pc.greater(rows.column(COUNT), 0))
    c = np_int(rows.column(COUNT))
    if len(c) and c.max() > 1:
        rows = rows.take(pa.array(np.repeat(np.arange(len(c), dtype=np.int64), c)))
    return rows


def _ordered(rows: pa.Table, order_by: list[str], directions: list[str], rest: list[str]) -> pa.Table:
    """Rows by group, then the window's order, then the other columns ascending."""
    keys = [(GROUP, "ascending"), *zip(order_by, directions), *[(c, "ascending") for c in rest]]
    return rows.take(pa.array(sql_order(rows, keys)))


class _Positions:
    """Per row of the ordered rows: its index, its partition's first and last index, and
    its peer group's (the rows equal in the window's order) first and last index."""

    def __init__(self, rows: pa.Table, order_by: list[str], directions=()):
        self.rows, self.order_by, self.directions = rows, order_by, list(directions)
        n = rows.num_rows
        self.index = np.arange(n, dtype=np.int64)
        g = np_int(rows.column(GROUP))
        self.first, self.last = self._runs(np.r_[True, g[1:] != g[:-1]] if n else np.zeros(0, bool))
        peer = row_ids(rows, [GROUP, *order_by], ordered=False)[0]
        self.peer_starts = np.r_[True, peer[1:] != peer[:-1]] if n else np.zeros(0, bool)
        self.peer_first, self.peer_last = self._runs(self.peer_starts)

    def by_value(self, offset, side: str) -> np.ndarray:
        """Per row, the first row of its partition not before its order value moved
        ``offset`` back in the window's direction (``side`` "lo"), or the last not after it
        moved ``offset`` on ("hi"): a RANGE frame's bound by value."""
        col = self.rows.column(self.order_by[0])
        return value_positions(self.rows.column(GROUP), col, self.directions[0] == "descending",
                               self.rows.column(GROUP), col, offset, side)

    def _runs(self, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's run's first and last index, the runs beginning where ``starts``."""
        n = len(starts)
        first = np.maximum.accumulate(np.where(starts, self.index, 0)) if n else self.index
        ends = np.r_[starts[1:], True] if n else starts
        last = np.minimum.accumulate(np.where(ends, self.index, n)[::-1])[::-1] if n else self.index
        return first, last


def _evaluate(fn: WindowFunction, rows: pa.Table, at: _Positions, out_t: pa.DataType, prefixes: dict,
              offsets: Offsets | None) -> pa.Array:
    """The column of window function ``fn`` for every ordered row."""
    before = 0 if offsets is None else offsets.count
    if fn.kind == "row_number":
        return pa.array(at.index - at.first + 1 + before, pa.int64())
    if fn.kind == "rank":
        return pa.array(at.peer_first - at.first + 1 + before, pa.int64())
    if fn.kind == "dense_rank":
        peers = np.cumsum(at.peer_starts)
        dense = peers - peers[at.first] + 1 if len(peers) else peers
        return pa.array(dense if offsets is None else dense + offsets.dense, pa.int64())
    if fn.kind in ("lag", "lead"):
        src = at.index - fn.offset if fn.kind == "lag" else at.index + fn.offset
        inside = (src >= at.first) & (src <= at.last)
        col = rows.column(fn.column)
        taken = col.take(pa.array(np.where(inside, src, 0))) if len(src) else col
        return pc.if_else(pa.array(inside), taken, _default("", fn, out_t))
    return _running(fn, rows, at, out_t, prefixes, offsets)


def _running(fn: WindowFunction, rows: pa.Table, at: _Positions, out_t: pa.DataType, prefixes: dict,
             offsets: Offsets | None) -> pa.Array:
    """A running ``sum``/``count``/``avg`` over each row's frame ``[lo, hi]``: differences
    of prefix sums over all rows (a frame never leaves its partition; an empty frame
    counts nothing), plus ``offsets`` for a frame from the partition's first row and its
    ``after`` for a frame to the partition's last. Sums are exact integers
    (ops/exact_sum.py), rounded once."""
    lo, hi = _bounds(fn.frame, at)
    hi = np.maximum(hi, lo - 1)
    parts = [] if offsets is None else \
        ([offsets] if fn.frame.preceding is None else []) + \
        ([offsets.after] if fn.frame.following is None and offsets.after is not None else [])
    if fn.column is None:
        return pa.array(hi - lo + 1 + sum(o.count for o in parts), pa.int64())
    col = rows.column(fn.column)
    if ("n", fn.column) not in prefixes:
        prefixes["n", fn.column] = _prefix(pc.is_valid(col).to_numpy(zero_copy_only=False).astype(np.int64))
    n = _framed(prefixes["n", fn.column], lo, hi) + sum(o.n[fn.column] for o in parts)
    if fn.kind == "count":
        return pa.array(n, pa.int64())
    sum_t = exact_sum.sum_type(col.type)
    if ("sum", fn.column) not in prefixes:
        prefixes["sum", fn.column] = _prefix(exact_sum.weights(col, sum_t, np.ones(len(lo), np.int64)))
    total = _framed(prefixes["sum", fn.column], lo, hi)
    for o in parts:
        total = total + o.sums[fn.column]
    total = exact_sum.values(total, sum_t)
    if fn.kind == "avg":
        total = pc.divide(total.cast(pa.float64()), pa.array(n, pa.float64()))
    return pc.if_else(pa.array(n > 0), total.cast(out_t), pa.scalar(None, out_t))


def _bounds(frame, at: _Positions) -> tuple[np.ndarray, np.ndarray]:
    """Each row's frame as its first and last index (clipped to its partition)."""
    if frame.unit == "range":
        p, f = frame.preceding, frame.following
        lo = at.first if p is None else at.by_value(p, "lo") if value_offset(p) else at.peer_first
        hi = at.last if f is None else at.by_value(f, "hi") if value_offset(f) else at.peer_last
        return lo, hi
    lo = at.first if frame.preceding is None else np.clip(at.index - frame.preceding, at.first, at.last + 1)
    hi = at.last if frame.following is None else np.clip(at.index + frame.following, at.first - 1, at.last)
    return lo, hi


def _prefix(x: np.ndarray) -> np.ndarray:
    """``0, x[0], x[0] + x[1], ...`` (int64 or exact Python ints)."""
    prefix = np.zeros(len(x) + 1, x.dtype)
    np.cumsum(x, out=prefix[1:])
    return prefix


def _framed(prefix: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``x[lo] + ... + x[hi]`` per row from ``x``'s :func:`_prefix`."""
    return prefix[hi + 1] - prefix[lo]


def _check_value_frame(name: str, fn: WindowFunction, order_by: list[str], values_schema: pa.Schema) -> None:
    """A RANGE frame by value offset needs one numeric, date or timestamp order column, and
    interval offsets (``datetime.timedelta``) for a date or timestamp (a number is days there)."""
    if len(order_by) != 1:
        raise ValueError(f"{name}={fn.kind}(...): a RANGE frame with an offset needs exactly one order column "
                         f"(not a partition column), got {order_by}")
    t = values_schema.field(order_by[0]).type
    interval = any(isinstance(b, datetime.timedelta) for b in (fn.frame.preceding, fn.frame.following))
    temporal = pa.types.is_date(t) or pa.types.is_timestamp(t)
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    if not (temporal or numeric) or (interval and not temporal):
        raise ValueError(f"{name}={fn.kind}(...): a RANGE frame with {'an interval' if interval else 'an'} offset "
                         f"orders by {'a date or timestamp' if interval else 'a number, date or timestamp'}, "
                         f"but its order column {order_by[0]!r} is {t}")


def _value_reach(frame) -> tuple:
    """A value-offset frame's bounds as (preceding, following) value offsets: CURRENT ROW
    as a zero of the other bound's kind, None where unbounded."""
    zero = next(b for b in (frame.preceding, frame.following) if value_offset(b)) * 0
    return tuple(None if b is None else b if value_offset(b) else zero for b in (frame.preceding, frame.following))


def _shifted(col: pa.ChunkedArray, offset, sign: int) -> tuple[pa.Array, pa.Array]:
    """The order column and each value moved by ``sign * offset``, as one comparable type:
    integers as decimals (no overflow), dates as timestamps, a number of days by a date."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = col.type
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        if not isinstance(offset, datetime.timedelta):
            offset = datetime.timedelta(days=float(offset))
        unit = t.unit if pa.types.is_timestamp(t) and t.unit == "ns" else "us"
        col = col.cast(pa.timestamp(unit, getattr(t, "tz", None)))
        step = pa.scalar(offset if sign > 0 else -offset, pa.duration(unit))
        return col, pc.add(col, step)
    if pa.types.is_floating(t):
        col = col.cast(pa.float64())
        return col, pc.add(col, pa.scalar(sign * float(offset), pa.float64()))
    if pa.types.is_integer(t):
        col = col.cast(pa.decimal128(20, 0))
    amount = decimal.Decimal(repr(offset)) if isinstance(offset, float) else decimal.Decimal(offset)
    step = pa.scalar(amount if sign > 0 else -amount)
    if col.type.precision > 36:  # room for the sum's digits
        col = col.cast(pa.decimal256(min(col.type.precision + 2, 76), col.type.scale))
        step = step.cast(pa.decimal256(step.type.precision, step.type.scale))
    moved = pc.add(col, step)
    return col.cast(moved.type), moved


def value_positions(groups, col, descending: bool, query_groups, query_col, offset, side: str) -> np.ndarray:
    """For each query row (``query_groups``, ``query_col``), among rows sorted by group then
    ``col`` (in its direction, nulls last, NaN the greatest), the index of the first row
    of its group not before the query's value moved ``offset`` back in that direction
    (``side`` "lo"), or of the last not after it moved ``offset`` on ("hi"): one merge sort
    of the rows and the moved queries. A null or NaN query finds its null or NaN peers."""
    back = side == "lo"
    sign = 1 if back == descending else -1
    values = _shifted(col, 0, 1)[0]
    query = _shifted(query_col, offset, sign)[1].cast(values.type)
    n, q = len(values), len(query)
    g = pa.concat_arrays([_combined(groups).cast(pa.int64()), _combined(query_groups).cast(pa.int64())])
    tag = np.r_[np.ones(n, np.int8), np.zeros(q, np.int8)] if back else np.r_[np.zeros(n, np.int8), np.ones(q, np.int8)]
    merged = pa.table({"g": g, "v": pa.concat_arrays([values, query]), "t": pa.array(tag)})
    o = sql_order(merged, [("g", "ascending"), ("v", "descending" if descending else "ascending"), ("t", "ascending")])
    is_row = o < n
    before = np.cumsum(is_row) - is_row
    out = np.empty(q, np.int64)
    out[o[~is_row] - n] = before[~is_row]
    return out if back else out - 1


def _combined(a) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
