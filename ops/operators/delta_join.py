"""Delta-query joins: a join of several relations that keeps no intermediate results.

``p.delta_join([r1, r2, ...])`` is the natural join of the relations on their shared
*variables*. Each relation is given as

* a collection: its columns are the variables;
* ``(collection, "a", "b", ...)``: its columns, in order, bind the variables ``a, b, ...``;
* ``(collection, {"a": "src", "b": "dst"})``: variable ``a`` is column ``src`` (as in
  ``select(a="src")``); columns not named are projected away.

The output has every variable once, in order of first appearance; its updates are the
products of one update of each relation, at the join of their times, with the product of
their diffs. Triangles (``sample_data/pipelines/triangles.py``)::

    p.delta_join([(edges, "a", "b"), (edges, "a", "c"), (edges, "b", "c")])

How it runs
-----------
An ordinary plan ``(r1 ⋈ r2) ⋈ r3`` keeps the intermediate ``r1 ⋈ r2`` as state — for
triangles, every two-path of the graph, which can be far larger than the graph. A delta
query instead writes the change of the join as one rule per input, each joining that
input's changes against the *other inputs only*::

    d(r1 ⋈ r2 ⋈ r3) = dr1 ⋈ r2 ⋈ r3  +  r1' ⋈ dr2 ⋈ r3  +  r1' ⋈ r2' ⋈ dr3

so the only state is each input's arrangement (none at all for an input trace, which is
an arrangement already). A rule's intermediate results exist only while the run computes
them. Each rule joins the relations one at a time, next the one sharing most variables
with what it has so far, reading the partner's old updates for the touched keys only.

Counting each combination once: the alt/neu ordering. If the rules all saw every input
in full, changes arriving together — edges ``(1,2), (1,3), (2,3)`` in one batch — would
be found once by each rule: three triangles instead of one. Differential dataflow orders
the rules in ``AltNeu`` time (see ops/dataflow/calculus.py): rule ``i`` sees the relations before
it at the ``alt`` moment (their concurrent changes visible, ``r'`` above) and the
relations after it at the ``neu`` moment (their concurrent changes hidden), as if the rules
ran one after the other. Here the unit of "concurrent" is the batch the engine processes
at once (a run, or a round of a loop): rule ``i`` joins ``dr_i`` with, for ``j < i``,
the old updates of ``r_j`` *and* this batch's, and for ``j > i`` the old updates only. A
combination of updates is then produced by exactly one rule — the last input with an
update in this batch — at the join of its updates' times, whatever times the batch holds
or how runs split them. Since no time is compared, only joined, this is exact for every
``d`` (partially ordered times, loops) — the moment encoding is not needed, and ``verify``
checks it like any join. tests/pipelines/test_calculus.py also builds the same rules literally with
``differentiate``, ``moments(neu=...)`` and ``integrate`` and checks they agree.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.dataflow.calculus import check_domains
from ops.dataflow.graph import Node
from ops.errors import PipelineError
from ops.operators.context import AT, EvalContext
from ops.operators.join import matchable, sweep_pairs
from ops.operators.linear import union_all

RESOLVED = "_resolved"  # node.args key: [(variables, {variable: column})] once known


# ------------------------------------------------------------------ resolving variables


def _resolve(n: Node, ctx: EvalContext, frames: list) -> list[tuple[list[str], dict[str, str]]] | None:
    """Per relation: its variables (in order) and variable -> column. Needs every frame the
    first time (planning has them all); remembered on the node afterwards."""
    if RESOLVED in n.args:
        return n.args[RESOLVED]
    if any(f is None for f in frames):
        return None
    out = []
    types: dict[str, tuple[str, int]] = {}
    for i, (f, (kind, spec)) in enumerate(zip(frames, n.args["relations"]), 1):
        cols = ctx.data_columns(f)
        if kind == "all":
            mapping = {c: c for c in cols}
        elif kind == "positional":
            if len(spec) != len(cols):
                raise PipelineError(f"{n.describe()}: relation {i} has {len(cols)} column(s) ({', '.join(cols)}) "
                                    f"but {len(spec)} variable(s) ({', '.join(spec)})")
            mapping = dict(zip(spec, cols))
        else:
            for v, c in spec.items():
                if c not in cols:
                    raise PipelineError(f"{n.describe()}: relation {i} has no column {c!r} "
                                        f"(columns: {', '.join(cols)})")
            mapping = dict(spec)
        dtypes = dict(f.dtypes)
        for v, c in mapping.items():
            if v in types and types[v][0] != dtypes[c]:
                raise PipelineError(f"{n.describe()}: variable {v!r} is {types[v][0]} in relation {types[v][1]} "
                                    f"but {dtypes[c]} in relation {i}; cast one with select")
            types.setdefault(v, (dtypes[c], i))
        out.append((list(mapping), mapping))
    for i in range(len(out)):
        _plan(n, out, i)  # refuses relations that share no variable with the others
    n.args[RESOLVED] = out
    return out


def _plan(n: Node, rels, i: int) -> list[tuple[int, list[str]]]:
    """Rule ``i``'s join order: ``[(j, shared variables), ...]``, most shared first."""
    have = list(rels[i][0])
    left = [j for j in range(len(rels)) if j != i]
    steps = []
    while left:
        j = max(left, key=lambda j: (sum(v in have for v in rels[j][0]), -j))
        shared = [v for v in rels[j][0] if v in have]
        if not shared:
            raise PipelineError(f"{n.describe()}: relation {j + 1} shares no variable with the relations joined "
                                f"before it; a delta join needs connected relations (no cross products)")
        steps.append((j, shared))
        have += [v for v in rels[j][0] if v not in have]
        left.remove(j)
    return steps


def _as_variables(ctx: EvalContext, df: DataFrame, mapping: dict[str, str]) -> DataFrame:
    return df.select(*[F.col(c).alias(v) for v, c in mapping.items()], *ctx.tail())


# ------------------------------------------------------------------ evaluating


def delta_join_changes(n: Node, ctx: EvalContext, ins: list, runtime) -> DataFrame | None:
    """One rule per input with changes, each joining them with the other inputs (see above)."""
    check_domains(runtime.p)
    rels = _resolve(n, ctx, ins)
    if rels is None:
        # only from scratch (verify plans nothing): a relation without updates is empty, so is the join
        if AT in ctx.extra:
            return None
        raise PipelineError(f"{n.describe()}: the relations' columns are unknown (the pipeline was not planned)")
    out_vars: list[str] = []
    for vs, _ in rels:
        out_vars += [v for v in vs if v not in out_vars]
    arrs = [None if runtime.planning else runtime.arrangement(i) for i in n.inputs]
    parts = []
    for i, d_i in enumerate(ins):
        if d_i is None:
            continue
        part = _rule(n, ctx, i, d_i, ins, rels, arrs, runtime.planning)
        if part is not None:
            parts.append(part.select(*out_vars, *ctx.tail()))
    return union_all(parts)


def _rule(n: Node, ctx: EvalContext, i: int, d_i: DataFrame, ins: list, rels, arrs, planning: bool) -> DataFrame | None:
    """``dr_i`` joined with the relations before ``i`` (old and new) and after it (old only)."""
    acc = _as_variables(ctx, d_i, rels[i][1])
    steps = _plan(n, rels, i)
    for step, (j, shared) in enumerate(steps):
        mapping = rels[j][1]
        partners = []
        if j < i and ins[j] is not None:
            partners.append(_as_variables(ctx, ins[j], mapping))
        if arrs[j] is not None:
            key = [mapping[v] for v in shared]
            touched = acc.select(*[F.col(v).alias(mapping[v]) for v in shared])
            old = arrs[j].old_for_keys(ctx, touched, key)
            if old is not None:
                partners.append(_as_variables(ctx, old, mapping))
        if not partners:
            return None
        acc = matchable(acc, shared)  # a null variable matches nothing
        # every pair of the rule's changes and the partner's updates: the rule's side is the
        # new one, so that a sweep over time pairs each of them exactly once
        acc = sweep_pairs(ctx, shared, [(acc, True)], [(r, False) for r in partners])
        if not planning and step < len(steps) - 1:
            acc = acc.localCheckpoint()  # computed once: the next step reads its keys, then joins it
    return acc
