"""As-of joins: ``orders.as_of_join(prices, on="item")``.

Each order update gets the value ``prices`` had **at the order update's time**, and keeps
it: later changes to ``prices`` never change past results. It is the calculus construction
of ``ops/dataflow/calculus.py``::

    orders.as_of_join(prices, on)  ==  orders.differentiate().join(prices.moments(), on).integrate()

An order update ``(o, s, δ)`` differentiated is a blip: ``+δ`` at ``alt(s)``, ``-δ`` at
``neu(s)``. Joined with a price update ``(p, u, ε)`` at ``alt(u)`` it gives ``δε`` at
``max(alt(s), alt(u))`` and ``-δε`` at ``max(neu(s), alt(u))``; ``integrate`` keeps the
``alt`` moments. So for ``u <= s`` what remains is ``δε`` at ``s`` (the price as of the
order's time), and for ``u > s`` the two cancel at ``alt(u)`` (a later price changes
nothing). Both outputs are tested equal, with a plain-Python reference, in
tests/pipelines/test_asof.py. This module computes the same result without keeping anything in
moment time:

* **new order updates** (this run) are joined with the prices at times ``<= s``: the old
  updates of ``prices`` for the touched keys (from its arrangement) and this run's new
  ones; the result is placed at the order's time ``s`` — a half join.
* **new price updates** at ``u`` can still reach an order processed by an earlier run
  when ``u <= s``: possible when ``orders`` runs ahead of ``prices`` (a run consumes every
  sealed order, also those beyond the pipeline's frontier). Such orders are kept in the
  state trace of an internal node ``as_of_pending``: every order update as a blip of
  width one in ordinary time, ``+δ`` at ``s`` and ``-δ`` at ``s + 1``, with ``s`` also kept
  as a data column ``_asof_time``. Compacting that trace to the frontier ``P`` cancels
  every blip with ``s < P`` — exactly the orders no future price (at ``u >= P``) can
  reach — so the state holds only the orders at or beyond the frontier: none when the
  inputs advance together.

The state is therefore the arrangement of ``prices`` (nothing extra when it is an input
trace) plus the pending orders; ``orders`` itself is never arranged.

Retractions. An order retraction is an update like any other: it is priced **as of the
retraction's own time** (this is what the construction above means; the join is linear in
``orders``). If the price did not change between the order and its retraction, the bill
disappears exactly. If it changed, the bill at the old price stays and a bill of ``-1`` at
the current price appears: a credit at today's price, not the erasure of the old bill.
Pipelines that need "cancelling removes the original bill" should retract the bill
itself (e.g. antijoin the bills with a collection of cancelled order ids).

Needs ``d = 1``. ``verify`` refuses it (see ops/dataflow/calculus.py): the output depends on the
history of the inputs, which a from-scratch evaluation cannot see.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.dataflow.graph import Node
from ops.errors import PipelineError
from ops.operators.calculus import check_moment_time, refuse_from_scratch
from ops.operators.context import EvalContext
from ops.operators.join import matchable, sweep_pairs
from ops.operators.linear import union_all

PENDING_TIME = "_asof_time"


def _data_columns(ctx: EvalContext, df: DataFrame) -> list[str]:
    return ctx.data_columns(df)


def _need(n: Node, ctx: EvalContext, df: DataFrame, cols: list[str], side: str) -> None:
    have = _data_columns(ctx, df)
    for c in cols:
        if c not in have:
            raise PipelineError(f"{n.describe()}: unknown column {c!r} in as_of_join key ({side}; "
                                f"columns: {', '.join(have)})")


def pending_changes(n: Node, ctx: EvalContext, ins: list, runtime) -> DataFrame | None:
    """Every new order update as a blip: ``+δ`` at ``s`` and ``-δ`` at ``s + 1``, ``s`` kept."""
    check_moment_time(n, ctx, runtime)
    orders = ins[0]
    if orders is None:
        return None
    _need(n, ctx, orders, n.args["on"], "orders side")
    cols = _data_columns(ctx, orders)
    if PENDING_TIME in cols:
        raise PipelineError(f"{n.describe()}: column name {PENDING_TIME!r} is reserved by as_of_join; rename it")
    t = F.col("time")
    plus = orders.select(*cols, t.alias(PENDING_TIME), *ctx.extra, t.alias("time"), F.col("diff"))
    minus = orders.select(*cols, t.alias(PENDING_TIME), *ctx.extra, (t + 1).alias("time"),
                          (-F.col("diff")).alias("diff"))
    return plus.unionByName(minus)


def _orders_of(blips: DataFrame) -> DataFrame:
    """The order updates a frame of blips stands for: the ``+δ`` halves, at their time."""
    return blips.filter(F.col("time") == F.col(PENDING_TIME)).drop(PENDING_TIME)


def _half_join(ctx: EvalContext, orders: DataFrame, prices: list[DataFrame], on: list[str]) -> DataFrame:
    """Each order update with the price updates at times ``<=`` its own, at the order's time:
    a sweep over time pairs each order with the prices alive then (``ops/operators/join.py``)."""
    return sweep_pairs(ctx, on, [(orders, True)], [(p, False) for p in prices], half=True)


def as_of_join_changes(n: Node, ctx: EvalContext, ins: list, runtime) -> DataFrame | None:
    """Each blip joined with the prices at or before its time; each new price with the
    blips still pending at its time."""
    check_moment_time(n, ctx, runtime)
    blips, prices = ins
    on = n.args["on"]
    refuse_from_scratch(n, ctx, "an as-of join")
    if blips is not None and prices is not None:
        _check_sides(n, ctx, blips, prices, on)
    # a null key matches nothing: new updates with one pair with nothing, and old ones meet
    # only new updates
    blips, prices = matchable(blips, on), matchable(prices, on)
    pending_arr = prices_arr = None
    if not runtime.planning:
        pending_arr, prices_arr = runtime.arrangement(n.inputs[0]), runtime.arrangement(n.inputs[1])
    parts = []
    if blips is not None:
        orders = _orders_of(blips)
        partners = [prices]
        if prices_arr is not None:
            partners.append(prices_arr.old_for_keys(ctx, orders, on))
        partners = [p for p in partners if p is not None]
        if partners:
            parts.append(_half_join(ctx, orders, partners, on))
    if prices is not None and pending_arr is not None:
        old = pending_arr.old_for_keys(ctx, prices, on)
        if old is not None:
            parts.append(_half_join(ctx, _orders_of(old), [prices], on))
    return union_all(parts)


def _check_sides(n: Node, ctx: EvalContext, blips: DataFrame, prices: DataFrame, on: list[str]) -> None:
    _need(n, ctx, prices, on, "looked-up side")
    lt, rt = dict(blips.dtypes), dict(prices.dtypes)
    for k in on:
        if lt[k] != rt[k]:
            raise PipelineError(f"{n.describe()}: key {k!r} is {lt[k]} on the left but {rt[k]} on the right; "
                                f"cast one side with select")
    left = set(_data_columns(ctx, blips)) - {PENDING_TIME}
    clash = (left & set(_data_columns(ctx, prices))) - set(on)
    if clash:
        raise PipelineError(f"{n.describe()}: both sides have column(s) {sorted(clash)} besides the key; "
                            f"rename one side with select")
