"""Spark's local Python workers keep freed memory for their next arrays (ops/spark/daemon.py).

glibc hands blocks over 128 KB back to the system when they are freed and maps fresh pages
for the next allocation: every array of a loop round's few hundred KB then costs a page
fault per 4 KB. Workers forked from ddcli's daemon keep such blocks in their heap: a task
that allocates and frees arrays of 1.6-2.4 MB as a round does must fault far fewer pages
than the 140,000 it would without.
"""

from __future__ import annotations


def test_local_workers_reuse_freed_arrays_without_page_faults(spark):
    def round_like(n: int):  # arrays of a loop round: a few hundred KB, of varying sizes
        import numpy as np

        for i in range(n):
            a = np.full(200_000 + 1_000 * i, 1.0)
            b = a * 2
            c = b + a
            del a
            c.cumsum()
            del b, c

    def faults(rows):
        import resource

        for _ in rows:
            pass
        round_like(100)  # the heap grows
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        round_like(100)
        yield resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    from ops.spark.session import get_spark

    # (the engine's session: started again if an earlier test stopped it, as an in-process Ctrl-C does)
    [got] = get_spark().sparkContext.parallelize([0], 1).mapPartitions(faults).collect()
    assert got < 5_000, got  # (glibc's defaults: some 140,000)
