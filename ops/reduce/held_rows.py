"""A task's input rows under a budget: in Arrow up to it, beyond it in a DuckDB table that spills.

A Spark task receives its partition as a stream of Arrow batches. Collecting them all is
what a task usually does, but a partition's size follows the skew of its keys (every row
of a hot key lands in one task), so a task that collects it has no bound on its memory.
:class:`HeldRows` collects batches while they are at most ``budget`` rows; past that it
moves them into a temporary DuckDB table, whose memory is limited and which spills to a
folder of the worker's own, and the task then works on the rows in parts of at most the
budget (``ops/reduce/budget.py`` ``reduce_held``).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.columnar import row_ids
from ops.reduce.old_updates import limit_memory
from storage.sql.duck import quote

TABLE = "held_rows"
INSERT_ROWS = 1 << 17  # spilled rows move into DuckDB in chunks of about this many


class HeldRows:
    """The batches of one task: ``table`` (Arrow) when they are at most ``budget`` rows,
    else ``con`` holding them as the DuckDB table :data:`TABLE`. ``rows`` counts them."""

    def __init__(self, batches: Iterable[pa.RecordBatch], budget: int):
        self.table: pa.Table | None = None
        self.con = None
        self.schema: pa.Schema | None = None
        self.rows = 0
        self._grouped_by: list[str] | None = None  # the key the table's rows are grouped by
        held: list[pa.RecordBatch] = []
        pending = 0  # rows held since the spill, inserted a chunk at a time (an INSERT costs ~2 ms)
        for b in batches:
            if b.num_rows == 0:
                continue
            self.schema = b.schema
            self.rows += b.num_rows
            held.append(b)
            if self.con is not None:
                pending += b.num_rows
                if pending >= INSERT_ROWS:
                    self._insert(pa.Table.from_batches(held))
                    held, pending = [], 0
            elif self.rows > budget:
                self._spill(pa.Table.from_batches(held))
                held = []
        if self.con is not None and held:
            self._insert(pa.Table.from_batches(held))
        elif self.con is None and held:
            self.table = pa.Table.from_batches(held)

    @classmethod
    def of(cls, batches, budget: int) -> "HeldRows":
        """``batches`` held, unless they are held already (reduces that share one task's input)."""
        return batches if isinstance(batches, HeldRows) else cls(batches, budget)

    def __iter__(self):
        """The rows as batches (all of them: for a consumer that holds its input whole)."""
        if self.table is not None:
            yield from self.table.to_batches()
        elif self.con is not None:
            yield from self.select().to_batches()

    def grouped(self, key: list[str]) -> pa.Table:
        """The held table (not spilled) sorted by ``key``, once for every reduce of the task
        that groups by it: the kernels' slices of whole keys are then zero-copy
        (``ops/reduce/kernel.py`` ``key_slices``), their sorts find the rows in runs
        (``ops/columnar.py`` ``lex_order``), and their outputs come out nearly in the
        layer's order, which sorts several times faster (key types Arrow cannot sort are
        grouped by key instead, in order of first appearance)."""
        if self._grouped_by != list(key) and self.table.num_rows > 1:
            try:
                order = pc.sort_indices(self.table.select(key), sort_keys=[(k, "ascending") for k in key])
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
                kid, _ = row_ids(self.table, key, ordered=False)  # ids in order of first appearance
                order = pa.array(np.argsort(kid, kind="stable"))
            self.table = self.table.take(order)
            self._grouped_by = list(key)
        return self.table

    @property
    def spilled(self) -> bool:
        return self.con is not None

    def _spill(self, table: pa.Table) -> None:
        import duckdb

        self.con = limit_memory(duckdb.connect())
        self.con.register("_batch", table)
        self.con.execute(f"CREATE TEMP TABLE {TABLE} AS SELECT * FROM _batch")
        self.con.unregister("_batch")

    def _insert(self, table: pa.Table) -> None:
        self.con.register("_batch", table)
        self.con.execute(f"INSERT INTO {TABLE} SELECT * FROM _batch")
        self.con.unregister("_batch")

    def keep_touched(self, key: list[str]) -> None:
        """Keep only the spilled rows of keys that have a new update (``_new``): the others'
        outputs cannot change (a loop round's task receives its whole share of the view)."""
        cond = " AND ".join(f"h.{quote(c)} IS NOT DISTINCT FROM n.{quote(c)}" for c in key)
        keys = ", ".join(quote(c) for c in key)
        self.con.execute(f"CREATE TEMP TABLE _touched AS SELECT h.* FROM {TABLE} h SEMI JOIN "
                         f"(SELECT DISTINCT {keys} FROM {TABLE} WHERE _new) n ON {cond}")
        self.con.execute(f"DROP TABLE {TABLE}")
        self.con.execute(f"ALTER TABLE _touched RENAME TO {TABLE}")
        self.rows = int(self.con.sql(f"SELECT count(*) FROM {TABLE}").fetchall()[0][0])

    def select(self, where: str = "TRUE") -> pa.Table:
        """Spilled rows matching ``where`` (DuckDB SQL over :data:`TABLE`), in the input's schema."""
        return self.con.sql(f"SELECT * FROM {TABLE} WHERE {where}").to_arrow_table().cast(self.schema)

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None
        self.table = None
