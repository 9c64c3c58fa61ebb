"""WITH RECURSIVE as a loop: ``name AS (base UNION [ALL] step)`` is the fixed point of
``x = base + step(x)`` (``iterate``, ops/dataflow/builder.py), distinct for UNION. It is
what SQL's rounds reach (each round adds what the last one found) when they end, and it is
maintained across runs as any loop is."""

from __future__ import annotations

from sqlglot import exp

from ops.errors import PipelineError
from ops.sql.joins import distinct_names
from ops.sql.scope import Col, Rel


def plan_recursive(pl, cte: exp.CTE, name: str, columns: list[str], env: dict, outer) -> Rel:
    where = pl.where
    body = cte.this
    if not isinstance(body, exp.Union) or body.args.get("order") or body.args.get("limit"):
        raise PipelineError(where.at(cte, f"WITH RECURSIVE {name}: write it as base UNION [ALL] step"))
    base = distinct_names(pl.query(body.this, env, outer))
    if columns:
        if len(columns) != len(base.cols):
            raise PipelineError(where.at(cte, f"{len(columns)} column names for {len(base.cols)} columns"))
        base = Rel(base.coll, [Col(None, n, c.internal) for n, c in zip(columns, base.cols)], base.coll_columns)
    internals = base.internals()
    is_set = body.args.get("distinct", True) is not False

    def step(x):
        inner_env = dict(env)
        inner_env[name] = Rel(x, base.cols, internals)
        found = pl.query(body.expression, inner_env, outer)
        if len(found.cols) != len(internals):
            raise PipelineError(where.at(body.expression, f"the recursive step yields {len(found.cols)} columns, "
                                                          f"the base {len(internals)}"))
        aligned = found.coll.select(**{n: f"`{c.internal}`" for n, c in zip(internals, found.cols)})
        nxt = base.coll.concat(aligned)
        return nxt.distinct() if is_set else nxt

    return Rel(base.coll.iterate(step, name=f"recursive_{name}"), base.cols, internals)
