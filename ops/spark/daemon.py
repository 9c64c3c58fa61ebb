"""The Python daemon Spark forks its local Python workers from, ddcli's task code imported.

Spark starts one daemon per set of worker settings and forks a worker from it for each
task slot; a worker idle for a minute is stopped, and the next task forks a new one. Each
new worker would import what ddcli's tasks run (the loop's rounds, the reduce and join
kernels, the layer writer: numpy, pyarrow, pandas, DuckDB) on its first task, some 0.3 s, again
and again in a warm engine. Imported here once, before any fork, every worker starts with
them. Only imports happen before the fork, never work: the threads numpy and pyarrow start
on import are idle when it forks (both libraries handle a fork), and anything that fails to
import is left to the worker, as without this module. Used in local mode, where the
workers run this interpreter (ops/spark/session.py).
"""

from __future__ import annotations

import gc


def _preload() -> None:
    try:
        import duckdb  # noqa: F401
        import pandas  # noqa: F401 - pyarrow imports it on a column's first to_numpy (0.25 s)
        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        import ops.io.write  # noqa: F401
        import ops.loops.local  # noqa: F401
        import ops.operators.join_sweep  # noqa: F401
        import ops.reduce.kernel  # noqa: F401
    except Exception:  # noqa: BLE001 - a worker imports what it needs itself
        pass


if __name__ == "__main__":
    _preload()
    # out of the collector's sight: PySpark's worker collects garbage after every task, and
    # walking the preloaded modules' objects each time cost some 40 ms a task
    gc.freeze()
    from pyspark.daemon import manager
    manager()
