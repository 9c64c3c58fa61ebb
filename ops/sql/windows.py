"""Window functions in a SELECT list: ``f(...) OVER (PARTITION BY ... ORDER BY ... frame)``
as ``Collection.window`` (ops/dataflow/windows.py), one operator per distinct PARTITION BY
and ORDER BY, each adding its functions' columns to every row.

ROW_NUMBER, RANK, DENSE_RANK, LAG and LEAD, and SUM, COUNT and AVG over a ROWS frame
between any bounds (``UNBOUNDED PRECEDING``, ``n PRECEDING``, ``CURRENT ROW``, ``n
FOLLOWING``, ``UNBOUNDED FOLLOWING``) or a RANGE frame between any of ``UNBOUNDED
PRECEDING``, ``n PRECEDING``, ``CURRENT ROW``, ``m FOLLOWING``, ``UNBOUNDED FOLLOWING``,
where an offset is a constant number, or an ``INTERVAL`` of days, hours, minutes or
seconds for a DATE or TIMESTAMP order (one ORDER BY column, as DuckDB asks) (SQL's default frame is
RANGE from UNBOUNDED PRECEDING to the CURRENT ROW with ORDER BY, the whole partition
without). Rows tied in the order
follow their other columns, so ROW_NUMBER is deterministic.
"""

from __future__ import annotations

import datetime
import decimal

from sqlglot import exp

from ops.dataflow import windows as W
from ops.errors import PipelineError
from ops.sql.expressions import spark_sql
from ops.sql.joins import plain_column, with_columns
from ops.sql.scope import Rel, Scope, fresh_name

_RANKS = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
_AGGREGATES = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg"}


def attach_windows(pl, rel: Rel, windows: list[exp.Window], scope: Scope, substitute) -> tuple[Rel, dict[str, str]]:
    """``rel`` with every window function's value in a column; their text -> that column."""
    where = pl.where
    computed: dict[str, str] = {}  # Spark SQL -> column, for partition, order and argument expressions
    extra: dict[str, str] = {}
    taken = set(rel.present())

    def column_of(e: exp.Expression) -> str:
        sql = spark_sql(e, scope, where, substitute)
        plain = plain_column(sql)
        if plain is not None:
            return plain
        if sql not in computed:
            computed[sql] = fresh_name(taken | set(extra), "__wx")
            extra[computed[sql]] = sql
        return computed[sql]

    groups: dict[tuple, dict[str, W.WindowFunction]] = {}
    names: dict[str, str] = {}
    for w in windows:
        text = w.sql()
        if text in names:
            continue
        if w.alias or w.args.get("first") is not None:
            raise PipelineError(where.at(w, "a named window or FIRST/LAST is not supported: write OVER (...)"))
        partition = tuple(column_of(e) for e in (w.args.get("partition_by") or []))
        order = []
        for o in (w.args["order"].expressions if w.args.get("order") else []):
            if o.args.get("nulls_first"):
                raise PipelineError(where.at(o, "NULLS FIRST is not supported (nulls come last, as DuckDB orders them)"))
            order.append((column_of(o.this), "desc" if o.args.get("desc") else "asc"))
        fn = _function(w, column_of, where)
        out = fresh_name(taken | set(extra) | set(names.values()), f"__w{len(names)}")
        names[text] = out
        groups.setdefault((partition, tuple(order)), {})[out] = fn
    rel = with_columns(rel, extra)
    present = rel.present()
    coll = rel.coll
    for (partition, order), functions in groups.items():
        coll = coll.window(list(partition), list(order) or None, **functions)
        present = list(partition) + [c for c in present if c not in partition] + list(functions)
    return Rel(coll, rel.cols, present), names


def _function(w: exp.Window, column_of, where) -> W.WindowFunction:
    f = w.this
    frame = _frame(w, where)
    for kind, name in _RANKS.items():
        if type(f) is kind:
            return W.WindowFunction(name)
    if isinstance(f, (exp.Lag, exp.Lead)):
        offset = f.args.get("offset")
        default = f.args.get("default")
        n = 1
        if offset is not None:
            if not (isinstance(offset, exp.Literal) and not offset.is_string and offset.this.isdigit()):
                raise PipelineError(where.at(offset, "the offset of LAG and LEAD is a whole number"))
            n = int(offset.this)
        value = None
        if default is not None:
            if not isinstance(default, (exp.Literal, exp.Null)) and not (isinstance(default, exp.Neg)
                                                                          and isinstance(default.this, exp.Literal)):
                raise PipelineError(where.at(default, "the default of LAG and LEAD is a constant"))
            value = _constant(default)
        return W.WindowFunction("lag" if isinstance(f, exp.Lag) else "lead", column_of(f.this), n, value)
    for kind, name in _AGGREGATES.items():
        if type(f) is kind:
            arg = f.this
            if isinstance(arg, exp.Distinct):
                raise PipelineError(where.at(f, f"{name}(DISTINCT ...) OVER is not supported"))
            column = None if (arg is None or isinstance(arg, exp.Star)) else column_of(arg)
            return W.WindowFunction(name, column, frame=frame)
    raise PipelineError(where.at(w, f"window function {f.sql(dialect='duckdb')} is not supported (ROW_NUMBER, "
                                    f"RANK, DENSE_RANK, LAG, LEAD, SUM, COUNT and AVG are)"))


def _frame(w: exp.Window, where) -> W.Frame:
    spec = w.args.get("spec")
    if spec is None:
        return W.RANGE
    if spec.args.get("exclude"):
        raise PipelineError(where.at(w, "EXCLUDE in a window frame is not supported"))
    kind = (spec.args.get("kind") or "").lower()
    start, s_rank = _bound(spec.args.get("start"), spec.args.get("start_side"), "preceding", w, where, kind)
    end, e_rank = _bound(spec.args.get("end") or "CURRENT ROW", spec.args.get("end_side"), "following", w, where,
                         kind)
    if s_rank > e_rank or s_rank == 4 or e_rank == 0:
        raise PipelineError(where.at(w, "a window frame must start before it ends (UNBOUNDED PRECEDING, n PRECEDING, "
                                        "CURRENT ROW, n FOLLOWING, UNBOUNDED FOLLOWING)"))
    if kind == "range":
        frame = W.range_frame(start, end)
        if W.value_frame(frame):
            order = w.args["order"].expressions if w.args.get("order") else []
            if len(order) != 1:
                raise PipelineError(where.at(order[-1] if order else w, "a RANGE frame with an offset needs exactly "
                                             f"one ORDER BY column (got {len(order)}): use ROWS, or order by one"))
            why = W.problem(W.WindowFunction("count", frame=frame))
            if why:
                raise PipelineError(where.at(w, "a window frame must start before it ends, and its offsets are "
                                                "both numbers or both INTERVALs"))
        return frame
    if start is not None and end is not None and -start > end:
        raise PipelineError(where.at(w, "a window frame must start before it ends"))
    return W.rows(start, end)


def _bound(value, side, toward: str, w, where, kind: str) -> tuple:
    """A frame bound as rows (ROWS) or a value offset (RANGE: a number or a
    ``datetime.timedelta``) ``toward`` its side of the current row (None: unbounded;
    negative: the other side), and its rank from UNBOUNDED PRECEDING (0) to UNBOUNDED
    FOLLOWING (4)."""
    side = (side or "").lower()
    text = value.upper() if isinstance(value, str) else None
    if text == "CURRENT ROW":
        return 0, 2
    if text == "UNBOUNDED":
        return None, 0 if side == "preceding" else 4
    rank = 1 if side == "preceding" else 3
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit() and side:
        n = int(value.this)
        return (n if side == toward else -n), rank
    if kind != "range" or not side:
        raise PipelineError(where.at(w, "a window frame bound is UNBOUNDED, CURRENT ROW or a whole number of rows "
                                        "PRECEDING or FOLLOWING"))
    offset = _offset(value, w, where)
    return (offset if side == toward else -offset), rank


_UNITS = {"WEEK": "weeks", "DAY": "days", "HOUR": "hours", "MINUTE": "minutes", "SECOND": "seconds"}


def _offset(value, w, where):
    """A RANGE frame's offset: a constant number >= 0 or an INTERVAL of fixed length."""
    if isinstance(value, exp.Literal) and not value.is_string:
        try:
            return decimal.Decimal(value.this)
        except decimal.InvalidOperation:
            pass
    if isinstance(value, exp.Interval) and isinstance(value.this, exp.Literal):
        amount, unit = value.this.this, value.args.get("unit")
        unit = unit.name.upper() if unit is not None else ""
        if not unit and len(amount.split()) == 2:
            amount, unit = amount.split()[0], amount.split()[1].upper()
        unit = unit[:-1] if unit.endswith("S") else unit
        if unit not in _UNITS:
            raise PipelineError(where.at(value.this, "an INTERVAL offset of a RANGE frame is in days, hours, "
                                                     f"minutes or seconds (months and years have no fixed length), "
                                                     f"got {value.sql()}"))
        try:
            number = decimal.Decimal(amount)
        except decimal.InvalidOperation:
            number = None
        if number is not None and number >= 0:
            return datetime.timedelta(**{_UNITS[unit]: float(number)})
    raise PipelineError(where.at(value if isinstance(value, exp.Expression) else w,
                                 "a RANGE frame's offset is a constant number >= 0 or an INTERVAL (a column, an "
                                 "expression or a negative offset is not supported)"))


def _constant(e: exp.Expression):
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Neg):
        return -_constant(e.this)
    if e.is_string:
        return e.this
    text = e.this
    return int(text) if text.lstrip("-").isdigit() else float(text)
