"""An SQL expression written in Spark's dialect over a collection's columns.

Each column reference is resolved in the query's scope (ops/sql/scope.py) and written as
the collection's column; sqlglot writes the rest (CASE, LIKE, IN lists, BETWEEN, EXTRACT,
CAST, date +/- INTERVAL, string functions) as Spark SQL, which a ``select`` or ``filter``
evaluates. Functions whose value changes from one evaluation to the next cannot be
maintained (a retraction would not cancel what was written) and are refused.
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from ops.errors import PipelineError
from ops.sql.scope import Scope

INTERNAL = "ddcli_internal"  # marks a column reference that already names a collection column

# functions whose value is not a function of the row: a later run could not retract it
_VOLATILE = (exp.Rand, exp.CurrentDate, exp.CurrentTimestamp, exp.CurrentTime, exp.Uuid)
_VOLATILE_NAMES = {"random", "rand", "now", "uuid", "gen_random_uuid", "today", "current_date",
                   "current_timestamp", "current_time", "localtime", "localtimestamp", "nextval", "setseed"}


def internal_column(name: str) -> exp.Column:
    """A reference to the collection column ``name`` (left as it is by :func:`resolved`)."""
    col = exp.column(name, quoted=True)
    col.meta[INTERNAL] = True
    return col


def is_volatile(node: exp.Expression) -> bool:
    if isinstance(node, _VOLATILE):
        return True
    return isinstance(node, exp.Anonymous) and str(node.this).lower() in _VOLATILE_NAMES


def resolved(e: exp.Expression, scope: Scope, where, substitute: Callable | None = None,
             aggregates: bool = False) -> exp.Expression:
    """A copy of ``e`` whose columns name collection columns; ``substitute(node)`` may give
    a collection column for a whole subtree (an aggregate, a group key, a subquery).
    ``aggregates``: aggregate calls may stand in ``e`` (to compare them, not to run them)."""
    for node in e.walk():  # on the file's own tree, where a keyword finds its expression's place
        if is_volatile(node):
            raise PipelineError(where.at(node, f"{node.sql(dialect='duckdb')} cannot be maintained: its value "
                                               f"changes each time it is evaluated, so a later run could not retract it"))

    def rewrite(node):
        if substitute is not None:
            name = substitute(node)
            if name is not None:
                return internal_column(name)
        if isinstance(node, exp.Interval) and isinstance(node.args.get("unit"), exp.Func):
            # INTERVAL '90' DAY (3), the standard's precision of the leading field (TPC-H's Q1 as
            # specified): the precision does not change the value, and Spark does not parse it
            return exp.Interval(this=node.this.copy(), unit=exp.var(node.args["unit"].sql_name()))
        if isinstance(node, exp.Column):
            if node.meta.get(INTERNAL):
                return node
            if isinstance(node.this, exp.Star):
                raise PipelineError(where.at(node, f"{node.sql()} is allowed only as a whole select item"))
            col = scope.resolve(node)
            return internal_column(col.internal)
        if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.In) and node.args.get("query")):
            raise PipelineError(where.at(node, "a subquery is supported in WHERE and HAVING conditions joined by AND, "
                                               "and as a value in SELECT, not here"))
        if isinstance(node, exp.AggFunc) and not aggregates:
            raise PipelineError(where.at(node, f"aggregate {node.sql(dialect='duckdb')} is not allowed here"))
        if isinstance(node, exp.Window):
            raise PipelineError(where.at(node, "a window function is allowed only in the SELECT list"))
        return node
    out = e.transform(rewrite)
    for shift in [n for n in out.find_all(exp.Add, exp.Sub) if _interval_operand(n) is not None]:
        moved = _interval_operand(shift)
        moved.replace(exp.Cast(this=moved.copy(), to=exp.DataType.build("TIMESTAMP_NTZ", dialect="spark")))
    for div in reversed(list(out.find_all(exp.Div, bfs=False))):  # the innermost first
        if div is out:
            return _double_division(div)
        div.replace(_double_division(div))
    return out


def _interval_operand(node: exp.Expression) -> exp.Expression | None:
    """In ``x + INTERVAL …`` or ``x - INTERVAL …``, the ``x``: made a TIMESTAMP, as DuckDB
    makes a DATE shifted by an interval (Spark would keep a DATE)."""
    this, other = node.this, node.expression
    if isinstance(other, exp.Interval) and not isinstance(this, exp.Interval):
        return this
    if isinstance(this, exp.Interval) and not isinstance(other, exp.Interval) and isinstance(node, exp.Add):
        return other
    return None


def _double_division(node: exp.Div) -> exp.Expression:
    """``a / b`` as DuckDB computes it: a DOUBLE whatever the operands' types (Spark divides
    two decimals into a decimal of a few places; integers already give a double), and by
    zero as IEEE 754 divides (an infinity of the signs' product, NaN for 0/0) where Spark's
    ANSI mode stops the run. ``atan2(b, -1)`` is pi or -pi: the sign of a zero ``b``."""
    a = exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE"))
    b = exp.Cast(this=node.expression, to=exp.DataType.build("DOUBLE"))
    infinity = exp.Cast(this=exp.Literal.string("Infinity"), to=exp.DataType.build("DOUBLE"))
    signed = exp.Mul(this=infinity, expression=exp.Anonymous(
        this="SIGN", expressions=[exp.Anonymous(this="ATAN2", expressions=[b.copy(), exp.Literal.number(-1)])]))
    return exp.Case(ifs=[exp.If(this=exp.EQ(this=b.copy(), expression=exp.Literal.number(0)),
                                true=exp.Mul(this=a.copy(), expression=exp.Paren(this=signed)))],
                    default=exp.Div(this=a, expression=b))


def spark_sql(e: exp.Expression, scope: Scope, where, substitute: Callable | None = None) -> str:
    """``e`` as a Spark SQL expression over the collection's columns."""
    return resolved(e, scope, where, substitute).sql(dialect="spark")


def expression_key(e: exp.Expression, scope: Scope, where) -> str | None:
    """A text equal for two expressions that compute the same thing in ``scope`` (columns
    resolved), to match a SELECT item with a GROUP BY expression; None if ``e`` does not
    resolve there."""
    try:
        return resolved(e, scope, where, aggregates=True).sql(dialect="spark")
    except PipelineError:
        return None
    except Exception:  # a correlated column: not an expression of this scope
        return None


def substituting(kind, names: dict[str, str], substitute: Callable | None):
    """``substitute`` extended: a node of class ``kind`` (a subquery, a window) whose text is
    in ``names`` reads that column."""
    def sub(node):
        if isinstance(node, kind) and node.sql() in names:
            return names[node.sql()]
        return substitute(node) if substitute is not None else None
    return sub


def equality_pairs(conds, first, second) -> tuple[list, list]:
    """``conds`` split into (x, y) pairs of equalities ``x = y`` (either way round) where
    ``first(x)`` and ``second(y)`` hold, and the other conditions."""
    pairs, rest = [], []
    for c in conds:
        if isinstance(c, exp.EQ):
            a, b = c.this, c.expression
            if first(a) and second(b):
                pairs.append((a, b))
                continue
            if first(b) and second(a):
                pairs.append((b, a))
                continue
        rest.append(c)
    return pairs, rest


def conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    """The conditions of ``e`` that AND joins (parentheses removed). A condition that every
    branch of an OR holds is taken out of it (``(k = j AND a) OR (k = j AND b)`` is
    ``k = j AND (a OR b)``), so that it may be a join key or filter one side early."""
    if e is None:
        return []
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    if isinstance(e, exp.Or):
        return _factored(e)
    return [e]


def _disjuncts(e: exp.Expression) -> list[exp.Expression]:
    while isinstance(e, exp.Paren):
        e = e.this
    return _disjuncts(e.this) + _disjuncts(e.expression) if isinstance(e, exp.Or) else [e]


def _same(a: exp.Expression, b: exp.Expression) -> bool:
    """The same condition (an equality either way round)."""
    return a == b or (isinstance(a, exp.EQ) and isinstance(b, exp.EQ) and a.this == b.expression
                      and a.expression == b.this)


def _factored(e: exp.Or) -> list[exp.Expression]:
    branches = [conjuncts(d) for d in _disjuncts(e)]
    common = [c for c in branches[0] if all(any(_same(c, d) for d in b) for b in branches[1:])]
    if not common:
        return [e]
    rests = [[c for c in b if not any(_same(c, x) for x in common)] for b in branches]
    if any(not r for r in rests):  # a branch holds nothing more: the OR is true once the common part is
        return common
    ors = [exp.and_(*[c.copy() for c in r]) if len(r) > 1 else r[0].copy() for r in rests]
    rest = ors[0]
    for o in ors[1:]:
        rest = exp.Or(this=rest, expression=o)
    return common + [exp.Paren(this=rest)]


def output_name(e: exp.Expression, i: int) -> str:
    """The name SQL gives a SELECT item: its alias, its column's name, or one made of its
    text (letters, digits and _), as ``sum_l_quantity`` for ``sum(l_quantity)``."""
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    text = "".join(ch if ch.isalnum() else "_" for ch in e.sql(dialect="duckdb").lower())
    text = "_".join(part for part in text.split("_") if part)
    return text[:60] or f"column{i}"
