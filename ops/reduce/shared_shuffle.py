"""One shuffle for every reduce of a run that groups the same input by the same key.

A pipeline often reduces one collection several ways by one key (a count, a sum, a min
and a top_k of flights by carrier). Each reduce is its own Python stage (``ops/reduce/operator.py``)
whose source is the same repartition of the same input; written one job per output, the
run shuffled the input, converted it to Arrow and started a Python worker once per output.
Here those outputs are written by ONE job: one repartition by the key, and in each task
every reduce's kernel runs on the task's batches in turn and writes its output's layer
files (as ``ops/io/write.py`` would), so the input is shuffled and held once.

Stages may share when :class:`SharedShuffle` tokens are equal: the same input frame (the
same object), the same key columns and partitions, and no old frame of their own (a first
run, or old updates that each task looks up from the same stored files).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame

from ops.reduce.held_rows import HeldRows
from ops.reduce.old_updates import OldLookup
from ops.spark.python_stage import PythonStage, stage_of
from ops.reduce.budget import task_rows
from ops.io.write import META_SCHEMA, layer_of, write_table_files
from ops.io.write_many import LayerWrite
from storage.layer import Layer

_TAG = "__ddcli_shared_output"


class SharedShuffle:
    """Equal for reduces whose sources are the same shuffle: compares the input frame by
    identity (and keeps it alive, so that its id cannot be reused within the run)."""

    def __init__(self, frame: DataFrame, key: list[str], partitions: int, lookup: list[str] | None):
        self.frame, self.rest = frame, (tuple(key), partitions, None if lookup is None else tuple(lookup))

    def __eq__(self, other) -> bool:
        return isinstance(other, SharedShuffle) and other.frame is self.frame and other.rest == self.rest

    def __hash__(self) -> int:
        return hash((id(self.frame), self.rest))


def shared_token(frame: DataFrame) -> SharedShuffle | None:
    stage = stage_of(frame)
    return None if stage is None else stage.shared


def write_shared(writes: list[LayerWrite]) -> list[tuple[Layer | None, Layer | None]]:
    """Write every output of ``writes`` (frames whose stages share one token) in one Spark
    job; per write, its (sealed, pending) layers (pending is None unless ``split``)."""
    stages: list[PythonStage] = [stage_of(w.df) for w in writes]
    if len({s.shared for s in stages}) != 1 or stages[0].shared is None:
        raise ValueError("write_shared: the frames do not share one shuffle")
    specs = [(s.fn, s.columns, s.consolidated,
              dict(directory=w.directory, schema=w.schema, key=w.key, d=w.d, lower=w.lower, upper=w.upper,
                   since=w.since, split=w.split))
             for s, w in zip(stages, writes)]  # no frames: pickled to the tasks

    budget = task_rows()

    def run_all(batches):
        held = HeldRows(batches, budget)  # the task's input, held once for every reduce
        if held.rows == 0:
            return
        try:
            with OldLookup.shared():  # the reduces look up the same keys: their old rows are read once
                for tag, (fn, columns, summed, spec) in enumerate(specs, start=1):
                    out = [b.select(columns) for b in fn(held)]
                    if not out:
                        continue
                    table = pa.Table.from_batches(out)
                    del out
                    if table.num_rows == 0:
                        continue
                    for meta in write_table_files(table, presummed=summed, **spec):
                        yield meta.append_column(_TAG, pa.array([tag] * meta.num_rows, pa.int64()))
        finally:
            held.close()

    rows = stages[0].source.mapInArrow(run_all, META_SCHEMA + f", {_TAG} long").collect()
    out = []
    for tag, w in enumerate(writes, start=1):
        mine = [r for r in rows if r[_TAG] == tag]
        sealed = layer_of([r for r in mine if not r["pending"]], w.lower, w.upper, w.since, w.seq, w.seq + 1)
        pending = layer_of([r for r in mine if r["pending"]], w.upper, w.upper, w.since, -1, -1) if w.split else None
        out.append((sealed, pending))
    return out
