"""Joins of planned relations: inner joins on equal expressions (a FROM list and its WHERE,
or JOIN ... ON), cross joins, and LEFT, RIGHT and FULL outer joins.

ddcli's ``join`` pairs rows whose key columns are equal and named alike on both sides, so
each side first gets its key: when one side's key is a plain column, the other side's key
takes its name (a column renamed, or an expression computed into it); two expressions both
become a new column. The right side's other columns are first renamed apart from the left's.
An outer join is the inner join plus the rows of the preserved side that found no partner,
padded with nulls: ``antijoin`` on the keys when the ON condition is only equalities (a null
key matches nothing, as in SQL), else the rows absent from the matched rows' projection.
"""

from __future__ import annotations

from sqlglot import exp

from ops.sql.expressions import spark_sql
from ops.sql.scope import Col, Rel, Scope, fresh_name
from storage.state.trace import RESERVED_COLUMNS


def plain_column(sql: str) -> str | None:
    """The column a Spark SQL key names, when it is one column and nothing else."""
    return sql[1:-1] if len(sql) > 2 and sql[0] == sql[-1] == "`" and sql.count("`") == 2 else None


def project(rel: Rel, columns: dict[str, str], cols: list[Col]) -> Rel:
    """``rel``'s collection as the columns ``columns`` (name -> Spark SQL), addressed by
    ``cols``; no operator when that is already what it holds."""
    if list(columns) == rel.present() and all(v == f"`{k}`" for k, v in columns.items()):
        return Rel(rel.coll, cols, list(columns))
    return Rel(rel.coll.select(**columns), cols, list(columns))


def with_columns(rel: Rel, exprs: dict[str, str]) -> Rel:
    """``rel`` with new columns (name -> Spark SQL) after its own; SQL columns unchanged."""
    if not exprs:
        return rel
    keep = {c: f"`{c}`" for c in rel.present() if c not in exprs}
    return Rel(rel.coll.select(**keep, **exprs), list(rel.cols), list(keep) + list(exprs))


def keyed_pair(left: Rel, right: Rel, pairs, where, *, side: str = "inner") -> tuple[Rel, Rel, list[str]]:
    """``left`` and ``right`` each with its keys in columns of one name, and the right
    side's other columns renamed apart from the left's (one ``select`` a side at most).
    In an inner join a key column may hold both sides' SQL columns (they are equal there);
    an outer join keeps them apart (one may be null), and a key column may be a plain column
    only of the side whose every row is in the result (LEFT: the left's; RIGHT: the right's)."""
    share = side == "inner"
    lscope, rscope = Scope(left.cols, None, where), Scope(right.cols, None, where)
    taken, rtaken = set(left.present()), set(right.present())
    lexprs, rexprs, renames, names = {}, {}, {}, []
    for a, b in pairs:
        lk, rk = spark_sql(a, lscope, where), spark_sql(b, rscope, where)
        lcol = plain_column(lk) if side in ("inner", "left") else None
        rcol = plain_column(rk) if side in ("inner", "right") else None
        if share and lcol is not None and lcol not in names and rcol is not None and rcol not in renames:
            name = lcol
            renames[rcol] = name
        elif lcol is not None and lcol not in names:
            name = lcol
            rexprs[name] = rk
        elif rcol is not None and rcol not in renames and rcol not in taken and rcol not in names:
            name = rcol
            renames[rcol] = name
            lexprs[name] = lk
        else:
            name = fresh_name(taken | rtaken | set(names), "__key")
            lexprs[name], rexprs[name] = lk, rk
        names.append(name)
    if not pairs:  # a cross join: every row meets every row under one constant key
        name = fresh_name(taken | rtaken, "__key")
        lexprs[name] = rexprs[name] = "1"
        names.append(name)
    left = with_columns(left, lexprs)
    used = set(left.present()) | rtaken | set(names)
    mapping = dict(renames)
    for c in right.present():
        if c not in mapping and (c in taken or c in names):
            mapping[c] = fresh_name(used, f"{next((x.table for x in right.cols if x.internal == c), None) or 'r'}__{c}")
            used.add(mapping[c])
    if rexprs or any(k != v for k, v in mapping.items()):
        columns = {mapping.get(c, c): f"`{c}`" for c in right.present()}
        columns.update(rexprs)
        right = Rel(right.coll.select(**columns), [Col(c.table, c.name, mapping.get(c.internal, c.internal))
                                                   for c in right.cols], list(columns))
    return left, right, names


def inner_join(left: Rel, right: Rel, pairs: list[tuple[exp.Expression, exp.Expression]], where) -> Rel:
    """``left`` joined with ``right`` where each pair's left and right expressions are equal
    (no pair: every row with every row)."""
    lk, rk, names = keyed_pair(left, right, pairs, where)
    columns = list(dict.fromkeys(lk.present() + [c for c in rk.present()
                                                                         if c not in names]))
    return Rel(lk.coll.join(rk.coll, on=names), lk.cols + rk.cols, columns)


def outer_join(left: Rel, right: Rel, pairs, residual: exp.Expression | None, side: str, where) -> Rel:
    """The ``side`` ("left", "right" or "full") outer join of ``left`` and ``right`` on the
    equalities ``pairs`` and the further condition ``residual``."""
    lk, rk, names = keyed_pair(left, right, pairs, where, side=side)
    lcols = lk.present()
    rcols = [c for c in rk.present() if c not in names]
    both = Rel(lk.coll.join(rk.coll, on=names), lk.cols + rk.cols, lcols + rcols)
    if residual is not None:
        both = Rel(both.coll.filter(spark_sql(residual, Scope(both.cols, None, where), where)), both.cols, both.coll_columns)
    parts = [both.coll]
    if side in ("left", "full"):
        parts.append(_unmatched(lk, rk, both, lcols, names, residual is not None, pad=rcols, order=lcols + rcols))
    if side in ("right", "full"):
        rside = rk.present()
        lpad = [c for c in lcols if c not in names]
        parts.append(_unmatched(rk, lk, both, rside, names, residual is not None, pad=lpad, order=lcols + rcols))
    out = parts[0].concat(*parts[1:])
    return Rel(out, both.cols, lcols + rcols)


def _unmatched(kept: Rel, other: Rel, both: Rel, kept_cols: list[str], names: list[str], residual: bool,
               pad: list[str], order: list[str]):
    """The rows of ``kept`` that no row of ``other`` matched in ``both``, with ``pad`` null."""
    if not residual:
        alone = kept.coll.antijoin(other.coll.select(*names).distinct(), on=names)
    else:
        matched = both.coll.select(*kept_cols).distinct()
        alone = kept.coll.concat(kept.coll.semijoin(matched, on=kept_cols, nulls_equal=True).negate())
    padded = {c: (f"`{c}`" if c in kept_cols else "NULL") for c in order}
    return alone.select(**padded)


def distinct_names(rel: Rel) -> Rel:
    """``rel`` as a relation of its own: each SQL column in a column of its own, no other
    columns (a view, a CTE, a set operation's side)."""
    columns, cols = {}, []
    for c in rel.cols:
        internal = fresh_name(set(columns) | RESERVED_COLUMNS, c.name if c.name not in RESERVED_COLUMNS else f"{c.name}_")
        columns[internal] = f"`{c.internal}`"
        cols.append(Col(None, c.name, internal))
    return project(rel, columns, cols)
