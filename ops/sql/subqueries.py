"""Subqueries decorrelated into joins.

* ``EXISTS`` / ``NOT EXISTS``: the subquery's conditions that name the enclosing query's
  columns are taken out; its equalities become join keys. With only those, the enclosing
  rows are kept (``semijoin``) or dropped (``antijoin``) by the distinct keys the subquery
  yields; with any other such condition, the enclosing rows joined with the subquery and
  filtered by it are the matched rows, and the enclosing rows are kept or dropped by them.
* ``x IN (subquery)``: a ``semijoin`` on the subquery's distinct values (an ``EXISTS`` with
  one more equality when the subquery is correlated). ``x NOT IN (subquery)`` follows SQL's
  three-valued logic: no row when the subquery yields a null, and a null ``x`` only when the
  subquery yields nothing.
* A scalar subquery is a join: with every row (one value) when uncorrelated; grouped by its
  correlation keys and joined on them when correlated. In a condition an unmatched row
  compares with NULL and drops out, so the join is inner; in SELECT it is a LEFT join.
"""

from __future__ import annotations

from sqlglot import exp

from ops.errors import PipelineError
from ops.sql.expressions import conjuncts, equality_pairs, spark_sql, substituting
from ops.sql.joins import inner_join, outer_join, with_columns
from ops.sql.scope import Correlated, Rel, Scope, fresh_name

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _select_of(node: exp.Expression) -> exp.Expression:
    while isinstance(node, (exp.Subquery, exp.Paren)):
        node = node.this
    return node


def apply_condition(pl, rel: Rel, cond: exp.Expression, env: dict, outer: Scope | None, substitute=None) -> Rel:
    """``rel``'s rows for which ``cond`` (a condition holding a subquery) is true."""
    where = pl.where
    negated = isinstance(cond, exp.Not)
    inner = cond.this if negated else cond
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Exists):
        return exists(pl, rel, _select_of(inner.this), env, outer, negated, substitute)
    if isinstance(inner, exp.In) and inner.args.get("query") is not None:
        return in_subquery(pl, rel, inner, env, outer, negated, substitute)
    scalars = [n for n in cond.find_all(exp.Subquery) if not _inside_other(n, cond)]
    nested = [n for n in cond.walk() if n is not cond and not _inside_other(n, cond) and
              (isinstance(n, exp.Exists) or (isinstance(n, exp.In) and n.args.get("query") is not None))]
    if scalars and not nested:
        rel, names = attach_scalars(pl, rel, scalars, env, outer, left=False, substitute=substitute)
        scope = Scope(rel.cols, outer, where)
        sql = spark_sql(cond, scope, where, substituting(exp.Subquery, names, substitute))
        return Rel(rel.coll.filter(sql), rel.cols, rel.coll_columns)
    raise PipelineError(where.at(cond, "this subquery is supported only as a condition of its own, joined by AND "
                                       "(EXISTS, IN, NOT IN, or a comparison with a scalar subquery)"))


def _inside_other(n: exp.Expression, root: exp.Expression) -> bool:
    p = n.parent
    while p is not None and p is not root:
        if isinstance(p, exp.Subquery):
            return True
        p = p.parent
    return False


def _outer_sql(e: exp.Expression, rel: Rel, outer: Scope | None, where, substitute) -> str:
    return spark_sql(e, Scope(rel.cols, outer, where), where, substitute)


class _Attempt:
    """Planning that may be undone: the nodes it added and the views it planned are
    forgotten if it raises (a subquery first tried as uncorrelated), or always with
    ``undo=True`` (planned only to learn its shape)."""

    def __init__(self, pl, undo: bool = False):
        self.pl = pl
        self.undo = undo

    def __enter__(self):
        p = self.pl.p
        self.mark = (len(p.nodes), dict(p.inputs), dict(self.pl.planned))
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None or self.undo:
            n, inputs, planned = self.mark
            del self.pl.p.nodes[n:]
            self.pl.p.inputs.clear()
            self.pl.p.inputs.update(inputs)
            self.pl.planned.clear()
            self.pl.planned.update(planned)
        return False


def _uncorrelated(pl, query: exp.Expression, env: dict, outer: Scope | None) -> Rel | None:
    """``query`` planned on its own, or None (nothing planned) if it names outer columns."""
    probe = Scope([], outer, pl.where)
    try:
        with _Attempt(pl):
            return pl.query(query, env, probe)
    except Correlated:
        return None


def _decorrelated(pl, sel: exp.Expression, env: dict, outer_scope: Scope):
    """The subquery's rows without its correlated conditions, the equalities among them
    as (outer expression, inner expression) pairs, and the other correlated conditions."""
    if not isinstance(sel, exp.Select):
        raise PipelineError(pl.where.at(sel, "a correlated subquery must be a plain SELECT"))
    for key in ("group", "having", "limit", "offset", "distinct"):
        if sel.args.get(key):
            raise PipelineError(pl.where.at(sel, f"a correlated subquery with {key.upper()} is not supported"))
    correlated: list[exp.Expression] = []
    inner = pl.from_where(sel, env, outer_scope, correlated)
    iscope = Scope(inner.cols, None, pl.where)
    pairs, residual = equality_pairs(correlated, lambda e: _outside(e, iscope), iscope.holds)
    return inner, pairs, residual


def _outside(e, scope: Scope) -> bool:
    cols = list(e.find_all(exp.Column))
    return bool(cols) and all(scope.find(c) is None for c in cols)


def exists(pl, rel: Rel, sel: exp.Expression, env: dict, outer: Scope | None, negated: bool, substitute=None) -> Rel:
    where = pl.where
    scope = Scope(rel.cols, outer, where)
    sub = _uncorrelated(pl, sel, env, scope)
    if sub is not None:  # EXISTS of a query of its own: every row or none, by whether it has a row
        return _keep_if_any(rel, sub, negated)
    inner, pairs, residual = _decorrelated(pl, sel, env, scope)
    if not residual:
        taken = set(rel.present())
        names = []
        for _ in pairs:
            names.append(fresh_name(taken | set(names), "__key"))
        outer_keyed = with_columns(rel, {n: _outer_sql(o, rel, outer, where, substitute)
                                         for n, (o, _) in zip(names, pairs)})
        iscope = Scope(inner.cols, None, where)
        keys = inner.coll.select(**{n: spark_sql(i, iscope, where) for n, (_, i) in zip(names, pairs)}).distinct()
        op = outer_keyed.coll.antijoin if negated else outer_keyed.coll.semijoin
        return Rel(op(keys, on=names), rel.cols, outer_keyed.present())
    joined = inner_join(rel, inner, pairs, where)
    both = Scope([c for c in joined.cols if c not in rel.cols], Scope(rel.cols, outer, where), where, reach_out=True)
    cond = residual[0]
    for c in residual[1:]:
        cond = exp.And(this=cond, expression=c)
    matched = joined.coll.filter(spark_sql(cond, both, where)).select(*rel.present()).distinct()
    kept = rel.coll.semijoin(matched, on=rel.present(), nulls_equal=True)
    return Rel(rel.coll.concat(kept.negate()) if negated else kept, rel.cols, rel.coll_columns)


def _keep_if_any(rel: Rel, sub: Rel, negated: bool) -> Rel:
    """Every row of ``rel`` while ``sub`` has a row (``negated``: while it has none)."""
    flag = fresh_name(set(rel.present()), "__any")
    marked = with_columns(rel, {flag: "1"})
    any_row = sub.coll.select(**{flag: "1"}).distinct()
    op = marked.coll.antijoin if negated else marked.coll.semijoin
    return Rel(op(any_row, on=[flag]), rel.cols, marked.present())


def in_subquery(pl, rel: Rel, node: exp.In, env: dict, outer: Scope | None, negated: bool, substitute=None) -> Rel:
    where = pl.where
    scope = Scope(rel.cols, outer, where)
    query = _select_of(node.args["query"])
    sub = _uncorrelated(pl, query, env, scope)
    if sub is None:
        if negated:
            raise PipelineError(where.at(node, "NOT IN with a correlated subquery is not supported: write NOT EXISTS "
                                               "(they differ only when a value is null)"))
        if not isinstance(query, exp.Select) or len(query.expressions) != 1:
            raise PipelineError(where.at(node, "IN (subquery) needs a subquery of one column"))
        item = query.expressions[0]
        item = item.this if isinstance(item, exp.Alias) else item
        cond = exp.EQ(this=item.copy(), expression=node.this.copy())
        rewritten = query.copy()
        rewritten.set("where", exp.Where(this=cond if not query.args.get("where") else
                                         exp.And(this=query.args["where"].this.copy(), expression=cond)))
        return exists(pl, rel, rewritten, env, outer, False, substitute)
    if len(sub.cols) != 1:
        raise PipelineError(where.at(node, f"IN (subquery) needs a subquery of one column, this one has {len(sub.cols)}"))
    key = fresh_name(set(rel.present()), "__in")
    keyed = with_columns(rel, {key: _outer_sql(node.this, rel, outer, where, substitute)})
    values = sub.coll.select(**{key: f"`{sub.cols[0].internal}`"})
    if not negated:
        return Rel(keyed.coll.semijoin(values.distinct(), on=[key]), rel.cols, keyed.present())
    # NOT IN: false for a value in the set, unknown (dropped) when x or a member is null
    flag = fresh_name(set(keyed.present()), "__any")
    present = keyed.present() + [flag]
    marked = with_columns(keyed, {flag: "1"})
    has_null = values.filter(f"`{key}` IS NULL").select(**{flag: "1"}).distinct()
    nonempty = values.select(**{flag: "1"}).distinct()
    known = marked.coll.filter(f"`{key}` IS NOT NULL").antijoin(values.filter(f"`{key}` IS NOT NULL").distinct(), on=[key])
    known = known.antijoin(has_null, on=[flag])
    null_x = marked.coll.filter(f"`{key}` IS NULL").antijoin(nonempty, on=[flag])
    return Rel(known.concat(null_x), rel.cols, present)


def attach_scalars(pl, rel: Rel, subqueries: list[exp.Subquery], env: dict, outer: Scope | None, *, left: bool,
                   substitute=None) -> tuple[Rel, dict[str, str]]:
    """``rel`` with each scalar subquery's value in a column; their text -> that column."""
    where = pl.where
    names: dict[str, str] = {}
    for node in subqueries:
        if node.sql() in names:
            continue
        query = _select_of(node.this)
        scope = Scope(rel.cols, outer, where)
        sub = _uncorrelated(pl, query, env, scope)
        if sub is not None:
            if len(sub.cols) != 1:
                raise PipelineError(where.at(node, f"a scalar subquery has one column, this one has {len(sub.cols)}"))
            joined = outer_join(rel, sub, [], None, "left", where) if left else inner_join(rel, sub, [], where)
            value = joined.cols[-1].internal
        else:
            joined, value = _correlated_scalar(pl, rel, query, env, outer, left, node)
        names[node.sql()] = value
        rel = Rel(joined.coll, rel.cols, joined.present())
    return rel, names


def _correlated_scalar(pl, rel: Rel, query: exp.Expression, env: dict, outer, left: bool, node):
    """A correlated scalar subquery (an aggregate over the rows its equalities select),
    grouped by its correlation keys and joined with ``rel`` on them."""
    where = pl.where
    scope = Scope(rel.cols, outer, where)
    if not isinstance(query, exp.Select) or len(query.expressions) != 1:
        raise PipelineError(where.at(node, "a correlated scalar subquery must be a SELECT of one value"))
    item = query.expressions[0]
    item = item.this if isinstance(item, exp.Alias) else item
    if not any(isinstance(n, exp.AggFunc) for n in item.walk()) or query.args.get("group"):
        raise PipelineError(where.at(node, "a correlated scalar subquery must aggregate without GROUP BY "
                                           "(so that it has one value per outer row)"))
    if any(isinstance(n, exp.Count) for n in item.walk()):
        raise PipelineError(where.at(node, "a correlated scalar subquery that counts is not supported (a missing "
                                           "group counts 0 in SQL): join a grouped count instead"))
    with _Attempt(pl, undo=True):  # learn its correlation only; it is planned grouped below
        _, pairs, residual = _decorrelated(pl, query, env, scope)
    if residual or not pairs:
        raise PipelineError(where.at(node, "a correlated scalar subquery may relate to the outer query by "
                                           "equalities only"))
    correlated_texts = set()
    inner_keys = []
    for o, i in pairs:
        inner_keys.append(i)
        correlated_texts.add(exp.EQ(this=o, expression=i).sql())
        correlated_texts.add(exp.EQ(this=i, expression=o).sql())
    kept = [c for c in conjuncts(query.args["where"].this if query.args.get("where") else None)
            if c.sql() not in correlated_texts]
    grouped = query.copy()
    grouped.set("expressions", [exp.alias_(k.copy(), f"__c{n}") for n, k in enumerate(inner_keys)]
                + [exp.alias_(item.copy(), "__v")])
    grouped.set("where", None)
    for c in kept:
        grouped = grouped.where(c.copy(), copy=False)
    grouped.set("group", exp.Group(expressions=[k.copy() for k in inner_keys]))
    sub = pl.query(grouped, env, None)
    joined_pairs = [(o, exp.column(f"__c{n}")) for n, (o, _) in enumerate(pairs)]
    joined = outer_join(rel, sub, joined_pairs, None, "left", where) if left else inner_join(rel, sub, joined_pairs, where)
    value = next(c.internal for c in reversed(joined.cols) if c.name == "__v")
    return joined, value
