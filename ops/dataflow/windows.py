"""The window functions of ``Collection.window``: ``xs.window("k", "t", n=row_number(),
prev=lag("x"), total=running_sum("x", frame=rows(2)))``.

A pipeline file imports them (``from ops.dataflow.windows import row_number, lag, ...``);
each is a plain :class:`WindowFunction` value, which a SQL front end may also build
directly: ``SUM(x) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT
ROW)`` is ``WindowFunction("sum", "x", frame=Frame("rows", 2))``, and ``... ROWS BETWEEN 1
PRECEDING AND UNBOUNDED FOLLOWING`` is ``Frame("rows", 1, None)``. The meanings are SQL's,
as DuckDB computes them (ops/dataflow/window_reducer.py evaluates them).
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import NamedTuple

__all__ = ["Frame", "WindowFunction", "RANGE", "rows", "range_frame", "value_frame", "row_number", "rank",
           "dense_rank", "lag", "lead", "running_sum", "running_count", "running_avg", "WINDOW_KINDS"]


class Frame(NamedTuple):
    """The rows a running aggregate covers around the current row. ``unit`` ``"rows"``:
    from ``preceding`` rows before it to ``following`` rows after it (None: from the
    partition's first row, to its last; a negative number counts the other way, so
    ``preceding=-1`` starts at the next row). ``"range"``: rows count by peers (the rows
    equal to the current row in the window's order): ``preceding`` None starts at the
    partition's first row, 0 at the current row's first peer; ``following`` 0 ends at its
    last peer, None at the partition's last row; another number (an int, float or Decimal,
    or a ``datetime.timedelta`` for a date or timestamp order) is a value offset: the rows
    whose order value is within ``preceding`` before the current row's and ``following``
    after it, in the window's direction (with a descending order, preceding values are
    larger), as ``RANGE BETWEEN n PRECEDING AND m FOLLOWING`` (one order column; a row whose
    order value is null sees its null peers). SQL's default frame with ORDER BY is
    ``Frame("range")``."""

    unit: str
    preceding: int | None = None
    following: int | None = 0

    def identity(self) -> tuple:
        """The fields a pipeline's fingerprint reads (ops/dataflow/fingerprint.py): a frame
        ending at the current row is identified as it was before frames could end after it,
        so that the pipelines already run with one are not reported as edited."""
        return self if self.following != 0 else self[:2]


#: ``RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``, SQL's default with ORDER BY
#: (without an order every row is a peer: the whole partition).
RANGE = Frame("range")


def rows(preceding: int | None = None, following: int | None = 0) -> Frame:
    """``ROWS BETWEEN preceding PRECEDING AND following FOLLOWING`` (None: ``UNBOUNDED``;
    the default ends at the current row)."""
    return Frame("rows", preceding, following)


def range_frame(preceding=None, following=0) -> Frame:
    """``RANGE BETWEEN`` ``UNBOUNDED PRECEDING`` (None), ``CURRENT ROW`` (0) or ``n PRECEDING``
    (a number or ``datetime.timedelta``: a value offset, negative for ``FOLLOWING``) ``AND``
    ``CURRENT ROW`` (0), ``m FOLLOWING`` or ``UNBOUNDED FOLLOWING`` (None)."""
    return Frame("range", preceding, following)


def value_offset(bound) -> bool:
    """Whether a RANGE frame's bound is a value offset (not UNBOUNDED nor CURRENT ROW)."""
    return bound is not None and not (type(bound) is int and bound == 0)


def value_frame(frame: Frame) -> bool:
    """Whether ``frame`` is a RANGE frame with a value offset on either side."""
    return frame.unit == "range" and (value_offset(frame.preceding) or value_offset(frame.following))


def _offset_problem(frame: Frame) -> str | None:
    """What is wrong with a RANGE frame's value offsets (None: nothing)."""
    kinds = set()
    for bound in (frame.preceding, frame.following):
        if bound is None or (type(bound) is int and bound == 0):
            continue
        if isinstance(bound, datetime.timedelta):
            kinds.add("interval")
        elif isinstance(bound, (int, float, decimal.Decimal)) and not isinstance(bound, bool):
            if not math.isfinite(bound):
                return f"a RANGE offset is a finite number, got {frame!r}"
            kinds.add("number")
        else:
            return f"a RANGE frame's bounds are None, 0, numbers or datetime.timedelta, got {frame!r}"
    if len(kinds) > 1:
        return f"a RANGE frame's offsets are both numbers or both intervals, got {frame!r}"
    p, f = frame.preceding, frame.following
    if p is not None and f is not None:
        zero = datetime.timedelta(0) if "interval" in kinds else 0
        if -(p or zero) > (f or zero):
            return f"the frame starts after it ends, got {frame!r}"
    return None


class WindowFunction(NamedTuple):
    """One output column of a window: ``kind`` (one of :data:`WINDOW_KINDS`) over ``column``
    (``lag``/``lead``/``sum``/``avg`` need one; ``count`` without one counts rows), with
    ``lag``/``lead``'s ``offset`` and ``default`` and a running aggregate's ``frame``."""

    kind: str
    column: str | None = None
    offset: int = 1
    default: object = None
    frame: Frame = RANGE


WINDOW_KINDS = ("row_number", "rank", "dense_rank", "lag", "lead", "sum", "count", "avg")


def problem(fn) -> str | None:
    """What is wrong with ``fn`` as a window function, in a few words (None: nothing)."""
    if not isinstance(fn, WindowFunction) or fn.kind not in WINDOW_KINDS:
        return f"must be one of {', '.join(k + '(...)' for k in ('row_number', 'rank', 'dense_rank', 'lag', 'lead'))}, " \
               f"running_sum(...), running_count(...) or running_avg(...) (ops.dataflow.windows), got {fn!r}"
    if fn.column is not None and not (isinstance(fn.column, str) and fn.column):
        return f"{fn.kind}: the column is a column name (a string), got {fn.column!r}"
    if fn.column is None and fn.kind in ("lag", "lead", "sum", "avg"):
        return f"{fn.kind} needs a column"
    if fn.kind in ("lag", "lead") and (isinstance(fn.offset, bool) or not isinstance(fn.offset, int) or fn.offset < 0):
        return f"{fn.kind}: the offset is an integer >= 0, got {fn.offset!r}"
    frame = fn.frame
    if not isinstance(frame, Frame) or frame.unit not in ("rows", "range"):
        return f"{fn.kind}: the frame is rows(n, m), range_frame(...) or RANGE (ops.dataflow.windows), got {frame!r}"
    if frame.unit == "range":
        why = _offset_problem(frame)
        return None if why is None else f"{fn.kind}: {why}"
    for bound in (frame.preceding, frame.following):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
            return f"{fn.kind}: rows(preceding, following) takes integers or None, got {frame!r}"
    if frame.preceding is not None and frame.following is not None and -frame.preceding > frame.following:
        return f"{fn.kind}: the frame starts after it ends, got {frame!r}"
    return None


def row_number() -> WindowFunction:
    """``ROW_NUMBER()``: 1, 2, ... in the window's order; rows tied in it are numbered in
    the order of their other columns (ascending), so the numbering is deterministic."""
    return WindowFunction("row_number")


def rank() -> WindowFunction:
    """``RANK()``: 1 + the number of rows before the current row's peers (gaps after ties)."""
    return WindowFunction("rank")


def dense_rank() -> WindowFunction:
    """``DENSE_RANK()``: 1 + the number of distinct orders before the current row's (no gaps)."""
    return WindowFunction("dense_rank")


def lag(column: str, offset: int = 1, default=None) -> WindowFunction:
    """``LAG(column, offset, default)``: ``column`` of the row ``offset`` rows before in the
    partition (in the order row_number gives), ``default`` where there is none."""
    return WindowFunction("lag", column, offset, default)


def lead(column: str, offset: int = 1, default=None) -> WindowFunction:
    """``LEAD(column, offset, default)``: ``column`` of the row ``offset`` rows after."""
    return WindowFunction("lead", column, offset, default)


def running_sum(column: str, frame: Frame = RANGE) -> WindowFunction:
    """``SUM(column)`` over ``frame``: of the non-null values (NULL if none), exact for
    doubles and decimals (the type of ``sum``)."""
    return WindowFunction("sum", column, frame=frame)


def running_count(column: str | None = None, frame: Frame = RANGE) -> WindowFunction:
    """``COUNT(*)`` (no column) or ``COUNT(column)`` (its non-null values) over ``frame``."""
    return WindowFunction("count", column, frame=frame)


def running_avg(column: str, frame: Frame = RANGE) -> WindowFunction:
    """``AVG(column)`` over ``frame``: a double, NULL when the frame has no non-null value."""
    return WindowFunction("avg", column, frame=frame)
