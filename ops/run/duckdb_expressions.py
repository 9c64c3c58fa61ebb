"""A ``select``'s or ``filter``'s Spark SQL expression as DuckDB SQL, when both engines
evaluate it alike.

A run evaluated in the driver (``ops/run/in_driver.py``) computes linear operators in
DuckDB. An expression is translated (by sqlglot) only when every part of it is of a small
grammar whose meaning is the same in Spark (ANSI mode, as the session runs) and DuckDB:
columns, literals, arithmetic ``+ - *``, comparisons, ``AND OR NOT``, ``IS NULL``, ``IN``,
``BETWEEN``, ``CASE``/``IF``, ``COALESCE``, ``ABS``, ``%`` by a literal, ``LIKE`` with a plain pattern,
``SUBSTRING`` from a positive literal, ``EXTRACT`` of a year, month or day, date and
timestamp arithmetic with day, month and year intervals, and casts of numbers, dates and
ISO literals. A division only in the form the SQL front end writes it (both operands cast
to DOUBLE, ``ops/sql/expressions.py``). Casts stay casts: as in Spark's ANSI mode, a value
that does not convert is an error, which leaves the run to Spark and its message. Anything
else (a Spark Column, a function outside the grammar, a cast of text) is None: the run
takes Spark.
"""

from __future__ import annotations

import functools
import re

import pyarrow as pa
import sqlglot
from sqlglot import exp

_PLAIN = (exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.EQ, exp.NEQ, exp.LT,
          exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.And, exp.Or, exp.Not,
          exp.Is, exp.In, exp.Between, exp.Case, exp.If, exp.Coalesce, exp.Abs, exp.DataType, exp.DataTypeParam,
          exp.Sign, exp.Atan2)
_UNITS = {"DAY", "MONTH", "YEAR"}
_CAST_TO = {exp.DataType.Type.DOUBLE, exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGINT, exp.DataType.Type.INT,
            exp.DataType.Type.SMALLINT, exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP,
            exp.DataType.Type.TIMESTAMPNTZ}
_ISO_OR_NUMBER = re.compile(r"^(-?\d+(\.\d+)?|-?Infinity|NaN|\d{4}-\d{2}-\d{2}( \d{2}:\d{2}:\d{2}(\.\d{1,6})?)?)$")


def duckdb_sql(e, schema: pa.Schema) -> str | None:
    """``e`` (a Spark SQL string over the columns of ``schema``) as DuckDB SQL, or None."""
    return _translated(e, schema) if isinstance(e, str) else None


@functools.lru_cache(maxsize=4096)  # a run in the driver translates its pipeline's expressions every time
def _translated(e: str, schema: pa.Schema) -> str | None:
    try:
        tree = sqlglot.parse_one(e, read="spark")
    except sqlglot.errors.SqlglotError:
        return None
    types = {f.name: f.type for f in schema}
    for node in tree.walk():
        if not _portable(node, types):
            return None
    tree = _replace_all(tree, exp.TryCast, lambda c: exp.Cast(this=c.this.copy(), to=c.args["to"].copy()))
    for kind in (exp.Atan2, exp.Sign):  # the arguments first: a sign's copy takes its rewritten atan2
        tree = _replace_all(tree, kind, _as_spark)
    try:
        return tree.sql(dialect="duckdb")
    except sqlglot.errors.SqlglotError:
        return None


def _replace_all(tree: exp.Expression, kind, fn) -> exp.Expression:
    """``tree`` with every node of ``kind`` replaced by ``fn(node)`` (the root too)."""
    for node in list(tree.find_all(kind)):
        if node is tree:
            return fn(node)
        node.replace(fn(node))
    return tree


def _as_spark(node: exp.Expression) -> exp.Expression:
    """Spark's ``atan2`` (its arguments plus 0.0: a negative zero is a zero) and ``sign``
    (a double; NaN for NaN, where DuckDB says 0)."""
    double = exp.DataType.build("DOUBLE")
    if isinstance(node, exp.Atan2):
        return exp.Atan2(**{k: exp.Add(this=exp.Paren(this=node.args[k].copy()), expression=exp.Literal.number("0.0"))
                            for k in ("this", "expression")})
    z = node.this.copy()
    return exp.Case(ifs=[exp.If(this=exp.Anonymous(this="isnan", expressions=[exp.Cast(this=z, to=double)]),
                                true=exp.Cast(this=z.copy(), to=double))],
                    default=exp.Cast(this=exp.Sign(this=z.copy()), to=double))


def _portable(node: exp.Expression, types: dict[str, pa.DataType]) -> bool:
    if isinstance(node, exp.Column):
        return node.name in types and not node.table
    if isinstance(node, exp.Literal):
        return not node.is_string or "\\" not in node.this
    if isinstance(node, exp.Var):
        return node.name.upper() in _UNITS
    if isinstance(node, _PLAIN):
        return True
    if isinstance(node, exp.Interval):
        unit = node.args.get("unit")
        return unit is not None and unit.name.upper() in _UNITS and isinstance(node.this, exp.Literal) \
            and re.fullmatch(r"-?\d+", node.this.this) is not None
    if isinstance(node, exp.Extract):
        return node.this.name.upper() in _UNITS
    if isinstance(node, exp.Like):
        pattern = node.expression
        return isinstance(pattern, exp.Literal) and pattern.is_string and "\\" not in pattern.this \
            and node.args.get("escape") is None
    if isinstance(node, exp.Substring):
        start, length = node.args.get("start"), node.args.get("length")
        return all(a is None or (isinstance(a, exp.Literal) and not a.is_string and int(a.this) > 0)
                   for a in (start, length)) and start is not None
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return node.to.this in _CAST_TO and _castable(node.this, types)
    if isinstance(node, exp.Mod):  # by a literal that is not zero (by zero Spark stops, DuckDB says NULL)
        m = node.expression
        return isinstance(m, exp.Literal) and not m.is_string and float(m.this) != 0
    if isinstance(node, exp.Div):
        return all(isinstance(x, (exp.Cast, exp.TryCast)) and x.to.this == exp.DataType.Type.DOUBLE
                   for x in (node.this, node.expression))
    return False


def _castable(operand: exp.Expression, types: dict[str, pa.DataType]) -> bool:
    """No text is cast (engines read text as numbers or dates differently), except an ISO
    date or timestamp literal, a number's, or an infinity's."""
    if isinstance(operand, exp.Literal) and operand.is_string:
        return _ISO_OR_NUMBER.match(operand.this) is not None
    for c in operand.find_all(exp.Column):
        t = types.get(c.name)
        if t is None or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
            return False
    return all(_ISO_OR_NUMBER.match(x.this) for x in operand.find_all(exp.Literal) if x.is_string)
