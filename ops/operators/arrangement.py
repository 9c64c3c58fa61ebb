"""Arrangements: the old updates of a collection, stored sorted by key, read by key.

An input trace already is an arrangement (its layers are sorted by its key); a derived
collection used by a stateful operator is stored as a state trace of the pipeline. A run
reads only the old updates of the keys its new updates touch. Spark does not prune
Parquet row groups from a join, so:

* a reduce with a small delta looks its keys up with DuckDB inside its own tasks
  (``ops/reduce/operator.py``; :meth:`LiveArrangement.lookup_source`);
* otherwise, when the touched keys are few, we collect them and let DuckDB read just those
  keys' row groups; when they are many, a Spark semi-join over the whole arrangement is
  cheaper than shipping keys around;
* inside loops, where every round reads the same old state, a collection's old updates are
  kept as a *loop view*: read whole once per run (when small), hash-partitioned by the key,
  and at every round advanced to the loop's frontier and consolidated (see
  :meth:`LiveArrangement.view`). Every reader joins or groups by the key, so reading the
  whole view is correct, and a reduce finds it already partitioned: only the round's new
  updates are shuffled.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.io.read import read_layers
from ops.operators.context import EvalContext
from ops.operators.linear import advance_and_sum, union_all, union_coalesced
from ops.operators.keyed_reads import duckdb_keyed_read

KEY_LOOKUP_LIMIT = 50_000  # touched keys up to which a keyed DuckDB read pays
CACHE_ROWS = 2_000_000  # stored arrangements read in loops up to this size are read once per run, in memory


@dataclass
class Arrangement:
    files: list[str]
    schema: pa.Schema  # data columns + time columns + diff, as stored
    rows: int = 0
    in_loop: bool = False  # read every round of a loop: worth caching when small
    _cached: DataFrame | None = None

    def is_empty(self) -> bool:
        return not self.files

    def read_all(self, ctx: EvalContext) -> DataFrame:
        return read_layers(ctx.spark, self.files, _spark_schema(self.schema))

    def old_for_keys(self, ctx: EvalContext, delta: DataFrame, key: list[str]) -> DataFrame | None:
        """Old updates whose key appears in ``delta``, and possibly others (None if none).

        Every reader joins or groups by the key, so a superset is correct; it is chosen
        when restricting would cost more Spark stages than it saves.
        """
        if self.is_empty():
            return None
        if self.in_loop and self.rows <= CACHE_ROWS:
            # small and read every round: read once per run, kept in memory, read whole
            if self._cached is None:  # lazily materialised by the first round's job
                self._cached = self.read_all(ctx).localCheckpoint(eager=False)
            return self._cached
        keys = delta.select(*key).distinct()
        small = keys.limit(KEY_LOOKUP_LIMIT + 1).toArrow()
        if small.num_rows <= KEY_LOOKUP_LIMIT:
            if small.num_rows == 0:
                return None
            table = duckdb_keyed_read(self.files, small, key)
            if table.num_rows == 0:
                return None
            return ctx.spark.createDataFrame(table.cast(self.schema), schema=_spark_schema(self.schema))
        cond = [self_col.eqNullSafe(F.col(f"_k_{k}")) for self_col, k in
                ((F.col(k), k) for k in key)]
        renamed = keys.select(*[F.col(k).alias(f"_k_{k}") for k in key])
        on = cond[0]
        for c in cond[1:]:
            on = on & c
        return self.read_all(ctx).join(renamed, on, "left_semi")


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


class LiveArrangement:
    """A collection's old updates during a run: what earlier runs stored, plus what this
    run already processed (earlier rounds of a loop), plus — for a collection entered into
    a loop — the old updates of the outer collection, moved into the loop's times.
    """

    COMPACT_EVERY = 8  # union at most this many processed frames before merging them

    def __init__(self, stored: Arrangement | None = None, base: "LiveArrangement | None" = None,
                 enter: "callable | None" = None):
        self.stored = stored
        self.base = base  # for an entered collection: the outer collection's arrangement
        self.enter = enter  # maps outer update frames into the loop's times
        self.processed: list[DataFrame] = []
        self._views: dict[tuple[str, ...], _LoopView] = {}

    def record(self, df: DataFrame) -> None:
        self.processed.append(df)
        for v in self._views.values():
            v.unfolded.append(df)
        if len(self.processed) > self.COMPACT_EVERY:
            # lazily: materialised by the next job that reads it, no job of its own
            self.processed = [self.processed_union().localCheckpoint(eager=False)]

    def forget_processed(self) -> None:
        """This run's updates became old elsewhere (an entered collection, after its loop)."""
        self.processed = []
        self._views = {}

    def advance_processed(self, first_time: int) -> None:
        """Advance this run's processed updates to ``first_time`` in the first time
        coordinate and consolidate them: rows that differed only there merge.

        Materialised now (one job): the per-round frames it replaces, and the round
        checkpoints behind them, are then released. Kept lazily, they would stay in memory
        until the run's end, and a long run's batches would slow down one after another.
        """
        if not self.processed:
            return
        df = union_coalesced(self.processed)
        first = "time" if "time" in df.columns else "time_0"
        self.processed = [advance_and_sum(df, {first: first_time}).localCheckpoint(eager=True)]
        self._views = {}

    def lookup_source(self) -> Arrangement | None:
        """The stored arrangement, when it alone is the old side (outside loops, where
        nothing of this run is processed yet) and can be read by key inside tasks."""
        if self.base is not None or self.processed or self.stored is None or self.stored.is_empty():
            return None
        return None if self.stored.in_loop else self.stored

    def has_nothing_old(self) -> bool:
        """No old update at all: nothing stored, entered from outside or processed in this run."""
        return self.base is None and not self.processed and (self.stored is None or self.stored.is_empty())

    def for_tasks(self, ctx: EvalContext) -> tuple[list[str], DataFrame | None]:
        """(the stored layer files, which the tasks of a loop read themselves; every other
        old update, as a frame). Nothing is stored apart for a collection entered from an
        outer loop: its old updates are moved in time as they are read."""
        if self.base is not None or self.stored is None or self.stored.is_empty():
            return [], self.whole(ctx)
        return list(self.stored.files), self.processed_union()

    def outer_files_for_tasks(self) -> tuple[list[str], DataFrame | None] | None:
        """For a collection entered into a loop: the outer collection's stored layer files,
        which the loop's tasks read and move into the loop's times themselves, and every
        other old update as a frame; None when the outer collection stores none (or is
        entered from a loop further out)."""
        outer = self.base
        if outer is None or outer.base is not None or outer.stored is None or outer.stored.is_empty():
            return None
        rest = outer.processed_union()
        return list(outer.stored.files), union_all(([self.enter(rest)] if rest is not None else []) + self.processed)

    def processed_union(self) -> DataFrame | None:
        """This run's processed updates as one frame (coalesced: a union of k frames would
        otherwise cost k times the tasks)."""
        return union_coalesced(self.processed)

    def viewable(self, ctx: EvalContext) -> bool:
        """Read through a loop view: inside a loop, with stored parts small enough to read
        whole once per run."""
        return bool(ctx.floor) and self._small()

    def _small(self) -> bool:
        small = self.stored is None or self.stored.rows <= CACHE_ROWS
        return small and (self.base is None or self.base._small())

    def old_for_keys(self, ctx: EvalContext, delta: DataFrame, key: list[str]) -> DataFrame | None:
        if self.viewable(ctx):
            return self.view(ctx, key)
        parts = []
        if self.base is not None:
            outer = self.base.old_for_keys(ctx, delta, key)
            if outer is not None:
                parts.append(self.enter(outer))
        if self.stored is not None:
            old = self.stored.old_for_keys(ctx, delta, key)
            if old is not None:
                parts.append(old)
        mine = self.processed_union()
        if mine is not None:  # this run's own work, in memory: read whole (see above)
            parts.append(mine)
        return union_all(parts)

    def whole(self, ctx: EvalContext) -> DataFrame | None:
        """Every old update: stored, entered from outside, and processed in this run."""
        parts = []
        if self.base is not None:
            outer = self.base.whole(ctx)
            if outer is not None:
                parts.append(self.enter(outer))
        if self.stored is not None and not self.stored.is_empty():
            parts.append(self.stored.read_all(ctx))
        return union_all(parts + self.processed)

    def view(self, ctx: EvalContext, key: list[str]) -> DataFrame | None:
        """The old updates inside a loop, advanced to the loop's frontier ``ctx.floor``,
        consolidated, and hash-partitioned by ``ctx.extra + key`` (``partitions`` of them).

        Every update a round processes or produces is at the loop's current iteration or
        later (``ctx.floor``, one per enclosing loop), so an old update's iteration can be
        raised to it without changing the collection at any time still to be computed —
        differential dataflow's compaction to the frontier. Updates that met at different
        rounds then consolidate: the view holds about one row per key, value and epoch
        instead of one per round, and the reduce kernel's grids lose the past rounds.

        A view is folded forward round by round (new records, then advance and
        consolidate: one partitioned aggregation, no shuffle of the view). When an inner
        loop starts again at a lower iteration, the view is rebuilt from the record
        (``whole``), which keeps every iteration for the store.
        """
        full = tuple(ctx.extra + list(key))
        v = self._views.get(full)
        if v is None or any(a < b for a, b in zip(ctx.floor, v.floor)):
            whole = self.whole(ctx)
            v = self._views[full] = _LoopView(ctx.floor, None, [] if whole is None else [whole])
        if v.unfolded or v.floor != ctx.floor:
            v.frame = _fold(ctx, v.frame, v.unfolded, list(full))
            v.floor, v.unfolded = ctx.floor, []
        return v.frame


@dataclass
class _LoopView:
    floor: tuple[int, ...]  # the iterations the view is advanced to
    frame: DataFrame | None  # consolidated, hash-partitioned by the view's key
    unfolded: list[DataFrame]  # recorded since the last fold


def _fold(ctx: EvalContext, view: DataFrame | None, frames: list[DataFrame], key: list[str]) -> DataFrame | None:
    from ops.spark.session import partitions
    new = union_all(frames)
    if new is not None:
        new = new.repartition(partitions(ctx.spark), *key)
    both = union_all([view, new])  # co-partitioned: the union keeps the partitioning
    if both is None:
        return None
    loop_cols = ctx.tcols[len(ctx.tcols) - len(ctx.floor):]
    # grouping by columns that include the key needs no shuffle: rows stay where they are
    return advance_and_sum(both, dict(zip(loop_cols, ctx.floor))).localCheckpoint(eager=False)
