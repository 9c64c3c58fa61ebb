"""Window functions in a SELECT list: ``f(...) OVER (PARTITION BY ... ORDER BY ... frame)``
as ``Collection.window`` (ops/dataflow/windows.py), one operator per distinct PARTITION BY
and ORDER BY, each adding its functions' columns to every row.

ROW_NUMBER, RANK, DENSE_RANK, LAG and LEAD, and SUM, COUNT and AVG over a frame that ends at
the current row (``ROWS n PRECEDING``, ``ROWS`` or ``RANGE UNBOUNDED PRECEDING``; SQL's
default frame is RANGE with ORDER BY, the whole partition without). Rows tied in the order
follow their other columns, so ROW_NUMBER is deterministic.
"""

from __future__ import annotations

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
    kind = (spec.args.get("kind") or "").lower()
    start, side = spec.args.get("start"), (spec.args.get("start_side") or "").lower()
    end = spec.args.get("end")
    end_text = end.upper() if isinstance(end, str) else (end.sql().upper() if end is not None else "CURRENT ROW")
    if end_text != "CURRENT ROW" or side not in ("preceding", ""):
        raise PipelineError(where.at(w, "a window frame must end at the CURRENT ROW and start before it"))
    unbounded = isinstance(start, str) and start.upper() == "UNBOUNDED"
    if kind == "range":
        if not unbounded:
            raise PipelineError(where.at(w, "RANGE frames run from UNBOUNDED PRECEDING"))
        return W.RANGE
    if unbounded:
        return W.rows(None)
    if isinstance(start, exp.Literal) and not start.is_string and start.this.isdigit():
        return W.rows(int(start.this))
    if isinstance(start, str) and start.upper() == "CURRENT ROW":
        return W.rows(0)
    raise PipelineError(where.at(w, "ROWS frames start UNBOUNDED PRECEDING or n PRECEDING"))


def _constant(e: exp.Expression):
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Neg):
        return -_constant(e.this)
    if e.is_string:
        return e.this
    text = e.this
    return int(text) if text.lstrip("-").isdigit() else float(text)
