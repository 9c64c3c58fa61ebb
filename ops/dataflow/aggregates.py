"""The aggregates of ``Collection.agg``: ``xs.agg("k", n=count(), total=sum("x"))``.

A pipeline file imports them (``from ops.dataflow.aggregates import count, sum, avg``, or
the module as ``A``); each is a plain :class:`~ops.dataflow.reducers.Aggregate` that
:class:`~ops.dataflow.reducers.Agg` evaluates, with SQL's null rules (its docstring). The
names shadow Python's ``sum``, ``min`` and ``max`` only where they are imported.
"""

from __future__ import annotations

from ops.dataflow.reducers import Aggregate

__all__ = ["count", "sum", "avg", "mean", "min", "max", "count_distinct", "Aggregate"]


def _column(kind: str, column) -> str:
    if isinstance(column, str) and column:
        return column
    raise ValueError(f"{kind}(...) takes a column name (a string), got {column!r}")


def count(column: str | None = None) -> Aggregate:
    """``count()``: the rows; ``count(col)``: the rows whose ``col`` is not null."""
    return Aggregate("count", None if column is None else _column("count", column))


def sum(column: str) -> Aggregate:  # noqa: A001 - SQL's name
    """The sum of ``column`` (times multiplicity) over its non-null values; NULL if none."""
    return Aggregate("sum", _column("sum", column))


def avg(column: str) -> Aggregate:
    """The mean of ``column`` over its non-null values, a double; NULL if none."""
    return Aggregate("avg", _column("avg", column))


mean = avg


def min(column: str) -> Aggregate:  # noqa: A001 - SQL's name
    """The least non-null value of ``column`` among the rows present; NULL if none."""
    return Aggregate("min", _column("min", column))


def max(column: str) -> Aggregate:  # noqa: A001 - SQL's name
    """The greatest non-null value of ``column`` among the rows present; NULL if none."""
    return Aggregate("max", _column("max", column))


def count_distinct(column: str) -> Aggregate:
    """The number of distinct non-null values of ``column`` among the rows present."""
    return Aggregate("count_distinct", _column("count_distinct", column))
