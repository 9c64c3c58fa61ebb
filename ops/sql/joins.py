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


def renamed_apart(rel: Rel, taken: set[str]) -> Rel:
    """``rel`` with each column whose name is in ``taken`` renamed ``table__name`` (or a
    fresh variant), so that it can sit beside a relation that owns ``taken``."""
    mapping, used = {}, set(taken) | set(rel.present())
    for col in rel.cols:
        if col.internal in taken and col.internal not in mapping:
            mapping[col.internal] = fresh_name(used, f"{col.table or 'r'}__{col.name}")
            used.add(mapping[col.internal])
    if not mapping:
        return rel
    columns = {mapping.get(c, c): f"`{c}`" for c in rel.present()}
    return Rel(rel.coll.select(**columns), [Col(c.table, c.name, mapping.get(c.internal, c.internal)) for c in rel.cols],
               list(columns))


def keyed_pair(left: Rel, right: Rel, pairs, where, *, share: bool = True) -> tuple[Rel, Rel, list[str]]:
    """``left`` and ``right`` (renamed apart) each with its keys in columns of one name.
    ``share``: a key column may hold both sides' SQL columns (an inner join, where they are
    equal); an outer join keeps both sides' columns apart (one of them may be null)."""
    right = renamed_apart(right, set(left.present()))
    lscope, rscope = Scope(left.cols, None, where), Scope(right.cols, None, where)
    lexprs, rexprs, renames, names = {}, {}, {}, []
    taken = set(left.present()) | set(right.present())
    for a, b in pairs:
        lk, rk = spark_sql(a, lscope, where), spark_sql(b, rscope, where)
        lcol, rcol = (plain_column(lk), plain_column(rk)) if share else (None, None)
        if lcol is not None and lcol not in names and rcol is not None and rcol not in renames and rcol not in names:
            name = lcol
            renames[rcol] = name
        elif lcol is not None and lcol not in names:
            name = lcol
            rexprs[name] = rk
        elif rcol is not None and rcol not in renames and rcol not in names:
            name = rcol
            lexprs[name] = lk
        else:
            name = fresh_name(taken | set(names), "__key")
            lexprs[name], rexprs[name] = lk, rk
        names.append(name)
    if not pairs:  # a cross join: every row meets every row under one constant key
        name = fresh_name(taken, "__key")
        lexprs[name] = rexprs[name] = "1"
        names.append(name)
    left = with_columns(left, lexprs)
    if renames or rexprs:
        columns = {renames.get(c, c): f"`{c}`" for c in right.present()}
        columns.update(rexprs)
        right = Rel(right.coll.select(**columns), [Col(c.table, c.name, renames.get(c.internal, c.internal))
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
    lk, rk, names = keyed_pair(left, right, pairs, where, share=False)
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
