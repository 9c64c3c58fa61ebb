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

from ops.dataflow.graph import Node, declared_at
from ops.errors import PipelineError

ORDINARY, MOMENTS = "ordinary", "moments"

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


# ------------------------------------------------------------------ the time domain of a node


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


def require_domain(op: str, nodes: list[Node], want: str) -> None:
    """Refuse ``op`` on collections in the other time domain, naming the line that declares it."""
    for n in nodes:
        if domain(n) != want:
            if want == ORDINARY:
                raise PipelineError(f"{op} ({declared_at()}): the collection is already differentiated "
                                    f"(in moment time); integrate() it first")
            raise PipelineError(f"{op} ({declared_at()}): the collection is not differentiated; "
                                f"integrate() undoes differentiate() (or moments())")


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
