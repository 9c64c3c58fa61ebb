"""UNION [ALL], INTERSECT and EXCEPT: the right side's columns take the left side's names
by position; UNION ALL adds multiplicities, UNION, INTERSECT and EXCEPT are of sets (rows
compared as ``IS NOT DISTINCT FROM`` does, a null equal to a null)."""

from __future__ import annotations

from sqlglot import exp

from ops.errors import PipelineError
from ops.sql.joins import distinct_names
from ops.sql.scope import Rel


def plan_set_operation(pl, q: exp.Expression, env: dict, outer) -> Rel:
    where = pl.where
    left = distinct_names(pl.query(q.this, env, outer))
    right = distinct_names(pl.query(q.expression, env, outer))
    if len(left.cols) != len(right.cols):
        raise PipelineError(where.at(q, f"{type(q).__name__.upper()} of {len(left.cols)} and {len(right.cols)} columns"))
    if q.args.get("by_name") or q.args.get("side") or q.args.get("kind"):
        raise PipelineError(where.at(q, "only plain UNION, INTERSECT and EXCEPT are supported"))
    names = left.internals()
    aligned = right.coll.select(**{n: f"`{c.internal}`" for n, c in zip(names, right.cols)})
    is_set = q.args.get("distinct", True) is not False
    if isinstance(q, exp.Union):
        out = left.coll.concat(aligned)
        out = out.distinct() if is_set else out
    else:
        if not is_set:
            raise PipelineError(where.at(q, f"{type(q).__name__.upper()} ALL is not supported"))
        op = left.coll.distinct().semijoin if isinstance(q, exp.Intersect) else left.coll.distinct().antijoin
        out = op(aligned.distinct(), on=names, nulls_equal=True)
    rel = Rel(out, left.cols, names)
    if q.args.get("order") or q.args.get("limit"):
        from ops.sql.select import order_and_limit
        rel = order_and_limit(pl, rel, q, where)
    return rel
