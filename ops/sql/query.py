"""A query planned: WITH (and WITH RECURSIVE), set operations, SELECT; and the planner that
holds what every query of a model shares (the pipeline, the views, the input traces)."""

from __future__ import annotations

from typing import Callable

import pyarrow as pa
from sqlglot import exp

from ops.dataflow.builder import Pipeline
from ops.errors import PipelineError
from ops.sql.from_clause import plan_from
from ops.sql.located import Located
from ops.sql.joins import distinct_names
from ops.sql.scope import Col, Rel, Scope


class Planner:
    """Plans the queries of one model into ``p``: views are planned once, where first used."""

    def __init__(self, p: Pipeline, where: Located, tables: Callable[[str], pa.Schema | None],
                 views: dict[str, exp.Expression]):
        self.p = p
        self.where = where
        self.tables = tables
        self.views = views  # name (lower case) -> its query and the column names it gives (or [])
        self.planned: dict[str, Rel] = {}
        self._planning: list[str] = []

    def view(self, name: str, node: exp.Expression | None = None) -> Rel:
        """The view ``name`` planned (once)."""
        if name in self.planned:
            return self.planned[name]
        if name in self._planning:
            cycle = " -> ".join(self._planning[self._planning.index(name):] + [name])
            raise PipelineError(self.where.at(node, f"views refer to each other in a circle: {cycle}"))
        self._planning.append(name)
        query, columns = self.views[name]
        declared, self.p.declared_here = self.p.declared_here, self.where.line_of(query)
        try:
            rel = distinct_names(self.query(query, {}, None))
        finally:
            self._planning.pop()
            self.p.declared_here = declared
        if columns:
            if len(columns) != len(rel.cols):
                raise PipelineError(self.where.at(query, f"view {name}: {len(columns)} column names for "
                                                         f"{len(rel.cols)} columns"))
            rel = distinct_names(Rel(rel.coll, [Col(None, n, c.internal) for n, c in zip(columns, rel.cols)],
                                     rel.coll_columns))
        self.planned[name] = rel
        return rel

    def table(self, t: exp.Table, env: dict) -> Rel:
        """A FROM item naming a CTE, a view or an input trace, addressed by its alias."""
        if t.args.get("db") or t.args.get("catalog"):
            raise PipelineError(self.where.at(t, f"{t.sql()}: name an input trace or a view, without a schema"))
        name = t.name.lower()
        alias = t.alias_or_name.lower()
        if name in env:
            rel = env[name]
        elif name in self.views:
            rel = self.view(name, t)
        else:
            rel = self.input(t)
        rel = rel.requalified(alias)
        alias_node = t.args.get("alias")
        names = [c.name for c in (alias_node.args.get("columns") or [])] if alias_node is not None else []
        if names:
            if len(names) != len(rel.cols):
                raise PipelineError(self.where.at(alias_node, f"{len(names)} column names for {len(rel.cols)} columns"))
            rel = Rel(rel.coll, [Col(c.table, n, c.internal) for c, n in zip(rel.cols, names)], rel.coll_columns)
        return rel

    def input(self, t: exp.Table) -> Rel:
        found = self.tables(t.name)
        if found is None:
            raise PipelineError(self.where.at(t, f"no input trace, view or CTE named {t.name!r}"))
        trace, schema = found
        coll = self.p.input(trace)
        names = [f.name for f in schema]
        return Rel(coll, [Col(None, n, n) for n in names], names)

    def from_where(self, sel: exp.Select, env: dict, outer: Scope | None, correlated: list) -> Rel:
        return plan_from(self, sel, env, outer, correlated_out=correlated)

    def query(self, q: exp.Expression, env: dict, outer: Scope | None) -> Rel:
        """``q`` planned; ``env`` holds the CTEs in reach, ``outer`` the enclosing scope."""
        while isinstance(q, exp.Subquery) and not q.args.get("order") and not q.args.get("limit"):
            q = q.this
        with_ = q.args.get("with_")
        if with_ is not None:
            env = self.ctes(with_, env, outer)
        if isinstance(q, exp.Select):
            from ops.sql.select import plan_select
            return plan_select(self, q, env, outer)
        if isinstance(q, (exp.Union, exp.Intersect, exp.Except)):
            from ops.sql.set_operations import plan_set_operation
            return plan_set_operation(self, q, env, outer)
        raise PipelineError(self.where.at(q, f"{type(q).__name__} is not supported here; a view is a SELECT"))

    def ctes(self, with_: exp.With, env: dict, outer: Scope | None) -> dict:
        env = dict(env)
        for cte in with_.expressions:
            name = cte.alias.lower()
            columns = [c.name for c in (cte.args["alias"].args.get("columns") or [])]
            if with_.args.get("recursive") and _refers_to(cte.this, name):
                from ops.sql.recursive import plan_recursive
                rel = plan_recursive(self, cte, name, columns, env, outer)
            else:
                rel = distinct_names(self.query(cte.this, env, outer))
                if columns:
                    if len(columns) != len(rel.cols):
                        raise PipelineError(self.where.at(cte, f"{len(columns)} column names for {len(rel.cols)} columns"))
                    rel = Rel(rel.coll, [Col(None, n, c.internal) for n, c in zip(columns, rel.cols)], rel.coll_columns)
            env[name] = rel
        return env


def _refers_to(q: exp.Expression, name: str) -> bool:
    return any(t.name.lower() == name for t in q.find_all(exp.Table))
