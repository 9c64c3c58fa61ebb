"""Work that Spark tasks do whole: a plain job of a few tasks, and the files they wrote.

A task that reads its rows from layer files itself and writes its results as layer files
needs no DataFrame: a plain job costs about half a DataFrame job's planning, code
generation and output checkpoint. Used by a loop that runs in one task
(``ops/loops/direct.py``) and by a join whose sides are the run's inputs
(``ops/operators/join_direct.py``).
"""

from __future__ import annotations

from typing import Callable, Iterator

from pyspark.accumulators import AccumulatorParam


def run_tasks(spark, count: int, task: Callable[[int], None]) -> None:
    """Run ``task(i)`` for ``i`` in ``range(count)``, each in a task of one plain Spark job;
    what they compute they write themselves, and report in accumulators."""
    def each(rows):
        indices = list(rows)  # drained: PySpark reuses a worker only when its input was read whole
        for i in indices:
            task(i)
        return iter(())

    spark.sparkContext.parallelize(range(count), count).mapPartitions(each).collect()


def run_one_task(spark, task: Callable[[Iterator], Iterator]) -> None:
    """Run ``task`` (a partition function over no rows) as the one task of a plain job."""
    def whole(_i):
        for _ in task(iter(())):
            pass

    run_tasks(spark, 1, whole)


class WrittenFiles(AccumulatorParam):
    """The layer files tasks wrote: ``(trace, META_SCHEMA row)`` pairs (ops/io/write.py),
    gathered with the tasks' results (no job of their own)."""

    @staticmethod
    def zero(value):
        return []

    @staticmethod
    def addInPlace(a, b):
        return a + b
