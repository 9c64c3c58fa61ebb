"""The cells of the matrix: each operator family as an output over a type's inputs ``xs``
and ``ys``, and what the cell must give: its reference, the columns compared within a
tolerance, the Arrow types of its columns."""

from __future__ import annotations

from typing import Callable

import pyarrow as pa

from ops.dataflow.builder import Collection
from tests.helpers import reference as R
from tests.helpers.type_matrix.columns import TYPES, ColumnType

# ------------------------------------------------------------------ the cells

# every operator family, as the expression of an output over ``xs`` and ``ys`` ("{y}": the
# map's computed columns, "{where}": the filter's condition)
OPERATORS = {
    # map, filter, concat, negate and consolidate: xs mapped and filtered, minus ys mapped
    "linear": 'xs.filter({where!r}).select("c", "id", {y}).concat(ys.select("c", "id", {y}).negate()).consolidate()',
    "join": 'xs.join(ys.select("c", y="id"), on="c")',
    "semijoin": 'xs.semijoin(ys.select("c"), on="c")',
    "antijoin": 'xs.antijoin(ys.select("c"), on="c")',
    "as_of_join": 'xs.as_of_join(ys.select("c", y="id"), on="c")',
    # the as-of join written with moment time: differentiate, moments, integrate
    "differentiate_integrate": 'xs.differentiate().join(ys.select("c", y="id").moments(), on="c").integrate()',
    "delta_join": 'p.delta_join([(xs.select("c", "id"), "c", "x"), (ys, "c", "y")])',
    "distinct": 'xs.select("c").distinct()',
    "count": 'xs.count(by="c")',
    "count_distinct": 'xs.select("g", "c").count_distinct(by="g")',
    "sum": 'xs.sum(by="g", column="c")',
    "avg": 'xs.avg(by="g", column="c")',
    "min": 'xs.min(by="g", column="c")',
    "max": 'xs.max(by="g", column="c")',
    "top_k": 'xs.top_k(by="g", k=2, order_by="c")',
    "top_k_desc": 'xs.top_k(by="g", k=2, order_by="c", descending=True)',
    "iterate": 'xs.select("c", "g").iterate(lambda x: x.concat(x.filter("g < 2").select("c", g="g + 1")).distinct())',
    "agg": 'xs.agg("g", {aggregates})',
}
ONE_D = {"as_of_join", "differentiate_integrate"}  # moment time needs times of one coordinate
NUMERIC_ONLY = {"sum", "avg"}
AGG_READY = hasattr(Collection, "agg")  # Collection.agg (several aggregates in one reduce) exists


def operators(t: ColumnType, d: int, *, agg: bool = AGG_READY) -> list[str]:
    return [op for op in OPERATORS if (d == 1 or op not in ONE_D) and (t.numeric or op not in NUMERIC_ONLY)
            and (agg or op != "agg")]


def _aggregates(t: ColumnType) -> str:
    """The aggregates of the ``agg`` cell (ops/dataflow/aggregates.py)."""
    out = {"n": "count()", "nc": 'count("c")', "lo": 'min("c")', "hi": 'max("c")', "nd": 'count_distinct("c")'}
    if t.numeric:
        out.update(total='sum("c")', mean='avg("c")')
    return ", ".join(f"{k}=A.{v}" for k, v in out.items())


def output_name(t: str, op: str) -> str:
    return f"{t}__{op}"


def cell_source(t: ColumnType, op: str) -> str:
    y = ", ".join(f"{k}={v!r}" for k, v in t.map_exprs.items())
    return OPERATORS[op].format(y=y, where=t.filter_expr, aggregates=_aggregates(t))


def pipeline_source(cells: list[tuple[str, str]]) -> tuple[str, dict[int, tuple[str, str]]]:
    """The pipeline file of ``cells`` (one output each), and the line that declares each."""
    lines = ["def pipeline(p):"]
    if any(op == "agg" for _, op in cells):
        lines.insert(0, "from ops.dataflow import aggregates as A")
    at = {}
    for t in sorted({t for t, _ in cells}):
        lines += [f'    xs, ys = p.input("xs_{t}"), p.input("ys_{t}")']
        for cell in [c for c in cells if c[0] == t]:
            lines.append(f"    p.output({output_name(*cell)!r}, {cell_source(TYPES[t], cell[1])})")
            at[len(lines)] = cell
    return "\n".join(lines) + "\n", at


# ------------------------------------------------------------------ what each cell should be


def expected(t: ColumnType, op: str, ins: dict, at: Callable, time) -> R.Coll:
    """The reference of cell ``(t, op)`` at ``time``: ``ins`` holds the inputs accumulated at
    ``time`` (values :func:`R.canonical`), ``at(name, s)`` an input at any time ``s``."""
    xs, ys = ins["xs"], ins["ys"]
    if op == "linear":
        mapped = R.select(R.filter_(xs, t.filter_ref), "c", "id", **t.map_refs)
        return R.consolidate(R.concat(mapped, R.negate(R.select(ys, "c", "id", **t.map_refs))))
    if op == "join":
        return R.join_sql(xs, R.select(ys, "c", y=lambda r: r["id"]), "c")
    if op == "semijoin":
        return R.semijoin_sql(xs, R.select(ys, "c"), "c")
    if op == "antijoin":
        return R.antijoin_sql(xs, R.select(ys, "c"), "c")
    if op in ("as_of_join", "differentiate_integrate"):
        return R.as_of_join_sql(at("xs_updates", None), xs.columns,
                                lambda s: R.select(at("ys", s), "c", y=lambda r: r["id"]), "c", time)
    if op == "delta_join":
        return R.join_sql(R.select(xs, "c", x=lambda r: r["id"]), R.select(ys, "c", y=lambda r: r["id"]), "c")
    if op == "distinct":
        return R.distinct(R.select(xs, "c"))
    if op == "count":
        return R.count(xs, "c")
    if op == "count_distinct":
        return R.count_distinct(R.select(xs, "g", "c"), "g")
    if op == "sum":  # the Python API's sum: nulls add 0, so a group of nulls sums to 0 (agg's sum is SQL's NULL)
        return _nulls_as_zero(R.sum_exact(xs, "g", "c"), "sum", t)
    if op == "avg":
        return R.avg_exact(xs, "g", "c")
    if op in ("min", "max"):
        return (R.min_sql if op == "min" else R.max_sql)(xs, "g", "c")
    if op in ("top_k", "top_k_desc"):
        return R.top_k(xs, "g", 2, "c", descending=op == "top_k_desc")
    if op == "iterate":
        def step(x):
            up = R.select(R.filter_(x, lambda r: r["g"] is not None and r["g"] < 2), "c", g=lambda r: r["g"] + 1)
            return R.distinct(R.concat(x, up))
        return R.iterate(R.select(xs, "c", "g"), step)
    if op == "agg":
        return agg_reference(t, xs)
    raise KeyError(op)


def _nulls_as_zero(c: R.Coll, column: str, t: ColumnType) -> R.Coll:
    """``c`` with a null in ``column`` (a group without values) as the zero of the sum's type."""
    import decimal
    zero = 0.0 if t.floating else decimal.Decimal(0) if pa.types.is_decimal(t.arrow) else 0
    i = c.columns.index(column)
    out = R.Coll(c.columns)
    for row, m in c.rows.items():
        out.add(tuple(R.canonical(zero) if j == i and v is None else v for j, v in enumerate(row)), m)
    return out


def agg_reference(t: ColumnType, xs: R.Coll) -> R.Coll:
    """The ``agg`` cell: SQL's aggregates of ``c`` per ``g`` (``count()`` counts every row,
    ``count_distinct`` the distinct non-null values)."""
    def f(vals, values):
        i = values.index("c")
        known = [(v[i], m) for v, m in vals.items() if v[i] is not None]
        ordered = R.sql_order([v for v, _ in known])
        row = [sum(vals.values()), sum(m for _, m in known), ordered[0] if known else None,
               ordered[-1] if known else None, len({R.canonical(v) for v, _ in known})]
        if t.numeric:
            row += [R.exact_sum(known), R.exact_mean(known)]
        return {tuple(row): 1}
    return R.reduce(xs, "g", f, list(_AGG_NAMES) + (["total", "mean"] if t.numeric else []))


_AGG_NAMES = ("n", "nc", "lo", "hi", "nd")


def approximate_columns(t: ColumnType, op: str) -> list[str]:
    """Columns compared within 1e-12 relative: a mean, and a sum of doubles (the exact sum
    rounded once is the reference; a sum in the order of arrival is not order-free)."""
    if op == "avg":
        return ["avg"]
    if op == "sum" and t.floating:
        return ["sum"]
    if op == "agg" and t.numeric:
        return ["mean", "total"] if t.floating else ["mean"]
    return []


def expected_types(t: ColumnType, op: str) -> dict[str, pa.DataType]:
    """The Arrow types a cell's output must keep or give (DuckDB's, but an int64 sum stays
    int64 where DuckDB widens to HUGEINT)."""
    if op == "sum":
        if pa.types.is_decimal(t.arrow):
            return {"sum": pa.decimal128(38, t.arrow.scale)}
        return {"sum": pa.float64() if t.floating else pa.int64()}
    if op == "avg":
        return {"avg": pa.float64()}
    if op in ("count", "count_distinct"):
        return {"c": t.arrow} if op == "count" else {"g": pa.int64(), "distinct": pa.int64()}
    if op in ("min", "max"):
        return {op: t.arrow}
    if op == "agg":
        out = {"n": pa.int64(), "nc": pa.int64(), "lo": t.arrow, "hi": t.arrow, "nd": pa.int64()}
        if t.numeric:
            out.update(total=expected_types(t, "sum")["sum"], mean=pa.float64())
        return out
    return {"c": t.arrow}
