"""Arrangements: the old updates of a collection, stored sorted by key, read by key.

An input trace already is an arrangement (its layers are sorted by its key); a derived
collection used by a stateful operator is stored as a state trace of the pipeline. A run
reads only the old updates of the keys its new updates touch. Spark does not prune
Parquet row groups from a join, so:

* a reduce with a small delta looks its keys up with DuckDB inside its own tasks
  (``ops/reduce.py``; :meth:`LiveArrangement.lookup_source`);
* otherwise, when the touched keys are few, we collect them and let DuckDB read just those
  keys' row groups; when they are many, a Spark semi-join over the whole arrangement is
  cheaper than shipping keys around;
* inside loops, where every round reads the same old state, a small stored arrangement is
  read once and kept in memory, and it and this run's earlier rounds are read whole: every
  reader joins or groups by the key, and a semi-join would cost more stages than it saves.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ops.context import EvalContext
from ops.linear import union_all, union_coalesced

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
        return ctx.spark.read.schema(_spark_schema(self.schema)).parquet(*self.files)

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


def duckdb_keyed_read(files: list[str], keys: pa.Table, key: list[str]) -> pa.Table:
    import duckdb

    con = duckdb.connect()
    try:
        con.register("touched_keys", keys)
        quoted = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        cond = " AND ".join(f'u."{k}" IS NOT DISTINCT FROM t."{k}"' for k in key)
        # an IN-list on a single key lets DuckDB prune row groups by min/max statistics
        if len(key) == 1:
            q = (f'SELECT u.* FROM read_parquet([{quoted}]) u WHERE u."{key[0]}" IN '
                 f'(SELECT "{key[0]}" FROM touched_keys)')
            if keys.column(key[0]).null_count:
                q += f' OR u."{key[0]}" IS NULL'
        else:
            q = f"SELECT u.* FROM read_parquet([{quoted}]) u SEMI JOIN touched_keys t ON {cond}"
        return con.sql(q).to_arrow_table()
    finally:
        con.close()


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

    def record(self, df: DataFrame) -> None:
        self.processed.append(df)
        if len(self.processed) > self.COMPACT_EVERY:
            # lazily: materialised by the next job that reads it, no job of its own
            self.processed = [self.processed_union().localCheckpoint(eager=False)]

    def lookup_source(self) -> Arrangement | None:
        """The stored arrangement, when it alone is the old side (outside loops, where
        nothing of this run is processed yet) and can be read by key inside tasks."""
        if self.base is not None or self.processed or self.stored is None or self.stored.is_empty():
            return None
        return None if self.stored.in_loop else self.stored

    def processed_union(self) -> DataFrame | None:
        """This run's processed updates as one frame (coalesced: a union of k frames would
        otherwise cost k times the tasks)."""
        return union_coalesced(self.processed)

    def old_for_keys(self, ctx: EvalContext, delta: DataFrame, key: list[str]) -> DataFrame | None:
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
