"""FROM and WHERE: the sources of a SELECT joined, its conditions applied.

Inner joins (a FROM list, JOIN ... ON, CROSS JOIN) are planned together: each condition
on one source filters that source first; then, starting from the first source, each step
joins the next source that an equality connects to those already joined, on every such
equality (a cross join only where none does), and applies each remaining condition as soon
as its sources are in. An outer join closes the sources before it into one relation. A
condition with a subquery is applied last (ops/sql/subqueries.py).
"""

from __future__ import annotations

from sqlglot import exp

from ops.errors import PipelineError
from ops.sql.expressions import conjuncts, equality_pairs, spark_sql
from ops.sql.joins import inner_join, outer_join, project, with_columns
from ops.sql.scope import Col, Correlated, Rel, Scope, fresh_name


def has_subquery(e: exp.Expression) -> bool:
    return any(isinstance(n, (exp.Subquery, exp.Exists, exp.Select)) for n in e.walk())


def plan_from(pl, sel: exp.Select, env: dict, outer: Scope | None, *, correlated_out: list | None = None) -> Rel:
    """The rows of ``sel``'s FROM that satisfy its WHERE. With ``correlated_out`` (a list),
    conditions naming an enclosing query's columns are left out and appended to it."""
    where = pl.where
    frm = sel.args.get("from_")
    if frm is None:
        raise PipelineError(where.at(sel, "a SELECT without FROM has no input to maintain"))
    conds = conjuncts(sel.args["where"].this) if sel.args.get("where") else []
    subs = [c for c in conds if has_subquery(c)]
    plain = [c for c in conds if not has_subquery(c)]
    joins = sel.args.get("joins") or []
    sides = [(j.side or "").lower() for j in joins]
    pushable = all(s in ("", "left") for s in sides)  # WHERE may filter an outer join's preserved side first
    mentioned = mentioned_names(sel)
    pool, pool_conds, merged = [source(pl, frm.this, env, mentioned)], [], []
    for j, side in zip(joins, sides):
        kind = (j.kind or "").lower()
        if kind in ("semi", "anti", "asof", "positional") or j.args.get("method"):
            raise PipelineError(where.at(j, f"{kind.upper() or j.args.get('method')} JOIN is not supported"))
        right = source(pl, j.this, env, mentioned)
        using, names = _using(j, pool, right, where)
        on = conjuncts(j.args.get("on")) + using
        if side in ("left", "right", "full"):
            left, rest = join_pool(pl, pool, pool_conds + (plain if pushable else []), outer)
            plain = rest if pushable else plain + rest  # else the WHERE applies after the outer joins
            left = _merged(left, merged, "inner")
            pool, pool_conds, merged = [_merged(_outer(pl, left, right, on, side), names, side)], [], []
        else:
            pool.append(right)
            pool_conds += on
            merged += names
    rel, rest = join_pool(pl, pool, pool_conds + plain, outer)
    rel = _merged(rel, merged, "inner")
    for c in rest:
        if correlated_out is not None and _names_outside(c, rel, outer):
            correlated_out.append(c)
            continue
        rel = Rel(rel.coll.filter(spark_sql(c, Scope(rel.cols, outer, where), where)), rel.cols, rel.coll_columns)
    from ops.sql.subqueries import apply_condition
    for c in subs:
        rel = apply_condition(pl, rel, c, env, outer)
    return rel


def source(pl, node: exp.Expression, env: dict, mentioned: set[str] | None = None) -> Rel:
    """A FROM item planned: a table, view or CTE by name, or a derived table; with
    ``mentioned`` (see :func:`mentioned_names`), only its columns named there."""
    if isinstance(node, exp.Table):
        return _pruned(pl.table(node, env), mentioned)
    if isinstance(node, exp.Subquery):
        alias = node.alias_or_name.lower() or None
        rel = pl.query(node.this, env, None).requalified(alias)
        return _pruned(_column_aliases(rel, node.args.get("alias"), pl.where), mentioned)
    raise PipelineError(pl.where.at(node, f"{type(node).__name__} in FROM is not supported"))


def mentioned_names(sel: exp.Select) -> set[str] | None:
    """Every name ``sel`` spells (lower case: its columns, aliases and tables, its
    subqueries' too), or None when it selects a star of its own (every column is
    needed). A column of a FROM item whose name is not among them is read by nothing
    the query computes, so it is dropped where the item enters: the joins then hold and
    store only the columns the query uses (a star in an EXISTS subquery selects none)."""
    exists = isinstance(sel.parent, exp.Exists)  # EXISTS (SELECT * ...) selects no column
    for star in sel.find_all(exp.Star):
        owner = star.find_ancestor(exp.Select)
        if owner is sel and not isinstance(star.parent, exp.Count) and not exists:
            return None
    return {i.name.lower() for i in sel.find_all(exp.Identifier)}


def _pruned(rel: Rel, mentioned: set[str] | None) -> Rel:
    """``rel`` with only its columns ``mentioned`` names (at least one: a count of rows
    needs a row)."""
    if mentioned is None:
        return rel
    keep = [c for c in rel.cols if c.name.lower() in mentioned] or rel.cols[:1]
    if len(keep) == len(rel.cols) and rel.coll_columns in (None, rel.internals()):
        return rel
    return project(rel, {c: f"`{c}`" for c in dict.fromkeys(c.internal for c in keep)}, keep)


def _column_aliases(rel: Rel, alias, where) -> Rel:
    names = [c.name for c in (alias.args.get("columns") or [])] if alias is not None else []
    if not names:
        return rel
    if len(names) != len(rel.cols):
        raise PipelineError(where.at(alias, f"{len(names)} column names given for {len(rel.cols)} columns"))
    return Rel(rel.coll, [Col(c.table, n, c.internal) for c, n in zip(rel.cols, names)], rel.coll_columns)


def _using(j: exp.Join, pool: list[Rel], right: Rel, where):
    """JOIN ... USING (a, b) as the equalities it stands for, and (name, left table, right
    table) of each column it merges."""
    out, names = [], []
    for ident in j.args.get("using") or []:
        name = ident.name
        owners = [c for r in pool for c in r.cols if c.name.lower() == name.lower() and (c.merged or not any(
            x.merged and x.name.lower() == name.lower() for x in r.cols))]
        if len({(c.table, c.internal) for c in owners}) != 1:
            raise PipelineError(where.at(ident, f"USING ({name}): the column must be in exactly one source on the left"))
        rhits = [c for c in right.cols if c.name.lower() == name.lower()]
        if len(rhits) != 1:
            raise PipelineError(where.at(ident, f"USING ({name}): no such column on the right"))
        left_col = exp.column(name, table=owners[0].table) if owners[0].table else exp.column(name)
        out.append(exp.EQ(this=left_col, expression=exp.column(name, table=rhits[0].table)))
        names.append((name, owners[0].table, rhits[0].table))
    return out, names


def _merged(rel: Rel, names, side: str) -> Rel:
    """``rel`` with the USING columns ``names`` addressed unqualified as one column: the
    left's value, the right's in a RIGHT join, the one present in a FULL join."""
    extra = {}
    cols = list(rel.cols)
    for name, ltable, rtable in names:
        lcol = next(c for c in rel.cols if c.name == name and c.table == ltable and not c.merged)
        rcol = next(c for c in rel.cols if c.name == name and c.table == rtable and not c.merged)
        internal = {"inner": lcol.internal, "left": lcol.internal, "right": rcol.internal}.get(side)
        if internal is None:
            internal = fresh_name(set(rel.present()) | set(extra), name)
            extra[internal] = f"COALESCE(`{lcol.internal}`, `{rcol.internal}`)"
        cols.append(Col(None, lcol.name, internal, merged=True))
    if not names:
        return rel
    out = with_columns(rel, extra)
    return Rel(out.coll, cols, out.coll_columns)


def _outer(pl, left: Rel, right: Rel, on: list[exp.Expression], side: str) -> Rel:
    """``left`` ``side`` OUTER JOIN ``right`` ON ``on``: equalities between the two sides
    are the keys; a condition on the side that may be padded filters that side first."""
    where = pl.where
    lscope, rscope = Scope(left.cols, None, where), Scope(right.cols, None, where)
    pairs, others = equality_pairs(on, lscope.holds, rscope.holds)
    residual = []
    for c in others:
        lrefs, rrefs = _refs(c, lscope), _refs(c, rscope)
        if side == "left" and rrefs and not lrefs:
            right = Rel(right.coll.filter(spark_sql(c, rscope, where)), right.cols, right.coll_columns)
        elif side == "right" and lrefs and not rrefs:
            left = Rel(left.coll.filter(spark_sql(c, lscope, where)), left.cols, left.coll_columns)
        else:
            residual.append(c)
    cond = None
    for c in residual:
        cond = c if cond is None else exp.And(this=cond, expression=c)
    return outer_join(left, right, pairs, cond, side, where)


def _refs(e: exp.Expression, scope: Scope) -> bool:
    return any(scope.find(c) is not None for c in e.find_all(exp.Column))


def _names_outside(c: exp.Expression, rel: Rel, outer: Scope | None) -> bool:
    scope = Scope(rel.cols, outer, None)
    try:
        for col in c.find_all(exp.Column):
            scope.resolve(col)
    except Correlated:
        return True
    return False


def join_pool(pl, pool: list[Rel], conds: list[exp.Expression], outer: Scope | None) -> tuple[Rel, list[exp.Expression]]:
    """The inner join of ``pool`` under ``conds``; the conditions that name columns of no
    source in the pool come back unapplied."""
    where = pl.where
    scopes = [Scope(r.cols, None, where) for r in pool]

    def refs(e) -> set[int] | None:
        found = set()
        for col in e.find_all(exp.Column):
            hits = [i for i, s in enumerate(scopes) if s.find(col) is not None]
            if len(hits) > 1 and not col.table:
                raise PipelineError(where.at(col, f"column {col.sql()!r} is ambiguous: qualify it"))
            if not hits:
                return None
            found.add(hits[0])
        return found

    items, multi, rest = list(pool), [], []
    for c in conds:
        r = refs(c)
        if r is None:
            rest.append(c)
        elif len(r) <= 1:
            i = next(iter(r), 0)
            items[i] = Rel(items[i].coll.filter(spark_sql(c, scopes[i], where)), items[i].cols, items[i].coll_columns)
        else:
            multi.append((c, r))
    rel, joined = items[0], {0}
    while len(joined) < len(items):
        step = None
        for j in range(len(items)):
            if j in joined:
                continue
            pairs = [(c, _pair(c, joined, j, refs)) for c, r in multi if r <= joined | {j} and j in r]
            pairs = [(c, p) for c, p in pairs if p is not None]
            if pairs:
                step = (j, pairs)
                break
        if step is None:
            step = (min(set(range(len(items))) - joined), [])
        j, pairs = step
        rel = inner_join(rel, items[j], [p for _, p in pairs], where)
        used = {id(c) for c, _ in pairs}
        multi = [(c, r) for c, r in multi if id(c) not in used]
        joined.add(j)
        now = [(c, r) for c, r in multi if r <= joined]
        for c, _ in now:
            rel = Rel(rel.coll.filter(spark_sql(c, Scope(rel.cols, outer, where), where)), rel.cols, rel.coll_columns)
        multi = [(c, r) for c, r in multi if not r <= joined]
    return rel, rest + [c for c, _ in multi]


def _pair(c: exp.Expression, joined: set[int], j: int, refs):
    """``c`` as (expression over the joined sources, expression over source ``j``) when it
    is an equality between them, else None."""
    if not isinstance(c, exp.EQ):
        return None
    a, b = refs(c.this), refs(c.expression)
    if a and b and a <= joined and b == {j}:
        return c.this, c.expression
    if a and b and b <= joined and a == {j}:
        return c.expression, c.this
    return None
