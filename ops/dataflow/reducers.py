"""The built-in reducers: ``f`` applied to many groups' accumulated inputs at once.

The kernels decide where ``f`` must be evaluated (``ops.reduce.kernel``); a reducer only
maps rows ``_group`` + value columns + ``_count`` to ``_group`` + output columns +
``_count``. The one-dimensional sweeps (``ops.reduce.sweep``) recognise the built-in
families by class and never call ``__call__``; user reducers and ``d >= 2`` use it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops import exact_sum
from ops.columnar import COUNT, GROUP, empty_table, groups_of, np_int, row_ids, seg_cumsum_, sql_order

class Reducer:
    """``f`` for many groups at once: rows ``_group`` + value columns + ``_count`` in,
    ``_group`` + output columns + ``_count`` out. Input counts are non-zero and each
    value row appears at most once per group."""

    def output_schema(self, values_schema: pa.Schema) -> pa.Schema:
        """The output columns (without ``_group``/``_count``), known before Spark runs."""
        raise NotImplementedError

    def __call__(self, rows: pa.Table) -> pa.Table:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


def _out(groups, columns: dict, counts=None) -> pa.Table:
    n = len(groups)
    cnt = np.ones(n, np.int64) if counts is None else counts
    return pa.table({GROUP: pa.array(groups, pa.int64()), **columns, COUNT: pa.array(cnt, pa.int64())})


def _check_col(values_schema: pa.Schema, col: str) -> pa.Field:
    if col not in values_schema.names:
        raise ValueError(f"column {col!r} is not a value column (value columns: {values_schema.names})")
    return values_schema.field(col)


def _positive(rows: pa.Table) -> pa.Table:
    return rows.filter(pc.greater(rows.column(COUNT), 0))


class Count(Reducer):
    """DD ``count``: total multiplicity of a key's accumulated input, one row per key."""

    def __init__(self, name: str = "count"):
        self.name = name

    def output_schema(self, values_schema):
        return pa.schema([pa.field(self.name, pa.int64())])

    def __call__(self, rows):
        ug, inv = groups_of(rows)
        s = np.zeros(len(ug), np.int64)
        np.add.at(s, inv, np_int(rows.column(COUNT)))
        return _out(ug, {self.name: pa.array(s, pa.int64())})


class CountDistinct(Reducer):
    """Number of distinct value rows present (count > 0); ``Count`` of ``Distinct``, so
    groups with no positive row produce nothing."""

    def __init__(self, name: str = "distinct"):
        self.name = name

    def output_schema(self, values_schema):
        return pa.schema([pa.field(self.name, pa.int64())])

    def __call__(self, rows):
        ug, inv = groups_of(_positive(rows))
        return _out(ug, {self.name: pa.array(np.bincount(inv, minlength=len(ug)), pa.int64())})


class Sum(Reducer):
    """``sum(col * count)``: int64 for integer columns, float64 for floats, decimal(38, s)
    for decimals; nulls add 0. Doubles and decimals are summed exactly and rounded once
    (ops/exact_sum.py), so the same multiset gives the same value in any order."""

    def __init__(self, col: str, name: str | None = None):
        self.col, self.name = col, name or "sum"

    def output_schema(self, values_schema):
        t = _check_col(values_schema, self.col).type
        out = exact_sum.sum_type(t)
        if out is None:
            raise TypeError(f"Sum({self.col!r}): column type {t} is not numeric")
        return pa.schema([pa.field(self.name, out)])

    def out_type(self, values_schema: pa.Schema) -> pa.DataType:
        return self.output_schema(values_schema).field(self.name).type

    def __call__(self, rows):
        out_t = self.out_type(rows.schema)
        w = exact_sum.weights(rows.column(self.col), out_t, np_int(rows.column(COUNT)))
        ug, inv = groups_of(rows)
        s = np.zeros(len(ug), w.dtype)
        np.add.at(s, inv, w)
        return _out(ug, {self.name: exact_sum.values(s, out_t)})


class _Extreme(Reducer):
    _order = "ascending"
    _default = ""

    def __init__(self, col: str, name: str | None = None):
        self.col, self.name = col, name or self._default

    def output_schema(self, values_schema):
        return pa.schema([pa.field(self.name, _check_col(values_schema, self.col).type)])

    def __call__(self, rows):
        rows = _positive(rows)
        rows = rows.take(pa.array(sql_order(rows, [(GROUP, "ascending"), (self.col, self._order)])))
        g = np_int(rows.column(GROUP))
        first = np.ones(len(g), bool)
        first[1:] = g[1:] != g[:-1]
        idx = pa.array(np.flatnonzero(first))
        return _out(g[first], {self.name: rows.column(self.col).take(idx)})


class Min(_Extreme):
    """Least value of ``col`` among rows present (count > 0); nulls only if all are null."""

    _order, _default = "ascending", "min"


class Max(_Extreme):
    """Greatest value of ``col`` among rows present (count > 0); nulls only if all are null."""

    _order, _default = "descending", "max"


class Distinct(Reducer):
    """Each value row present (count > 0), once."""

    def output_schema(self, values_schema):
        return values_schema

    def __call__(self, rows):
        rows = _positive(rows)
        return rows.set_column(rows.schema.get_field_index(COUNT), COUNT, pa.array(np.ones(rows.num_rows, np.int64)))


def presence(counts: np.ndarray) -> np.ndarray:
    """``distinct``'s multiplicity: 1 for a row present (a positive count), else 0. The
    kernels know it by identity and compute it without a call (ops/reduce/presence.py)."""
    return (np.asarray(counts) > 0).astype(np.int64)


class Threshold(Reducer):
    """Each value row with multiplicity ``fn(count)``; ``fn`` maps an int64 array to an array."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray]):
        self.fn = fn

    def output_schema(self, values_schema):
        return values_schema

    def __call__(self, rows):
        m = np.asarray(self.fn(np_int(rows.column(COUNT)))).astype(np.int64).reshape(-1)
        rows = rows.set_column(rows.schema.get_field_index(COUNT), COUNT, pa.array(m, pa.int64()))
        return rows.filter(pa.array(m != 0))


class TopK(Reducer):
    """The first ``k`` records (with multiplicity) per key in ``order_by`` order, then the
    remaining value columns ascending as tie-break; rows with count <= 0 are ignored.

    ``order_by`` items are a column (ascending, or descending with ``descending=True``) or
    ``(column, "asc" | "desc")``; ``descending`` may also be one bool per column. Nulls
    come last in either direction. ``directions`` holds ``"ascending"``/``"descending"``
    per order column."""

    def __init__(self, k: int, order_by: list, descending=False):
        if k < 0:
            raise ValueError("TopK: k must be >= 0")
        self.k = int(k)
        self.order_by, self.directions = sort_directions(order_by, descending)

    def output_schema(self, values_schema):
        for c in self.order_by:
            _check_col(values_schema, c)
        return values_schema

    def __call__(self, rows):
        rest = [c for c in rows.column_names if c not in (GROUP, COUNT) and c not in self.order_by]
        rows = _positive(rows)
        rows = rows.take(pa.array(sql_order(
            rows, [(GROUP, "ascending")] + list(zip(self.order_by, self.directions)) + [(c, "ascending") for c in rest])))
        g = np_int(rows.column(GROUP))
        c = np_int(rows.column(COUNT))
        start = np.ones(len(g), bool)
        start[1:] = g[1:] != g[:-1]
        idx = np.flatnonzero(start)
        before = c.copy()
        seg_cumsum_(before, idx, np.diff(np.append(idx, len(c))))
        before -= c
        m = np.minimum(c, np.maximum(self.k - before, 0))
        rows = rows.set_column(rows.schema.get_field_index(COUNT), COUNT, pa.array(m, pa.int64()))
        return rows.filter(pa.array(m > 0))


_DIRECTIONS = {"asc": "ascending", "ascending": "ascending", "desc": "descending", "descending": "descending"}


def sort_directions(order_by, descending=False) -> tuple[list[str], list[str]]:
    """``order_by`` (a column, or a list of columns and ``(column, "asc" | "desc")`` pairs)
    and ``descending`` (a bool for the plain columns, or one bool per column) as the
    order columns and their directions; a malformed one is a ``ValueError`` of one line."""
    pair = isinstance(order_by, tuple) and len(order_by) == 2 and str(order_by[1]).lower() in _DIRECTIONS
    items = [order_by] if isinstance(order_by, str) or pair else list(order_by)
    if not items:
        raise ValueError("order_by: give at least one column")
    flags = list(descending) if isinstance(descending, (list, tuple)) else [descending] * len(items)
    if len(flags) != len(items) or not all(isinstance(f, (bool, np.bool_)) for f in flags):
        raise ValueError(f"descending must be a bool or one bool per order_by column, got {descending!r}")
    cols, dirs = [], []
    for item, flag in zip(items, flags):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and \
                str(item[1]).lower() in _DIRECTIONS:
            if isinstance(descending, (list, tuple)):
                raise ValueError(f"order_by {item!r} names its direction: leave descending out")
            cols.append(item[0])
            dirs.append(_DIRECTIONS[str(item[1]).lower()])
        elif isinstance(item, str) and item:
            cols.append(item)
            dirs.append("descending" if flag else "ascending")
        else:
            raise ValueError(f"order_by items are a column or (column, 'asc' | 'desc'), got {item!r}")
    if len(set(cols)) != len(cols):
        raise ValueError(f"order_by names a column twice: {cols}")
    return cols, dirs


class Aggregate(NamedTuple):
    """One component of :class:`Agg`: ``kind`` (``count``, ``sum``, ``avg``, ``min``,
    ``max``, ``count_distinct``) over ``column`` (None: ``count()`` of rows)."""

    kind: str
    column: str | None = None


AGGREGATE_KINDS = ("count", "sum", "avg", "min", "max", "count_distinct")


class Agg(Reducer):
    """Several aggregates of a key's rows in one reduce: one output row per key with a
    non-empty input, one column per component, with SQL's null rules:

    * ``count()``: the rows (total multiplicity); ``count(col)``: those whose ``col`` is
      not null (0 when none is);
    * ``sum(col)``: as :class:`Sum` over the rows whose ``col`` is not null; NULL when
      none is;
    * ``avg(col)``: that sum divided by ``count(col)``, a double (as DuckDB's ``avg``,
      also of decimals); NULL when ``count(col)`` is 0;
    * ``min(col)``/``max(col)``: over the rows present (count > 0) whose ``col`` is not
      null; NULL when none is;
    * ``count_distinct(col)``: the distinct non-null values of ``col`` among the rows
      present (0 when none is).

    A key whose rows cancel out (multiplicities summing to 0 or less) still has a row:
    ``count()`` says so, the other components are what the rules give.

    ``when_empty=True`` (only over no key, ``reduce([], ...)``: SQL's aggregate without
    GROUP BY) gives the one key a row at every time, also while the input is empty: the
    :meth:`empty_row` (counts 0, the rest NULL). The run adds it where the reduce has no
    row (ops/run/evaluate.py: ``_when_empty``), not the reducer, which only sees keys with
    rows."""

    when_empty = False

    def __init__(self, components: dict, when_empty: bool = False):
        if not components:
            raise ValueError("agg: give at least one aggregate, e.g. n=count()")
        for name, a in components.items():
            if not isinstance(a, Aggregate) or a.kind not in AGGREGATE_KINDS:
                raise ValueError(f"agg: {name}= must be one of {', '.join(k + '(...)' for k in AGGREGATE_KINDS)}, "
                                 f"got {a!r}")
            if a.column is None and a.kind != "count":
                raise ValueError(f"agg: {name}={a.kind}() needs a column")
        self.components = dict(components)
        if when_empty:  # an instance attribute only when set: other pipelines' fingerprints stay
            self.when_empty = True

    def empty_row(self) -> dict:
        """Each component's value over no rows: 0 for counts, NULL for the rest (as SQL)."""
        return {name: 0 if kind in ("count", "count_distinct") else None for name, (kind, _) in self.components.items()}

    def output_schema(self, values_schema):
        fields = []
        for name, (kind, col) in self.components.items():
            t = None if col is None else _check_col(values_schema, col).type
            if kind in ("count", "count_distinct"):
                t = pa.int64()
            elif kind == "sum":
                t = Sum(col, name).output_schema(values_schema).field(name).type
            elif kind == "avg":
                Sum(col, name).output_schema(values_schema)  # numeric, or one line saying not
                t = pa.float64()
            fields.append(pa.field(name, t))
        return pa.schema(fields)

    def __call__(self, rows):
        ug, _ = groups_of(rows)
        schema = self.output_schema(pa.schema([f for f in rows.schema if f.name not in (GROUP, COUNT)]))
        cols = {f.name: self._component(rows, ug, f.name, f.type) for f in schema}
        return _out(ug, cols)

    def _component(self, rows: pa.Table, ug: np.ndarray, name: str, out_t: pa.DataType) -> pa.Array:
        """One component's value for every group ``ug`` of ``rows``."""
        kind, col = self.components[name]
        if col is not None:
            rows = rows.filter(pc.is_valid(rows.column(col)))
        if kind == "count":
            return _aligned(ug, Count(name)(rows), name, fill=0)
        if kind == "sum":
            return _aligned(ug, Sum(col, name)(rows), name)
        if kind == "avg":
            return _aligned(ug, _mean(rows, col, name), name)
        if kind in ("min", "max"):
            return _aligned(ug, (Min if kind == "min" else Max)(col, name)(rows), name).cast(out_t)
        return _aligned(ug, _distinct_values(rows, col, name), name, fill=0)


def _mean(rows: pa.Table, col: str, name: str) -> pa.Table:
    """Per group of ``rows`` (whose ``col`` is not null): the exact mean of ``col``
    rounded once to a double (ops/exact_sum.py), so a large int64 or a sum of doubles of
    mixed magnitudes loses nothing before the division; null where the counts cancel."""
    sum_t = exact_sum.sum_type(rows.schema.field(col).type)
    counts = np_int(rows.column(COUNT))
    w = exact_sum.weights(rows.column(col), sum_t, counts, wide=True)
    ug, inv = groups_of(rows)
    total, n = np.zeros(len(ug), object), np.zeros(len(ug), np.int64)
    np.add.at(total, inv, w)
    np.add.at(n, inv, counts)
    return _out(ug, {name: exact_sum.means(total, n, sum_t)})


def _distinct_values(rows: pa.Table, col: str, name: str) -> pa.Table:
    """Per group: how many distinct values of ``col`` its rows present hold, as SQL tells
    values apart (-0.0 is 0.0, a NaN is every NaN: ``row_ids``)."""
    present = _positive(rows)
    ids, _ = row_ids(present, [GROUP, col])
    _, first = np.unique(ids, return_index=True)
    groups, n = np.unique(np_int(present.column(GROUP))[first], return_counts=True)
    return _out(groups, {name: pa.array(n, pa.int64())})


def _aligned(ug: np.ndarray, part: pa.Table, name: str, fill=None) -> pa.Array:
    """Column ``name`` of a reducer's output ``part`` for every group of ``ug`` (``fill``,
    or null, where ``part`` has no row for it)."""
    idx = pc.index_in(pa.array(ug, pa.int64()), value_set=part.column(GROUP))
    out = part.column(name).combine_chunks().take(idx) if part.num_rows else \
        pa.nulls(len(ug), part.schema.field(name).type)
    return out if fill is None else pc.fill_null(out, pa.scalar(fill, out.type))


def _in_row_order(rows: pa.Table) -> pa.Table:
    """Rows by group, then by their values: a user's function sees a key's rows in the
    same order however its history was stored, so a sum of doubles it computes is the
    same when a later run recomputes (and retracts) an output it wrote."""
    keys = [(GROUP, "ascending")] + [(c, "ascending") for c in rows.column_names if c != GROUP]
    try:
        return rows.sort_by(keys)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):  # unsortable values
        return rows.take(pa.array(np.argsort(np_int(rows.column(GROUP)), kind="stable")))


class PerKey(Reducer):
    """User-defined ``fn(rows) -> rows`` on one group's value rows plus ``_count``.

    The escape hatch: it loops in Python once per (key, grid point) group, so prefer the
    vectorised reducers. The output may carry ``_count`` (default 1). Without ``schema``,
    the output schema is inferred by calling ``fn`` on an empty table.
    """

    def __init__(self, fn: Callable[[pa.Table], pa.Table], schema: pa.Schema | None = None):
        self.fn, self.schema = fn, schema

    def __str__(self) -> str:  # how an error names it: the user's function, not its address
        return f"reduce_per_key({getattr(self.fn, '__name__', 'fn')})"

    def output_schema(self, values_schema):
        if self.schema is not None:
            return pa.schema(self.schema)
        probe = empty_table(pa.schema(list(values_schema) + [pa.field(COUNT, pa.int64())]))
        try:
            res = self.fn(probe)
        except Exception as e:  # noqa: BLE001 - tell the user how to avoid the probe
            raise ValueError(f"PerKey: could not infer the output schema ({e}); pass schema=") from e
        return pa.schema([f for f in res.schema if f.name != COUNT])

    def __call__(self, rows):
        schema = self.output_schema(pa.schema([f for f in rows.schema if f.name not in (GROUP, COUNT)]))
        rows = _in_row_order(rows)
        g = np_int(rows.column(GROUP))
        bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1], True]) if len(g) else np.zeros(1, np.int64)
        body = rows.drop_columns([GROUP])
        parts = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            res = self.fn(body.slice(a, b - a))
            cnt = (
                np_int(res.column(COUNT)) if COUNT in res.column_names else np.ones(res.num_rows, np.int64)
            )
            cols = {f.name: res.column(f.name).cast(f.type) for f in schema}
            parts.append(_out(np.full(res.num_rows, g[a], np.int64), cols, cnt))
        if not parts:
            return _out(np.zeros(0, np.int64), {f.name: pa.array([], f.type) for f in schema}, np.zeros(0, np.int64))
        out = pa.concat_tables(parts)
        return out.filter(pc.not_equal(out.column(COUNT), 0))
