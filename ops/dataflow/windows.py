"""The window functions of ``Collection.window``: ``xs.window("k", "t", n=row_number(),
prev=lag("x"), total=running_sum("x", frame=rows(2)))``.

A pipeline file imports them (``from ops.dataflow.windows import row_number, lag, ...``);
each is a plain :class:`WindowFunction` value, which a SQL front end may also build
directly: ``SUM(x) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT
ROW)`` is ``WindowFunction("sum", "x", frame=Frame("rows", 2))``. The meanings are SQL's,
as DuckDB computes them (ops/dataflow/window_reducer.py evaluates them).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Frame", "WindowFunction", "RANGE", "rows", "row_number", "rank", "dense_rank", "lag", "lead",
           "running_sum", "running_count", "running_avg", "WINDOW_KINDS"]


class Frame(NamedTuple):
    """The rows a running aggregate covers, ending at the current row: ``unit`` ``"rows"``
    (from ``preceding`` rows before it, None: from the partition's first row) or
    ``"range"`` (from the partition's first row to the current row's last peer, the rows
    equal to it in the window's order: SQL's default frame with ORDER BY)."""

    unit: str
    preceding: int | None = None


#: ``RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``, SQL's default with ORDER BY
#: (without an order every row is a peer: the whole partition).
RANGE = Frame("range")


def rows(preceding: int | None = None) -> Frame:
    """``ROWS BETWEEN preceding PRECEDING AND CURRENT ROW`` (None: ``UNBOUNDED PRECEDING``)."""
    return Frame("rows", preceding)


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
        return f"{fn.kind}: the frame is rows(n), rows() or RANGE (ops.dataflow.windows), got {frame!r}"
    if frame.preceding is not None:
        if frame.unit == "range":
            return f"{fn.kind}: a RANGE frame runs from the partition's first row (RANGE n PRECEDING is not supported)"
        if isinstance(frame.preceding, bool) or not isinstance(frame.preceding, int) or frame.preceding < 0:
            return f"{fn.kind}: rows(n) takes an integer n >= 0, got {frame.preceding!r}"
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
