"""One Python stage per task: a reduce's kernel and the layer writer in one ``mapInArrow``.

Spark runs each ``mapInArrow`` in a Python worker of its own, and does not chain two of
them: a reduce whose output is written straight away (it is already partitioned by the
output's key) would cost every task two Python workers, each holding a partition, and
an Arrow round trip through the JVM between them. A frame made by :func:`python_stage`
remembers its input and its function, so that :func:`then` can run the next function
(the writer) in the same task, on the first one's batches as they come.

Only the frame :func:`python_stage` returns carries its stage: any operator applied to it
makes a new frame, which the writer then reads as an ordinary one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame

Batches = Iterator[pa.RecordBatch]

_ATTRIBUTE = "_ddcli_python_stage"


@dataclass(frozen=True)
class PythonStage:
    source: DataFrame  # the stage's input, already partitioned as the output needs
    fn: Callable[[Batches], Batches]  # what the stage computes, batch by batch
    columns: list[str]  # the columns of the stage's frame (a subset of ``fn``'s output)
    consolidated: bool = False  # no two rows of a task share (data, time), no diff is 0
    shared: object = None  # equal for stages whose sources are the same shuffle (ops/reduce/shared_shuffle.py)


def python_stage(source: DataFrame, fn: Callable[[Batches], Batches], schema, columns: list[str], *,
                 consolidated: bool = False, shared: object = None) -> DataFrame:
    """``source.mapInArrow(fn, schema)`` keeping ``columns``, with its stage remembered
    (``consolidated``: what each task yields is consolidated, so a writer need only sort;
    ``shared``: a token equal for stages whose ``source`` is the same shuffle of the same
    input, so that one job may run them all)."""
    frame = source.mapInArrow(fn, schema).select(*columns)
    setattr(frame, _ATTRIBUTE, PythonStage(source, fn, list(columns), consolidated, shared))
    return frame


def stage_of(frame: DataFrame) -> PythonStage | None:
    return getattr(frame, _ATTRIBUTE, None)


def then(stage: PythonStage, fn: Callable[[Batches], Batches], schema) -> DataFrame:
    """The stage followed by ``fn`` in the same task: ``fn`` receives the stage's batches
    (only its ``columns``) as they are produced."""
    first, columns = stage.fn, stage.columns

    def both(batches: Batches) -> Batches:
        return fn(batch.select(columns) for batch in first(batches))

    return stage.source.mapInArrow(both, schema)
