"""Calculus on collections: ``differentiate``, ``integrate`` and moment time.

A collection's **derivative** holds each change only at the moment it happens: every
update ``(data, t, diff)`` appears at ``t`` and is retracted just after ``t``, before any
later time. ``integrate`` turns such a collection of instantaneous changes back into an
ordinary one. Between the two, any operators may run; with linear ones (or nothing) in
between, ``integrate(differentiate(c)) == c``. The two uses that motivate them are built
in ``ops/operators/asof.py`` (as-of joins) and ``ops/operators/delta_join.py`` (delta-query joins).

Moment time
-----------
"Just after ``t`` but before any later time" is no time of the trace's lattice, so a
differentiated collection lives in *moment time*: each time ``t`` has two moments, ``alt``
(the change happens) before ``neu`` (just after), and no other time can tell them apart —
differential dataflow's ``AltNeu`` timestamps. For times of one coordinate (``d = 1``) they
are encoded in the same int64 column by doubling::

    alt(t) = 2t        neu(t) = 2t + 1

which is an order embedding of ``AltNeu`` into the integers: ``(t, a) <= (u, b)`` in
``AltNeu`` iff ``enc(t, a) <= enc(u, b)``, and the lattice join (``max``) of two encoded
moments is the encoding of their ``AltNeu`` join. Every operator of the engine (joins take
the greatest time, reduce works on any times) therefore runs unchanged in moment time.
The laws are stated next to :func:`encode` and tested with hypothesis.

* ``differentiate``: ``(data, t, diff)`` -> ``(data, 2t, diff)`` and ``(data, 2t+1, -diff)``.
* ``moments(neu=False)``: an ordinary collection brought into moment time, every update at
  its time's ``alt`` moment (``2t``): the same collection, seen by moment-time operators.
  With ``neu=True`` every update is at its ``neu`` moment (``2t+1``): at the ``alt``
  moment of ``t`` it still shows the collection as it was before ``t``'s changes — the
  "nudge" that lets a delta query hide concurrent changes of some inputs.
* ``integrate``: keeps the updates at ``alt`` moments, at their time (``2t -> t``), and
  drops those at ``neu`` moments. ``integrate(differentiate(c)) = c`` update for update,
  and every linear operator commutes with both maps (they change only times).

Rules, checked before Spark does any work (one :class:`PipelineError` line naming the
operator):

* **d = 1 only.** ``differentiate``, ``moments``, ``integrate`` and ``as_of_join`` need
  times of one coordinate; a pipeline with ``d >= 2`` (or a use inside a loop, where times
  gain an iteration coordinate) is refused: "differentiate needs d = 1". The delta-query
  join (``ops/operators/delta_join.py``) needs no moments and works for every ``d``.
* **Moments never reach a trace.** An output of a collection in moment time is refused —
  ``integrate()`` it first. (Integrating implicitly would silently drop the ``neu``
  moments, which is rarely what was meant.)
* **No mixing.** An operator whose inputs are in different times (a differentiated
  collection joined with an ordinary one) is refused; bring the ordinary one in with
  ``.moments()``. A differentiated collection cannot enter a loop, nor be differentiated
  again.
* **Times below 2**62.** Doubling must fit in int64; a larger time fails the run with a
  message saying so.
* **verify** cannot recompute a differentiated collection from scratch: its value at a
  time depends on *when* each input change happened, which the inputs' collections at
  that time do not say (``ops/verify/verify.py`` evaluates every checked time with all updates
  at time zero). ``verify`` of a pipeline using ``differentiate`` or ``as_of_join`` is
  refused with one line saying so; ``integrate``, ``moments`` and ``delta_join`` verify
  as usual.

State: stateful operators between ``differentiate`` and ``integrate`` keep their
arrangements like any other, in moment time. The engine compacts state to the pipeline's
frontier ``P`` in ordinary units, which in moment time (``2P``) is looser — correct, but
pulses at times in ``[P/2, P)`` are only cancelled by later compactions. The two
operators below avoid state in moment time altogether: ``as_of_join`` keeps only the
orders not yet older than the frontier, ``delta_join`` only its inputs' arrangements.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.operators.context import AT, EvalContext
from ops.dataflow.builder import Node, PipelineError

if TYPE_CHECKING:  # pragma: no cover
    from ops.run.evaluate import Runtime
    from ops.dataflow.builder import Collection

ORDINARY, MOMENTS = "ordinary", "moments"

# the operators this module evaluates (ops/run/evaluate.py dispatches them here)
CALCULUS_OPS = {"differentiate", "integrate", "moments", "as_of_pending", "as_of_join", "delta_join"}

# times must stay below this for 2t + 1 to fit in int64
MAX_TIME = 2**62 - 1


# ------------------------------------------------------------------ the time encoding (laws)


def encode(t: int, neu: bool = False) -> int:
    """The moment ``(t, alt)`` or ``(t, neu)`` as one int64: ``2t`` or ``2t + 1``.

    Laws (tests/pipelines/test_calculus.py checks them with hypothesis), for times ``t, u`` of one
    coordinate and moments ``a, b``:

    * order embedding: ``altneu_leq((t, a), (u, b))  iff  encode(t, a) <= encode(u, b)``;
    * joins are preserved: ``encode(*altneu_join((t, a), (u, b))) == max(encode(t, a), encode(u, b))``;
    * no ordinary time sits between the moments of ``t``: ``alt(t) < neu(t) < alt(t + 1)``;
    * ``decode(encode(t, n)) == (t, n)`` and ``integrate_time(encode(t, False)) == t``.
    """
    if not (-MAX_TIME - 1 <= t <= MAX_TIME):
        raise ValueError(f"time {t} is too large for moment time (times must be below 2**62)")
    return 2 * t + (1 if neu else 0)


def decode(m: int) -> tuple[int, bool]:
    """The ``(time, neu)`` a moment encodes."""
    return m >> 1, bool(m & 1)


def integrate_time(m: int) -> int | None:
    """Where ``integrate`` puts an update at moment ``m``: its time, or None (dropped) at ``neu``."""
    t, neu = decode(m)
    return None if neu else t


def altneu_leq(a: tuple[int, bool], b: tuple[int, bool]) -> bool:
    """Differential dataflow's ``AltNeu`` order: equal times compare ``alt < neu``."""
    return a[1] <= b[1] if a[0] == b[0] else a[0] <= b[0]


def altneu_join(a: tuple[int, bool], b: tuple[int, bool]) -> tuple[int, bool]:
    """The least upper bound of two moments in ``AltNeu`` (times of one coordinate)."""
    t = max(a[0], b[0])
    return t, (a[1] and a[0] == t) or (b[1] and b[0] == t)


# ------------------------------------------------------------------ declaring (pipeline.py calls these)


def domain(node: Node, _memo: dict | None = None) -> str:
    """Whether a node's updates are at ordinary times or at moments (differentiated)."""
    memo = {} if _memo is None else _memo
    if node.id in memo:
        return memo[node.id]
    op = node.op
    if op in ("differentiate", "moments"):
        out = MOMENTS
    elif op in ("integrate", "input", "loop", "as_of_pending", "as_of_join"):
        out = ORDINARY
    elif op == "leave":
        out = domain(node.inputs[1], memo)
    else:
        doms = {domain(i, memo) for i in node.inputs}
        out = MOMENTS if MOMENTS in doms else ORDINARY
    memo[node.id] = out
    return out


def _where() -> str:
    from ops.dataflow.builder import _caller
    return _caller()


def _require(op: str, colls: list["Collection"], want: str) -> None:
    for c in colls:
        if domain(c.node) != want:
            if want == ORDINARY:
                raise PipelineError(f"{op} ({_where()}): the collection is already differentiated "
                                    f"(in moment time); integrate() it first")
            raise PipelineError(f"{op} ({_where()}): the collection is not differentiated; "
                                f"integrate() undoes differentiate() (or moments())")


def differentiate(c: "Collection") -> "Collection":
    _require("differentiate", [c], ORDINARY)
    return c._new("differentiate", [c])


def moments(c: "Collection", neu: bool = False) -> "Collection":
    _require("moments", [c], ORDINARY)
    return c._new("moments", [c], neu=bool(neu))


def integrate(c: "Collection") -> "Collection":
    _require("integrate", [c], MOMENTS)
    return c._new("integrate", [c])


def as_of_join(orders: "Collection", prices: "Collection", on) -> "Collection":
    from ops.dataflow.builder import Collection, _cols

    if not isinstance(prices, Collection):
        raise PipelineError(f"as_of_join ({_where()}): expects a collection to look values up in, got {prices!r}")
    on = _cols(on)
    if not on:
        raise PipelineError(f"as_of_join ({_where()}): give the key columns to join on")
    _require("as_of_join", [orders, prices], ORDINARY)
    pending = orders._new("as_of_pending", [orders], on=on)
    return pending._new("as_of_join", [pending, prices], on=on)


# ------------------------------------------------------------------ checking a whole pipeline

_checked: "weakref.WeakSet" = weakref.WeakSet()


def check_domains(p) -> None:
    """Refuse moments reaching an output, a loop, or an operator mixed with ordinary times."""
    if p in _checked:
        return
    memo: dict = {}
    for n in p.nodes:
        if n.op in ("loop",):
            continue
        doms = [domain(i, memo) for i in n.inputs if i.op != "loop"]
        if n.op == "output" and doms[0] == MOMENTS:
            raise PipelineError(f"output {n.args['trace']!r} ({n.where}): the collection is differentiated "
                                f"(its times are moments, which no trace holds); integrate() it first")
        if n.op in ("enter", "variable") and MOMENTS in doms:
            raise PipelineError(f"{n.describe()}: a differentiated collection cannot enter a loop "
                                f"(moments need d = 1); integrate() it first")
        if n.op not in ("differentiate", "moments", "integrate") and len(set(doms)) > 1:
            raise PipelineError(f"{n.describe()}: combines a differentiated collection (in moment time) with an "
                                f"ordinary one; bring the ordinary one into moment time with .moments(), "
                                f"or integrate() the other first")
    _checked.add(p)


# ------------------------------------------------------------------ evaluating


def evaluate_calculus(n: Node, ctx: EvalContext, ins: list, runtime: "Runtime") -> DataFrame | None:
    """The changes of a calculus node (dispatched from ops/run/evaluate.py ``_evaluate_node``)."""
    check_domains(runtime.p)
    if n.op == "delta_join":
        from ops.operators.delta_join import evaluate_delta_join
        return evaluate_delta_join(n, ctx, ins, runtime)
    _need_d1(n, ctx)
    if n.op in ("as_of_pending", "as_of_join"):
        from ops.operators import asof
        if n.op == "as_of_pending":
            return asof.pending(n, ctx, ins[0])
        return asof.evaluate_as_of_join(n, ctx, ins, runtime)
    df = ins[0]
    if n.op == "differentiate":
        refuse_from_scratch(n, ctx, "a differentiated collection")
        if df is None:
            return None
        return differentiate_frame(df)
    if df is None:
        return None
    if n.op == "moments":
        return moments_frame(df, n.args.get("neu", False))
    if n.op == "integrate":
        return integrate_frame(df)
    raise PipelineError(f"{n.describe()}: unknown operator {n.op!r}")


def _need_d1(n: Node, ctx: EvalContext) -> None:
    if ctx.d != 1:
        what = "as_of_join" if n.op.startswith("as_of") else "differentiate"
        inside = " (inside a loop, times gain an iteration coordinate)" if n.scope is not None else ""
        raise PipelineError(f"{n.describe()}: {what} needs d = 1 (times of one coordinate); "
                            f"this collection's times have {ctx.d} coordinates{inside}")


def refuse_from_scratch(n: Node, ctx: EvalContext, what: str) -> None:
    """verify evaluates every time from the inputs' collections at that time alone."""
    if AT in ctx.extra:
        raise PipelineError(f"{n.describe()}: verify cannot recompute {what} from scratch: it depends on when "
                            f"each input change happened, not only on the inputs at each time")


def _checked_time(col) -> "F.Column":
    return F.when(col > F.lit(MAX_TIME), F.raise_error(F.lit(
        f"a time is {MAX_TIME + 1} or more: too large for moment time (differentiate doubles times)"))
    ).otherwise(col)


def differentiate_frame(df: DataFrame) -> DataFrame:
    """Each update at its ``alt`` moment, and retracted at its ``neu`` moment."""
    t = _checked_time(F.col("time"))
    cols = [c for c in df.columns if c not in ("time", "diff")]
    alt = df.select(*cols, (t * 2).alias("time"), F.col("diff"))
    neu = df.select(*cols, (t * 2 + 1).alias("time"), (-F.col("diff")).alias("diff"))
    return alt.unionByName(neu)


def moments_frame(df: DataFrame, neu: bool) -> DataFrame:
    """An ordinary collection in moment time: every update at its ``alt`` (or ``neu``) moment."""
    t = _checked_time(F.col("time")) * 2 + (1 if neu else 0)
    return df.withColumn("time", t).select(*df.columns)


def integrate_frame(df: DataFrame) -> DataFrame:
    """Keep the updates at ``alt`` moments, at their time; drop those at ``neu`` moments."""
    kept = df.filter(F.col("time").bitwiseAND(F.lit(1)) == 0)
    return kept.withColumn("time", F.shiftright(F.col("time"), 1)).select(*df.columns)
