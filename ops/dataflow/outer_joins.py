"""Outer joins, and joins on keys named differently on each side, built from the join
family's operators: a LEFT join is the inner join plus the left rows whose key the right
side does not hold (``antijoin`` on its distinct keys), padded with nulls; RIGHT and FULL
alike. A key pair ``("c_custkey", "o_custkey")`` renames the right side's column to the
left's before the join, so the key has the left name in the output.

Both need a collection's columns when the pipeline is declared: the pre-check's column walk
(ops/dataflow/precheck.py) finds them from the input traces' schemas, which the store gives
the pipeline as it loads (ops/dataflow/load.py).
"""

from __future__ import annotations

from ops.dataflow.graph import declared_at
from ops.dataflow.precheck import node_columns
from ops.errors import PipelineError

SIDES = ("left", "right", "full")


def columns(c, op: str) -> list[str]:
    """The columns of collection ``c``, known before the run, or one error line."""
    p = c._p
    schemas = {}
    for name in p.inputs:
        found = p.tables(name) if p.tables is not None else None
        if found is None:
            raise PipelineError(f"{op} ({declared_at()}): the columns of input {name!r} are not known when the "
                                f"pipeline is declared (no such trace in the store yet)")
        schemas[name] = found[1] if isinstance(found, tuple) else found
    cols = node_columns(p, schemas, in_loops=True).get(c.node.id)
    if cols is None:
        raise PipelineError(f"{op} ({declared_at()}): the columns of {c.node.describe()} are known only when it runs; "
                            f"select them first")
    return list(cols)


def key_pairs(op: str, on) -> list[tuple[str, str]]:
    """``on`` (a column, or a list of columns and (left, right) pairs) as (left, right) pairs."""
    items = [on] if isinstance(on, (str, tuple)) and not (isinstance(on, tuple) and len(on) != 2) else list(on)
    pairs = []
    for item in items:
        if isinstance(item, str) and item:
            pairs.append((item, item))
        elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) and x for x in item):
            pairs.append(item)
        else:
            raise PipelineError(f"{op} ({declared_at()}): on takes columns and (left, right) column pairs, got {item!r}")
    if not pairs:
        raise PipelineError(f"{op} ({declared_at()}): give the key columns to join on")
    return pairs


def aligned(op: str, left, right, on):
    """``right`` with its key columns named as ``left``'s, and the key names."""
    pairs = key_pairs(op, on)
    names = [a for a, _ in pairs]
    renames = {b: a for a, b in pairs if a != b}
    if not renames:
        return right, names
    rcols = columns(right, op)
    for b, a in renames.items():
        if b not in rcols:
            raise PipelineError(f"{op} ({declared_at()}): no column {b!r} on the right (columns: {', '.join(rcols)})")
        if a in rcols and a not in renames:
            raise PipelineError(f"{op} ({declared_at()}): the right side has a column {a!r} besides its key {b!r}; "
                                f"rename it first")
    return right.select(**{renames.get(c, c): f"`{c}`" for c in rcols}), names


def outer_join(left, right, on, side: str):
    """The ``side`` outer join of ``left`` and ``right`` on ``on``."""
    op = f"{side}_join"
    right, names = aligned(op, left, right, on)
    lcols, rcols = columns(left, op), columns(right, op)
    lothers = [c for c in lcols if c not in names]
    rothers = [c for c in rcols if c not in names]
    clash = sorted(set(lothers) & set(rothers))
    if clash:
        raise PipelineError(f"{op} ({declared_at()}): both sides have the columns {', '.join(clash)}; rename them")
    parts = [left.join(right, on=names)]
    if side in ("left", "full"):
        alone = left.antijoin(right.select(*names).distinct(), on=names)
        parts.append(alone.select(*lcols, **{c: "NULL" for c in rothers}))
    if side in ("right", "full"):
        alone = right.antijoin(left.select(*names).distinct(), on=names)
        parts.append(alone.select(*rcols, **{c: "NULL" for c in lothers}))
    return parts[0].concat(*parts[1:])
