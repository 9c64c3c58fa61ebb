"""A model file: ``CREATE MATERIALIZED VIEW name AS SELECT ...`` (an output trace) and
``CREATE VIEW name AS SELECT ...`` (a view other statements read), planned into a
pipeline's dataflow graph as a Python pipeline file's ``pipeline(p)`` would build it.

Input traces and views are named as tables; names are case-insensitive as SQL's are. The
statements may come in any order. Parsing is sqlglot's (DuckDB's dialect: standard SQL as
DuckDB and Spark SQL accept it); a parse error is one line with its line and column.
"""

from __future__ import annotations

import copy
import os
from typing import Callable

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from ops.dataflow.builder import Pipeline
from ops.errors import PipelineError
from ops.sql.located import Located
from ops.sql.query import Planner
from storage.state.trace import NAME_RE, RESERVED_COLUMNS


#: models planned in this process (the warm engine plans the same models refresh after refresh)
_planned: dict[tuple[str, str, str], tuple[dict[str, pa.Schema | None], Pipeline]] = {}
_PLANNED_MODELS = 256


def load_model(path: str, name: str, text: str, tables: Callable[[str], pa.Schema | None]) -> Pipeline:
    """The pipeline named ``name`` that the model ``text`` (read from ``path``) declares;
    ``tables(name)`` gives an input trace's schema (None if there is no such trace).

    A model is planned again only when its text or a schema it read changed: planning
    depends on nothing else, so a copy of the pipeline planned before is returned."""
    key = (os.path.abspath(path), name, text)
    kept = _planned.get(key)
    if kept is not None and all(_same(tables(n), s) for n, s in kept[0].items()):
        return copy.deepcopy(kept[1])
    asked: dict[str, pa.Schema | None] = {}

    def recorded(n: str) -> pa.Schema | None:
        asked[n] = tables(n)
        return asked[n]

    p = _plan(path, name, text, recorded)
    if len(_planned) >= _PLANNED_MODELS:
        _planned.pop(next(iter(_planned)))
    _planned[key] = (asked, copy.deepcopy(p))
    return p


def _same(a: pa.Schema | None, b: pa.Schema | None) -> bool:
    return a is b or (a is not None and b is not None and a.equals(b, check_metadata=True))


def _plan(path: str, name: str, text: str, tables: Callable[[str], pa.Schema | None]) -> Pipeline:
    where = Located(path, text)
    statements = _parse(text, where)
    views, outputs, notes = {}, [], []
    statements = _without_trailing_drops(statements, where)
    for stmt in statements:
        if not isinstance(stmt, exp.Create) or (stmt.args.get("kind") or "").upper() != "VIEW":
            raise PipelineError(where.at(stmt, "a model holds CREATE [MATERIALIZED] VIEW name AS SELECT ... "
                                               f"statements, not {stmt.key.upper()}"))
        target = stmt.this
        columns = []
        if isinstance(target, exp.Schema):
            columns = [c.name for c in target.expressions]
            target = target.this
        view = target.name
        if not NAME_RE.match(view):
            raise PipelineError(where.at(target, f"bad view name {view!r}: use letters, digits and _"))
        if view.lower() in views:
            raise PipelineError(where.at(target, f"view {view!r} is defined twice"))
        views[view.lower()] = (stmt.expression, columns)
        if stmt.find(exp.MaterializedProperty) is not None:
            outputs.append((view, target))
            query = stmt.expression
            if query.args.get("order") and not query.args.get("limit"):
                notes.append(where.at(query.args["order"], f"view {view}: ORDER BY without LIMIT is ignored: a "
                                                             f"collection has no order (ddcli query sorts its rows)"))
    if not outputs:
        raise PipelineError(where.at(None, "the model declares no CREATE MATERIALIZED VIEW (nothing to write)"))
    p = Pipeline(name)
    p.notes = notes
    planner = Planner(p, where, lambda n: _table(tables, n), views)
    for view, target in outputs:
        rel = planner.view(view.lower(), target)
        names = [c.name for c in rel.cols]
        for n in names:
            if n in RESERVED_COLUMNS or names.count(n) > 1:
                why = "a reserved name (a trace's multiplicities use it)" if n in RESERVED_COLUMNS else "used twice"
                raise PipelineError(where.at(target, f"view {view}: output column {n!r} is {why}: name it with AS"))
        columns = {c.name: f"`{c.internal}`" for c in rel.cols}
        p.declared_here = where.line_of(target)
        p.output(view, rel.coll.select(**columns) if list(columns) != rel.present() or
                 any(v != f"`{k}`" for k, v in columns.items()) else rel.coll)
    p.declared_here = None
    for view in views:  # views no output reads are checked too, in a pipeline thrown away
        if view not in planner.planned:
            Planner(Pipeline(name), where, lambda n: _table(tables, n), views).view(view)
    return p


def _without_trailing_drops(statements: list[exp.Expression], where: Located) -> list[exp.Expression]:
    """The statements before the trailing ``DROP VIEW name`` ones (a query written to run
    once drops its helper view at its end, as TPC-H's Q15 does): each must name a plain view
    the model declares; a DROP before another statement is refused, as any statement not
    a CREATE is."""
    end = len(statements)
    while end and isinstance(statements[end - 1], exp.Drop) and (statements[end - 1].args.get("kind") or "").upper() == "VIEW":
        end -= 1
    declared = {s.this.this.name.lower() if isinstance(s.this, exp.Schema) else s.this.name.lower()
                for s in statements[:end] if isinstance(s, exp.Create) and s.find(exp.MaterializedProperty) is None}
    for drop in statements[end:]:
        for table in drop.args.get("tables") or []:
            if drop.args.get("materialized") or (table.name.lower() not in declared and not drop.args.get("exists")):
                raise PipelineError(where.at(table, f"DROP VIEW {table.name}: a model drops only a (not materialized) "
                                                    f"view it declares"))
    return statements[:end]


def _parse(text: str, where: Located) -> list[exp.Expression]:
    try:
        statements = [s for s in sqlglot.parse(text, read="duckdb") if s is not None]
    except (ParseError, TokenError) as e:
        errors = getattr(e, "errors", None) or []
        if errors:
            first = errors[0]
            raise PipelineError(f"{where.path}:{first.get('line')}:{first.get('col')}: syntax error: "
                                f"{first.get('description')}") from None
        raise PipelineError(f"{where.path}: syntax error: {str(e).splitlines()[0]}") from None
    if not statements:
        raise PipelineError(f"{where.path}: the model holds no statement")
    return statements


def _table(tables, name: str):
    """An input trace's schema by SQL's rules: the exact name, else the one trace that
    matches it without regard to case."""
    found = tables(name)
    if found is None:
        return None
    return found if isinstance(found, tuple) else (name, found)
