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

A worker runs many tasks, of many commands when a warm engine keeps the session: before
each task it forgets the user's modules the tasks before imported (ops/spark/user_code.py),
so a function that reaches it by name (cloudpickle sends a function of an importable
module as its module's name and its own) runs the module's current code, as in a new
process.
"""

from __future__ import annotations

import gc
import importlib
import sys


def _keep_freed_memory() -> None:
    """Let glibc keep freed blocks of up to 32 MB in the heap for the next allocation:
    by default it returns blocks over 128 KB to the system at once and maps fresh zeroed
    pages for the next, and a loop's rounds allocate hundreds of such arrays (a node-set
    reach task took 9,500 page faults per fixed point, ~10% of its time; 100 with this).
    Set before the fork, the workers inherit it; elsewhere than glibc, nothing changes."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
        libc.mallopt(m_mmap_threshold, 32 << 20)
        libc.mallopt(m_trim_threshold, 64 << 20)  # (returned once 64 MB lie free at the top)
        libc.mallopt(m_top_pad, 16 << 20)
    except (OSError, AttributeError):
        pass


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


def _current_user_code_each_task() -> None:
    """Wrap PySpark's per-task entry of a forked worker (``pyspark.daemon.worker``, which its
    manager looks up at each task) to forget the user's modules first."""
    import pyspark.daemon

    from ops.spark.user_code import forget_user_modules
    run_task = pyspark.daemon.worker
    kept = set(sys.modules)

    def worker(sock, authenticated):
        nonlocal kept
        kept = forget_user_modules(kept)
        importlib.invalidate_caches()  # a module file created since the last task is found
        return run_task(sock, authenticated)

    pyspark.daemon.worker = worker


if __name__ == "__main__":
    _keep_freed_memory()
    _preload()
    _current_user_code_each_task()
    # out of the collector's sight: PySpark's worker collects garbage after every task, and
    # walking the preloaded modules' objects each time cost some 40 ms a task
    gc.freeze()
    from pyspark.daemon import manager
    manager()
