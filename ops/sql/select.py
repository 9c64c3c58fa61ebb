"""One SELECT planned: FROM and WHERE (ops/sql/from_clause.py), then GROUP BY with its
aggregates in one ``agg`` and HAVING, window functions, the SELECT list, DISTINCT, and
ORDER BY ... LIMIT as a ``top_k``.

Aggregates and group expressions are matched by what they compute (their text with columns
resolved), so ``sum(l_quantity)`` in SELECT, HAVING and ORDER BY is one aggregate, and a
SELECT item equal to a GROUP BY expression reads the group's column.
"""

from __future__ import annotations

from sqlglot import exp

from ops.dataflow import aggregates as A
from ops.dataflow.reducers import Agg
from ops.errors import PipelineError
from ops.sql.expressions import conjuncts, expression_key, output_name, spark_sql, substituting
from ops.sql.from_clause import has_subquery, plan_from
from ops.sql.joins import project
from ops.sql.scope import Col, Rel, Scope, fresh_name
from ops.sql.subqueries import apply_condition, attach_scalars
from storage.state.trace import RESERVED_COLUMNS

_UNSUPPORTED = {"laterals": "LATERAL", "connect": "CONNECT BY", "pivots": "PIVOT", "qualify": "QUALIFY",
                "windows": "a named WINDOW", "prewhere": "PREWHERE", "sample": "SAMPLE", "offset": "OFFSET",
                "distribute": "DISTRIBUTE BY", "sort": "SORT BY", "cluster": "CLUSTER BY", "into": "INTO"}


def plan_select(pl, sel: exp.Select, env: dict, outer: Scope | None) -> Rel:
    where = pl.where
    for key, what in _UNSUPPORTED.items():
        if sel.args.get(key):
            raise PipelineError(where.at(sel.args[key] if isinstance(sel.args[key], exp.Expression) else sel,
                                         f"{what} is not supported"))
    distinct = sel.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise PipelineError(where.at(distinct, "DISTINCT ON is not supported"))
    rel = plan_from(pl, sel, env, outer)
    scope = Scope(rel.cols, outer, where)
    items = _items(sel, rel, where)
    having = sel.args["having"].this if sel.args.get("having") else None
    order = _order_all(list(sel.args["order"].expressions) if sel.args.get("order") else [], items)
    limit = _limit(sel, where)
    if limit is not None and not order:
        raise PipelineError(where.at(sel.args["limit"], "LIMIT without ORDER BY picks arbitrary rows, which cannot "
                                                        "be maintained: add an ORDER BY"))
    substitute = None
    group = _group_exprs(sel, items, scope, where)
    aggregates = _aggregates([e for _, e in items] + ([having] if having is not None else []) +
                             [o.this for o in order])
    if group is not None or aggregates:
        rel, scope, substitute = _aggregate(pl, rel, scope, group, aggregates)
    if having is not None:
        for c in conjuncts(having):
            if has_subquery(c):
                rel = apply_condition(pl, rel, c, env, outer, substitute)
            else:
                rel = Rel(rel.coll.filter(spark_sql(c, scope, where, substitute)), rel.cols, rel.coll_columns)
        scope = Scope(rel.cols, outer, where)
    scalars = [n for _, e in items for n in e.find_all(exp.Subquery)]
    if scalars:
        rel, names = attach_scalars(pl, rel, scalars, env, outer, left=True, substitute=substitute)
        scope = Scope(rel.cols, outer, where)
        substitute = substituting(exp.Subquery, names, substitute)
    windows = [n for _, e in items for n in e.find_all(exp.Window)]
    if windows:
        from ops.sql.windows import attach_windows
        rel, names = attach_windows(pl, rel, windows, scope, substitute)
        scope = Scope(rel.cols, outer, where)
        substitute = substituting(exp.Window, names, substitute)
    columns, cols = {}, []
    for name, e in items:
        internal = fresh_name(set(columns) | RESERVED_COLUMNS, _safe(name))
        columns[internal] = spark_sql(e, scope, where, substitute)
        cols.append(Col(None, name, internal))
    hidden = []
    if limit is not None:
        hidden = _order_columns(order, items, cols, columns, scope, where, substitute, bool(distinct))
    out = project(rel, columns, cols)
    coll = out.coll.distinct() if distinct is not None else out.coll
    if limit is None:
        return Rel(coll, cols, list(columns))
    top = coll.top_k([], limit, order_by=hidden)
    visible = {c.internal: f"`{c.internal}`" for c in cols}
    return project(Rel(top, cols, list(columns)), visible, cols)


def _items(sel: exp.Select, rel: Rel, where) -> list[tuple[str, exp.Expression]]:
    """The SELECT list as (output name, expression), stars expanded."""
    out = []
    for i, e in enumerate(sel.expressions):
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            table = e.table.lower() if isinstance(e, exp.Column) and e.table else None
            chosen = [c for c in rel.cols if (table is None or c.table == table) and not c.merged]
            if table is None:  # a USING column once, where its first copy stands
                merged = {c.name.lower(): c for c in rel.cols if c.merged}
                chosen = list({(c.name.lower() if c.name.lower() in merged else id(c)): merged.get(c.name.lower(), c)
                               for c in chosen}.values())
            if not chosen:
                raise PipelineError(where.at(e, f"{e.sql()}: no such table here"))
            out += [(c.name, exp.column(c.name, table=c.table) if c.table else exp.column(c.name)) for c in chosen]
            continue
        out.append((output_name(e, i), e.this if isinstance(e, exp.Alias) else e))
    return out


def _order_all(order: list[exp.Ordered], items) -> list[exp.Ordered]:
    """DuckDB's ORDER BY ALL [DESC]: by every SELECT item, left to right."""
    if len(order) != 1 or not (isinstance(order[0].this, exp.Var) and order[0].this.name.upper() == "ALL"):
        return order
    return [exp.Ordered(this=exp.Literal.number(i + 1), desc=order[0].args.get("desc")) for i in range(len(items))]


def _limit(sel: exp.Select, where) -> int | None:
    node = sel.args.get("limit")
    if node is None:
        return None
    if isinstance(node, exp.Fetch):  # FETCH FIRST n ROWS ONLY, the standard's LIMIT
        options = node.args.get("limit_options")
        if options is not None and (options.args.get("with_ties") or options.args.get("percent")):
            raise PipelineError(where.at(node, "FETCH ... WITH TIES and PERCENT are not supported"))
        value = node.args.get("count") or exp.Literal.number(1)
    else:
        value = node.expression if isinstance(node, exp.Limit) else node
    if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit() and int(value.this) > 0):
        raise PipelineError(where.at(node, "LIMIT takes a positive whole number"))
    return int(value.this)


def _group_exprs(sel, items, scope: Scope, where) -> list[exp.Expression] | None:
    group = sel.args.get("group")
    if group is None:
        return None
    if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets") or \
            any(isinstance(g, (exp.Rollup, exp.Cube, exp.GroupingSets)) for g in group.expressions):
        raise PipelineError(where.at(group, "ROLLUP, CUBE and GROUPING SETS are not supported"))
    if group.args.get("all"):  # DuckDB's GROUP BY ALL: every SELECT item without an aggregate
        return [e for _, e in items if not _aggregates([e]) and not e.find(exp.Window)]
    aliases = {name.lower(): e for name, e in items}
    out = []
    for g in group.expressions:
        if isinstance(g, exp.Literal) and not g.is_string:
            n = int(g.this)
            if not 1 <= n <= len(items):
                raise PipelineError(where.at(g, f"GROUP BY {n}: the SELECT list has {len(items)} items"))
            out.append(items[n - 1][1])
        elif isinstance(g, exp.Column) and not g.table and scope.find(g) is None and g.name.lower() in aliases:
            out.append(aliases[g.name.lower()])
        else:
            out.append(g)
    return out


def _aggregates(exprs) -> list[exp.AggFunc]:
    """The aggregate calls in ``exprs``, outside subqueries and window functions."""
    found = []
    for e in exprs:
        for n in e.walk():
            if isinstance(n, exp.AggFunc) and not _under(n, e, (exp.Subquery, exp.Window)):
                found.append(n.parent if _filtered(n.parent) else n)
    return found


def _filtered(node) -> bool:
    """Whether ``node`` is an aggregate's FILTER (WHERE ...): the two are one aggregate."""
    return isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc)


def _under(n: exp.Expression, root: exp.Expression, kinds) -> bool:
    p = n.parent
    while p is not None and p is not root.parent:
        if isinstance(p, kinds):
            return True
        if p is root:
            break
        p = p.parent
    return False


def _aggregate(pl, rel: Rel, scope: Scope, group: list[exp.Expression] | None, aggregates: list[exp.AggFunc]):
    """GROUP BY ``group`` computing ``aggregates`` in one ``agg``: the relation after it, its
    scope (the group's plain columns) and the substitution of group expressions and aggregates.
    Without GROUP BY (``group`` None) it has one row at every time, also over no rows
    (``Agg(when_empty=True)``: count 0, the rest NULL), as SQL has; inside a recursive
    step (a loop) none while its input is empty."""
    where = pl.where
    pre, by, post_cols, keys = {}, [], [], {}
    for i, g in enumerate(group or []):
        if has_subquery(g):
            raise PipelineError(where.at(g, "a subquery in GROUP BY is not supported"))
        sql = spark_sql(g, scope, where)
        key = expression_key(g, scope, where)
        if key in keys:
            continue
        plain = sql[1:-1] if sql.startswith("`") and sql.endswith("`") and sql.count("`") == 2 else None
        name = plain if plain is not None and plain not in pre else fresh_name(set(pre) | set(rel.present()), f"__g{i}")
        pre[name] = sql
        by.append(name)
        keys[key] = name
        if plain is not None:
            post_cols += [Col(c.table, c.name, name) for c in rel.cols if c.internal == plain]
    specs, agg_keys = {}, {}
    for j, a in enumerate(aggregates):
        key = expression_key(a, scope, where)
        if key in agg_keys:
            continue
        kind, arg = _aggregate_kind(a, where)
        column = None
        if arg is not None:
            column = fresh_name(set(pre) | set(rel.present()), f"__a{j}")
            pre[column] = spark_sql(arg, scope, where)
        out = fresh_name(set(pre) | set(specs) | set(by), f"__agg{j}")
        specs[out] = _spec(kind, column)
        agg_keys[key] = out
    if not pre:  # count(*) over no key: the rows are the input
        pre["__one"] = "1"
    same = list(pre) == rel.present() and all(e == f"`{c}`" for c, e in pre.items())
    staged = rel.coll if same else rel.coll.select(**pre)  # no operator that changes nothing
    if not specs:  # GROUP BY alone: the distinct keys
        grouped = staged.distinct()
    else:
        grouped = staged.reduce(by, Agg(specs, when_empty=group is None and staged.scope is None))
    after = Rel(grouped, post_cols, by + list(specs))
    new_scope = Scope(post_cols, scope.outer, where)

    def substitute(node):
        if isinstance(node, exp.AggFunc) or _filtered(node):
            key = expression_key(node, scope, where)
            if key in agg_keys:
                return agg_keys[key]
            raise PipelineError(where.at(node, f"aggregate {node.sql(dialect='duckdb')} is not allowed here"))
        if isinstance(node, (exp.Literal, exp.Column, exp.Star)) and not isinstance(node, exp.Column):
            return None
        if keys and not isinstance(node, (exp.Subquery, exp.Window)):
            key = expression_key(node, scope, where)
            if key is not None and key in keys:
                return keys[key]
        return None
    return after, new_scope, substitute


def _aggregate_kind(a: exp.AggFunc, where) -> tuple[str, exp.Expression | None]:
    if _filtered(a):  # agg(x) FILTER (WHERE c) is agg(CASE WHEN c THEN x END): aggregates skip nulls
        kind, arg = _aggregate_kind(a.this, where)
        then = arg.copy() if arg is not None else exp.Literal.number(1)
        return kind, exp.Case(ifs=[exp.If(this=a.expression.this.copy(), true=then)])
    arg = a.this
    if isinstance(a, exp.Count):
        if isinstance(arg, exp.Star) or arg is None:
            return "count", None
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise PipelineError(where.at(a, "count(DISTINCT ...) of several columns is not supported"))
            return "count_distinct", arg.expressions[0]
        return "count", arg
    kinds = {exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
    kind = next((k for t, k in kinds.items() if type(a) is t), None)
    if kind is None:
        raise PipelineError(where.at(a, f"aggregate {a.sql(dialect='duckdb')} is not supported "
                                        f"(sum, avg, count, count(DISTINCT), min and max are)"))
    if isinstance(arg, exp.Distinct):
        raise PipelineError(where.at(a, f"{kind}(DISTINCT ...) is not supported"))
    if a.args.get("expressions"):
        raise PipelineError(where.at(a, f"{kind} takes one argument"))
    return kind, arg


def _spec(kind: str, column: str | None):
    return {"count": A.count, "sum": A.sum, "avg": A.avg, "min": A.min, "max": A.max,
            "count_distinct": A.count_distinct}[kind](*([column] if column is not None else []))


def _safe(name: str) -> str:
    """A collection column name for an output ``name`` (reserved names get a suffix)."""
    return name if name not in RESERVED_COLUMNS else f"{name}_"


def _order_columns(order, items, cols, columns: dict, scope: Scope, where, substitute, distinct: bool):
    """ORDER BY as top_k's (column, direction) list; an expression that is no SELECT item
    becomes a column of the projection (removed after the top-k)."""
    out = []
    names = {c.name.lower(): c.internal for c in cols}
    for i, o in enumerate(order):
        e = o.this
        desc = bool(o.args.get("desc"))
        if o.args.get("nulls_first"):
            raise PipelineError(where.at(o, "NULLS FIRST is not supported (nulls come last, as DuckDB orders them)"))
        if isinstance(e, exp.Literal) and not e.is_string:
            n = int(e.this)
            if not 1 <= n <= len(cols):
                raise PipelineError(where.at(e, f"ORDER BY {n}: the SELECT list has {len(cols)} items"))
            column = cols[n - 1].internal
        elif isinstance(e, exp.Column) and not e.table and e.name.lower() in names:
            column = names[e.name.lower()]
        else:
            sql = spark_sql(e, scope, where, substitute)
            column = next((k for k, v in columns.items() if v == sql), None)
            if column is None:
                if distinct:
                    raise PipelineError(where.at(e, "with SELECT DISTINCT, ORDER BY names SELECT items only"))
                column = fresh_name(set(columns), f"__order{i}")
                columns[column] = sql
        out.append((column, "desc" if desc else "asc"))
    return out


def order_and_limit(pl, rel: Rel, q: exp.Expression, where) -> Rel:
    """ORDER BY ... LIMIT of a set operation: a top-k over its output columns."""
    limit = _limit(q, where)
    if limit is None:
        return rel
    order = list(q.args["order"].expressions) if q.args.get("order") else []
    if not order:
        raise PipelineError(where.at(q.args["limit"], "LIMIT without ORDER BY picks arbitrary rows, which cannot "
                                                      "be maintained: add an ORDER BY"))
    by = []
    for o in order:
        e = o.this
        if isinstance(e, exp.Literal) and not e.is_string and 1 <= int(e.this) <= len(rel.cols):
            by.append((rel.cols[int(e.this) - 1].internal, "desc" if o.args.get("desc") else "asc"))
            continue
        hit = [c for c in rel.cols if isinstance(e, exp.Column) and c.name.lower() == e.name.lower()]
        if not hit:
            raise PipelineError(where.at(e, "ORDER BY of a set operation names its output columns"))
        by.append((hit[0].internal, "desc" if o.args.get("desc") else "asc"))
    return Rel(rel.coll.top_k([], limit, order_by=by), rel.cols, rel.coll_columns)
