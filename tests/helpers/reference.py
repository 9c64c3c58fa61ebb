"""A plain-Python reference for pipelines: every operator evaluated from scratch at one time.

Nothing here imports ``ops`` or ``storage``: a collection is a :class:`Coll` — column names
and a dict ``row tuple -> multiplicity`` (zeros dropped) — and each operator is the textbook
definition, written with loops and dictionaries. Tests build the collection of each input at
a time ``t`` from the raw updates *they generated* (:func:`accumulate`), evaluate the same
graph they declared in the pipeline file with these functions, and compare with the output
trace accumulated at ``t``.

Reduce semantics (docs/architecture.md): for every key whose accumulated input is non-empty (some
value row with a non-zero multiplicity), the output at ``t`` is ``f`` of that input.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import functools
import itertools
import math
from collections import Counter, defaultdict
from typing import Callable, Iterable, Sequence

Row = tuple
Time = tuple


# ------------------------------------------------------------------ times


def leq(s: Time, t: Time) -> bool:
    """The product order: every coordinate of ``s`` at most that of ``t``."""
    return all(a <= b for a, b in zip(s, t))


def box(times: Iterable[Time], extra: int = 2) -> list[Time]:
    """Every time of the box from 0 to ``extra`` past the largest coordinate seen."""
    times = list(times)
    d = len(times[0])
    hi = [max(t[i] for t in times) + extra for i in range(d)]
    return list(itertools.product(*[range(0, h + 1) for h in hi]))


# ------------------------------------------------------------------ collections


class Coll:
    """A collection at one time: column names and non-zero multiplicities per row."""

    def __init__(self, columns: Sequence[str], rows: dict | None = None):
        self.columns = tuple(columns)
        self.rows: Counter = Counter()
        for r, m in (rows or {}).items():
            self.add(r, m)

    def add(self, row: Row, m: int) -> None:
        row = tuple(row)
        assert len(row) == len(self.columns), (row, self.columns)
        v = self.rows.get(row, 0) + m
        if v:
            self.rows[row] = v
        else:
            self.rows.pop(row, None)

    def dicts(self):
        for r, m in self.rows.items():
            yield dict(zip(self.columns, r)), m

    def project(self, columns: Sequence[str]) -> dict:
        """Rows re-ordered to ``columns`` (which must be the same set)."""
        assert sorted(columns) == sorted(self.columns), (columns, self.columns)
        idx = [self.columns.index(c) for c in columns]
        return {tuple(r[i] for i in idx): m for r, m in self.rows.items()}

    def __eq__(self, other) -> bool:
        return isinstance(other, Coll) and sorted(self.columns) == sorted(other.columns) \
            and self.project(self.columns) == other.project(self.columns)

    def __repr__(self) -> str:
        return f"Coll({self.columns}, {dict(sorted(self.rows.items(), key=repr))})"


def accumulate(updates: Iterable[tuple[Row, Time, int]], columns: Sequence[str], t: Time) -> Coll:
    """The collection at ``t``: diffs of every update at a time ``<= t``, summed per row."""
    out = Coll(columns)
    for row, s, diff in updates:
        if leq(tuple(s), tuple(t)):
            out.add(row, diff)
    return out


def _key(d: dict, cols: Sequence[str]) -> tuple:
    return tuple(d[c] for c in cols)


# ------------------------------------------------------------------ linear operators


def select(c: Coll, *columns: str, **exprs: Callable[[dict], object]) -> Coll:
    """``select("a", b=lambda r: ...)``: kept columns first, then computed ones."""
    out = Coll(list(columns) + list(exprs))
    for r, m in c.dicts():
        out.add([r[x] for x in columns] + [f(r) for f in exprs.values()], m)
    return out


def filter_(c: Coll, pred: Callable[[dict], bool]) -> Coll:
    out = Coll(c.columns)
    for r, m in c.dicts():
        if pred(r):
            out.add(_key(r, c.columns), m)
    return out


def flat_map(c: Coll, column: str, fn: Callable[[dict], list], keep: Sequence[str] | None = None) -> Coll:
    keep = [x for x in c.columns if x != column] if keep is None else list(keep)
    out = Coll(keep + [column])
    for r, m in c.dicts():
        for x in fn(r):
            out.add(_key(r, keep) + (x,), m)
    return out


def concat(*cs: Coll) -> Coll:
    out = Coll(cs[0].columns)
    for c in cs:
        for row, m in c.project(out.columns).items():
            out.add(row, m)
    return out


def negate(c: Coll) -> Coll:
    return Coll(c.columns, {r: -m for r, m in c.rows.items()})


def consolidate(c: Coll) -> Coll:
    return Coll(c.columns, dict(c.rows))


def arrange(c: Coll, by) -> Coll:
    return c


# ------------------------------------------------------------------ join family


def _cols(v) -> list[str]:
    return [v] if isinstance(v, str) else list(v)


def _matches(ra: dict, rb: dict, on: list[str], nulls_equal: bool) -> bool:
    """SQL's equality of keys: a null equals nothing, unless ``nulls_equal``."""
    if not nulls_equal and any(ra[k] is None or rb[k] is None for k in on):
        return False
    return _key(ra, on) == _key(rb, on)


def join(a: Coll, b: Coll, on, nulls_equal: bool = False) -> Coll:
    """Pairs with equal keys; multiplicities multiply. Left columns, then the right's others."""
    on = _cols(on)
    rest = [x for x in b.columns if x not in on]
    out = Coll(list(a.columns) + rest)
    for ra, ma in a.dicts():
        for rb, mb in b.dicts():
            if _matches(ra, rb, on, nulls_equal):
                out.add(_key(ra, a.columns) + _key(rb, rest), ma * mb)
    return out


def semijoin(a: Coll, b: Coll, on, nulls_equal: bool = False) -> Coll:
    """Rows of ``a`` times the total multiplicity of the rows of ``b`` with their key."""
    on = _cols(on)
    weight: Counter = Counter()
    for rb, mb in b.dicts():
        weight[_key(rb, on)] += mb
    out = Coll(a.columns)
    for ra, ma in a.dicts():
        if nulls_equal or all(ra[k] is not None for k in on):
            out.add(_key(ra, a.columns), ma * weight.get(_key(ra, on), 0))
    return out


def antijoin(a: Coll, b: Coll, on, nulls_equal: bool = False) -> Coll:
    """``a`` less its semijoin: a row whose key is null stays (SQL's NOT EXISTS)."""
    return concat(a, negate(semijoin(a, b, on, nulls_equal)))


# ------------------------------------------------------------------ reduce family


def reduce(c: Coll, by, f: Callable[[dict, list[str]], dict], out_columns: Sequence[str]) -> Coll:
    """Per key with a non-empty input: ``f({value row: count}, value columns)`` gives
    ``{output row: multiplicity}``; the output rows are the key followed by those."""
    by = _cols(by)
    values = [x for x in c.columns if x not in by]
    groups: dict = defaultdict(dict)
    for r, m in c.dicts():
        groups[_key(r, by)][_key(r, values)] = m
    out = Coll(by + list(out_columns))
    for k, vals in groups.items():
        for orow, m in f(vals, values).items():
            out.add(k + tuple(orow), m)
    return out


def count(c: Coll, by, name: str = "count") -> Coll:
    return reduce(c, by, lambda vals, _: {(sum(vals.values()),): 1}, [name])


def sum_(c: Coll, by, column: str, name: str = "sum") -> Coll:
    def f(vals, values):
        i = values.index(column)
        return {(sum((v[i] or 0) * m for v, m in vals.items()),): 1}
    return reduce(c, by, f, [name])


def _extreme(c, by, column, name, pick):
    def f(vals, values):
        i = values.index(column)
        present = [v[i] for v, m in vals.items() if m > 0]
        values_ = [x for x in present if x is not None]  # nulls only when every row present is null
        return ({(pick(values_),): 1} if values_ else {(None,): 1}) if present else {}
    return reduce(c, by, f, [name])


def min_(c: Coll, by, column: str, name: str = "min") -> Coll:
    """Least value among rows present (multiplicity > 0)."""
    return _extreme(c, by, column, name, min)


def max_(c: Coll, by, column: str, name: str = "max") -> Coll:
    return _extreme(c, by, column, name, max)


def count_distinct(c: Coll, by, name: str = "distinct") -> Coll:
    """How many distinct value rows are present (multiplicity > 0); nothing if none."""
    def f(vals, _):
        n = sum(1 for m in vals.values() if m > 0)
        return {(n,): 1} if n else {}
    return reduce(c, by, f, [name])


def distinct(c: Coll) -> Coll:
    return Coll(c.columns, {r: 1 for r, m in c.rows.items() if m > 0})


def threshold(c: Coll, fn: Callable[[int], int]) -> Coll:
    """Every row with multiplicity ``fn(count)``."""
    return Coll(c.columns, {r: int(fn(m)) for r, m in c.rows.items()})


def top_k(c: Coll, by, k: int, order_by, descending=False) -> Coll:
    """Per key the first ``k`` records counting multiplicities, in ``order_by`` order
    (columns, or ``(column, "asc" | "desc")``; ``descending``: a bool, or one per column)
    as SQL orders values: nulls last either way, NaN the greatest number; ties broken by
    the other value columns ascending; rows with multiplicity <= 0 are not records.
    ``by=[]``: the whole collection."""
    items = [order_by] if isinstance(order_by, str) else list(order_by)
    flags = list(descending) if isinstance(descending, (list, tuple)) else [descending] * len(items)
    order = [(i[0], i[1] == "desc") if isinstance(i, tuple) else (i, f) for i, f in zip(items, flags)]
    order_cols = [col for col, _ in order]

    def sort_key(value, desc):
        return functools.cmp_to_key(lambda a, b: _sql_compare(a, b, desc))(value)

    def f(vals, values):
        rest = [x for x in values if x not in order_cols]
        rows = [(dict(zip(values, v)), v, m) for v, m in vals.items() if m > 0]
        rows.sort(key=lambda x: tuple(sort_key(x[0][col], False) for col in rest))  # stable: least significant first
        for col, desc in reversed(order):
            rows.sort(key=lambda x: sort_key(x[0][col], desc))
        out, left = {}, k
        for _, v, m in rows:
            if left <= 0:
                break
            out[v] = min(m, left)
            left -= out[v]
        return out

    by_ = _cols(by)
    return reduce(c, by, f, [x for x in c.columns if x not in by_])


def agg(c: Coll, by, **aggregates: tuple) -> Coll:
    """Several aggregates per key, one row per key with a non-empty input: each
    ``name=(kind, column)`` with SQL's null rules -- ``count`` (column None: every row's
    multiplicity; else rows whose column is not null), ``sum`` (NULL without a non-null
    value), ``avg`` (sum / count(column), NULL when that count is 0), ``min``/``max`` and
    ``count_distinct`` (non-null values of rows with multiplicity > 0)."""
    def f(vals, values):
        row = []
        for kind, col in aggregates.values():
            rows = [(v[values.index(col)] if col else 1, m) for v, m in vals.items()]
            rows = [(x, m) for x, m in rows if x is not None]
            present = [x for x, m in rows if m > 0]
            n = sum(m for _, m in rows)
            total = sum(x * m for x, m in rows) if rows and kind in ("sum", "avg") else None
            value = {"count": lambda: n, "sum": lambda: total, "avg": lambda: None if n == 0 else total / n,
                     "min": lambda: min(present) if present else None,
                     "max": lambda: max(present) if present else None,
                     "count_distinct": lambda: len(set(present))}[kind]
            row.append(value())
        return {tuple(row): 1}
    return reduce(c, by, f, list(aggregates))


def reduce_per_key(c: Coll, by, fn: Callable[[list[tuple[dict, int]]], dict], out_columns) -> Coll:
    """User logic: ``fn([(value row as dict, count), ...])`` -> ``{output row: multiplicity}``."""
    def f(vals, values):
        return fn([(dict(zip(values, v)), m) for v, m in vals.items()])
    return reduce(c, by, f, out_columns)


# ------------------------------------------------------------------ SQL value semantics
#
# What DuckDB does with values (checked with DuckDB 2.0, tests/types/test_type_matrix.py):
# a null key matches nothing in a join, semijoin or antijoin (an antijoin keeps the rows with
# a null key); GROUP BY and DISTINCT put nulls in one group, NaN in one group (NaN = NaN) and
# -0.0 with 0.0; ORDER BY puts NaN after every other number and nulls last whether ascending
# or descending; min and max leave nulls out (null when all are null), max of a group with
# NaN is NaN; sum and avg leave nulls out (null when all are null), sum of DECIMAL(p, s) is
# exact, avg is a double. Timestamps with a zone are instants: equal when the instants are.


class SqlFloat(float):
    """A double as SQL compares it: NaN equals NaN and sorts after every other number
    (-0.0 already equals 0.0 and hashes alike)."""

    def __eq__(self, other):
        if isinstance(other, float) and math.isnan(self) and math.isnan(other):
            return True
        return float.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash("NaN") if math.isnan(self) else float.__hash__(self)

    def __lt__(self, other):
        if math.isnan(self):
            return False
        return math.isnan(other) or float.__lt__(self, other)

    def __gt__(self, other):
        if math.isnan(other):
            return False
        return math.isnan(self) or float.__gt__(self, other)

    def __le__(self, other):
        return not self.__gt__(other)

    def __ge__(self, other):
        return not self.__lt__(other)

    def __repr__(self):
        return float.__repr__(self)


def canonical(v):
    """A value as SQL groups and compares it: doubles as :class:`SqlFloat`, timestamps with
    a zone as UTC instants (Python compares two times of one zone by wall clock, which
    makes the two 02:30 of a night that turns the clocks back equal)."""
    if isinstance(v, float):
        return SqlFloat(v)
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone(datetime.timezone.utc)
    return v


def canonical_coll(c: Coll) -> Coll:
    """The same collection with every value :func:`canonical` (rows SQL finds equal merge)."""
    out = Coll(c.columns)
    for r, m in c.rows.items():
        out.add(tuple(canonical(v) for v in r), m)
    return out


def sql_order(values: list, descending: bool = False) -> list:
    """``values`` in ORDER BY order: nulls last in both directions, NaN the greatest number."""
    present = sorted((canonical(v) for v in values if v is not None), reverse=descending)
    return present + [v for v in values if v is None]


def _without_null_keys(c: Coll, on) -> Coll:
    return filter_(c, lambda r: all(r[x] is not None for x in _cols(on)))


def join_sql(a: Coll, b: Coll, on) -> Coll:
    """:func:`join` where a null key equals nothing."""
    return join(_without_null_keys(a, on), _without_null_keys(b, on), on)


def semijoin_sql(a: Coll, b: Coll, on) -> Coll:
    """:func:`semijoin` where a null key equals nothing: rows with a null key are dropped."""
    return semijoin(_without_null_keys(a, on), _without_null_keys(b, on), on)


def antijoin_sql(a: Coll, b: Coll, on) -> Coll:
    """``a`` minus :func:`semijoin_sql`: rows with a null key stay."""
    return concat(a, negate(semijoin_sql(a, b, on)))


def as_of_join_sql(left_updates, left_columns: Sequence[str], right_at: Callable[[Time], Coll], on, t: Time) -> Coll:
    """Every update ``(row, s, diff)`` of the left side at ``s <= t``, joined (null keys
    match nothing) with the right side as it was at ``s``: later changes of the right
    side never change a past result."""
    out = None
    for row, s, diff in left_updates:
        if not leq(tuple(s), tuple(t)):
            continue
        one = join_sql(Coll(left_columns, {tuple(row): diff}), right_at(tuple(s)), on)
        out = one if out is None else concat(out, one)
    if out is None:
        right = right_at(tuple(t))
        out = Coll(list(left_columns) + [x for x in right.columns if x not in _cols(on)])
    return out


def _non_null(vals: dict, i: int) -> list[tuple]:
    return [(v[i], m) for v, m in vals.items() if v[i] is not None]


def _special(floats: list[tuple]):
    """The sum of doubles when a NaN or an infinity decides it (None when none does)."""
    if any(math.isnan(v) for v, _ in floats):
        return math.nan
    signs = {math.copysign(1, v) * m > 0 for v, m in floats if math.isinf(v)}
    if signs:
        return math.nan if len(signs) == 2 else (math.inf if True in signs else -math.inf)
    return None


def _to_float(x: fractions.Fraction) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.copysign(math.inf, x)


def exact_sum(pairs: list[tuple]):
    """The exact sum of ``value * multiplicity``: an int for integers, a Decimal for
    decimals, the double nearest the exact sum for doubles (NaN with a NaN or with both
    infinities, an infinity with one); None when there is no value (SQL's sum of nulls)."""
    if not pairs:
        return None
    if all(isinstance(v, int) and not isinstance(v, bool) for v, _ in pairs):
        return sum(v * m for v, m in pairs)
    if all(isinstance(v, decimal.Decimal) for v, _ in pairs):
        with decimal.localcontext() as ctx:
            ctx.prec = 200
            return sum((v * m for v, m in pairs), decimal.Decimal(0))
    floats = [(float(v), m) for v, m in pairs]
    special = _special(floats)
    return special if special is not None else _to_float(sum(fractions.Fraction(v) * m for v, m in floats))


def sum_exact(c: Coll, by, column: str, name: str = "sum") -> Coll:
    """Per key: :func:`exact_sum` of ``column`` over the rows whose value is not null."""
    def f(vals, values):
        return {(exact_sum(_non_null(vals, values.index(column))),): 1}
    return reduce(c, by, f, [name])


def exact_mean(pairs: list[tuple]):
    """The double nearest the exact mean of ``value * multiplicity`` over the total
    multiplicity (NaN or an infinity as :func:`exact_sum` says); None when there is no value."""
    n = sum(m for _, m in pairs)
    if not pairs or n == 0:
        return None
    special = _special([(float(v), m) for v, m in pairs])
    return special if special is not None else _to_float(sum(fractions.Fraction(v) * m for v, m in pairs) / n)


def avg_exact(c: Coll, by, column: str, name: str = "avg") -> Coll:
    """Per key: :func:`exact_mean` of ``column`` over the rows whose value is not null."""
    def f(vals, values):
        return {(exact_mean(_non_null(vals, values.index(column))),): 1}
    return reduce(c, by, f, [name])


def _extreme_sql(c, by, column, name, last):
    def f(vals, values):
        i = values.index(column)
        present = [v[i] for v, m in vals.items() if m > 0]
        if not present:
            return {}
        ordered = sql_order([x for x in present if x is not None])
        return {((ordered[-1] if last else ordered[0]) if ordered else None,): 1}
    return reduce(c, by, f, [name])


def min_sql(c: Coll, by, column: str, name: str = "min") -> Coll:
    """Least non-null value among the rows present (NaN is the greatest number); null when
    every value is null."""
    return _extreme_sql(c, by, column, name, last=False)


def max_sql(c: Coll, by, column: str, name: str = "max") -> Coll:
    """Greatest non-null value among the rows present (NaN when there is one)."""
    return _extreme_sql(c, by, column, name, last=True)


def _sql_compare(a, b, descending: bool) -> int:
    if a is None or b is None:
        return (a is None) - (b is None)  # nulls last in both directions
    a, b = canonical(a), canonical(b)
    if a == b:
        return 0
    less = a < b
    return (1 if less else -1) if descending else (-1 if less else 1)


def iterate(c: Coll, body: Callable[[Coll], Coll], max_rounds: int = 1000) -> Coll:
    """The fixed point of ``body`` starting from ``c``."""
    x = c
    for _ in range(max_rounds):
        nxt = body(x)
        if nxt == x:
            return x
        x = nxt
    raise AssertionError("the reference loop did not reach a fixed point")


def close(expected, found, rel: float = 1e-12) -> bool:
    """Numbers equal within ``rel`` of the larger (exactly when not finite; NaN equals NaN)."""
    if expected is None or found is None:
        return expected is None and found is None
    e, f = float(expected), float(found)
    if not (math.isfinite(e) and math.isfinite(f)):
        return canonical(e) == canonical(f)
    return abs(e - f) <= rel * max(abs(e), abs(f))


def approx_difference(expected: Coll, found: Coll, approx: Sequence[str], limit: int = 4) -> str:
    """'' when the collections agree: exactly on every column but ``approx``, and within
    :func:`close` on those (rows matched by their other columns, then by value order);
    otherwise the rows on which they disagree."""
    expected, found = canonical_coll(expected), canonical_coll(found)
    if sorted(expected.columns) != sorted(found.columns):
        return f"columns differ: expected {expected.columns}, found {found.columns}"
    cols = list(expected.columns)
    exact = [x for x in cols if x not in approx]

    def groups(c: Coll) -> dict:
        out = defaultdict(list)
        for r, m in c.project(cols).items():
            d = dict(zip(cols, r))
            out[tuple(d[x] for x in exact)].append((tuple(d[x] for x in approx), m))
        return out

    def ordered(items):
        return sorted(items, key=lambda x: functools.cmp_to_key(_approx_compare)(x[0]))

    e, f = groups(expected), groups(found)
    bad = []
    for k in sorted(set(e) | set(f), key=repr):
        a, b = ordered(e.get(k, [])), ordered(f.get(k, []))
        same = len(a) == len(b) and all(ma == mb and all(close(x, y) for x, y in zip(va, vb))
                                        for (va, ma), (vb, mb) in zip(a, b))
        if not same:
            bad.append(f"{dict(zip(exact, k))}: expected {_show_approx(approx, a)}, found {_show_approx(approx, b)}")
    shown = "; ".join(bad[:limit])
    return shown + (f" (+{len(bad) - limit} more)" if len(bad) > limit else "")


def _approx_compare(a: tuple, b: tuple) -> int:
    for x, y in zip(a, b):
        c = _sql_compare(x, y, False)
        if c:
            return c
    return 0


def _show_approx(names, items) -> str:
    return "{" + ", ".join(f"{dict(zip(names, v))}: {m}" for v, m in items) + "}" if items else "nothing"


# ------------------------------------------------------------------ comparing with a trace


def fold_updates(rows: Iterable[dict], columns: Sequence[str], tcols: Sequence[str], t: Time) -> Coll:
    """An output trace's updates (dicts with data, time and diff columns) accumulated at ``t``."""
    return accumulate(((_key(r, columns), _key(r, tcols), r["diff"]) for r in rows), columns, t)


def consolidated(rows: Iterable[dict], columns: Sequence[str], tcols: Sequence[str]) -> dict:
    """``{(data row, time): diff}`` with equal (data, time) summed and zeros dropped."""
    acc: Counter = Counter()
    for r in rows:
        acc[(_key(r, columns), _key(r, tcols))] += r["diff"]
    return {k: v for k, v in acc.items() if v}


def describe_difference(expected: Coll, found: Coll, limit: int = 4) -> str:
    """The rows on which two collections disagree (for assertion messages)."""
    if sorted(expected.columns) != sorted(found.columns):
        return f"columns differ: expected {expected.columns}, found {found.columns}"
    e, f = expected.project(expected.columns), found.project(expected.columns)
    bad = [(r, e.get(r, 0), f.get(r, 0)) for r in sorted(set(e) | set(f), key=repr) if e.get(r, 0) != f.get(r, 0)]
    shown = "; ".join(f"{dict(zip(expected.columns, r))}: expected {x}, found {y}" for r, x, y in bad[:limit])
    return shown + (f" (+{len(bad) - limit} more)" if len(bad) > limit else "")
