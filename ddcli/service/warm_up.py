"""The service's warm-up: after its first command, one small pipeline of every kind of work.

A warm engine's first run of a pipeline still paid for what its first command never ran:
the Python daemon its tasks fork from (a word count runs no Python task), and the JVM
compiling the code of each kind of job the first time it runs one (a loop's task, the
reduce and join kernels, a checkpoint). Reach's first run on a warm engine took 2-3 s where
its next runs take 0.7 s. So once the first command has answered its client, the service
runs a pipeline that holds a loop, a reduce and a join over a few hundred rows, in a store
of its own that it then removes, with the Python tasks' environment of that command
(PySpark keeps a daemon per environment), under a job group of its own (its jobs are not
counted as a command's).

It runs once per service, between commands: a command that arrives meanwhile waits for it
(a second or two, once), since a command changes the process's environment, folder and
fault points, which a warm-up running beside it would read; a service that stops cancels
it. Nothing of it is kept (a killed service's leftover folder goes when the next service
of its key warms up); a failure is a line in the service's log.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

JOB_GROUP = "ddcli-warm-up"

PIPELINE = '''
def pipeline(p):
    edges = p.input("edges")
    seeds = p.input("roots")
    forward = edges.select(node="src", next="dst")
    p.output("out_degree", edges.count(by="src"))
    p.output("two_hops", forward.join(edges.select(next="src", far="dst"), on="next"))
    p.output("reached", seeds.iterate(
        lambda seen: seen.join(forward, on="node").select(node="next").concat(seeds).distinct()), key=["node"])
'''


class WarmUp:
    """One warm-up, run in a thread of its own (a job group is per thread) by :meth:`start`;
    :meth:`wait` before the next command."""

    def __init__(self, folder: str, key: str, task_env: dict[str, str], log):
        self.folder, self.prefix, self.task_env, self.log = folder, f"warm-up-{key}-", task_env, log
        self.thread = threading.Thread(target=self._run, name="ddcli-service-warm-up", daemon=True)
        for name in os.listdir(folder):  # what a killed service of this key left (one runs at a time)
            if name.startswith(self.prefix):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)

    def start(self) -> None:
        self.thread.start()

    def wait(self, timeout: float = 120.0) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():  # a hung JVM: the command finds out for itself
            self.log(f"warm-up: still running after {timeout:g} s; the command goes ahead")

    def cancel(self) -> None:
        """End it early (the service stops): its jobs cancelled, its folder removed."""
        if not self.thread.is_alive():
            return
        from ops.spark.session import running_spark
        spark = running_spark()
        if spark is not None:
            try:
                spark.sparkContext.cancelJobGroup(JOB_GROUP)
            except Exception as e:  # noqa: BLE001 - the service stops whatever the warm-up does
                self.log(f"warm-up: cancelling its jobs failed: {type(e).__name__}: {e}")
        self.wait(10.0)

    def _run(self) -> None:
        from ops.spark import session

        work = tempfile.mkdtemp(prefix=self.prefix, dir=self.folder)
        try:
            spark = session.running_spark()
            if spark is None:  # the first command did not need Spark: nothing to warm yet
                return
            started = time.monotonic()
            session.start_command(self.task_env)
            spark.sparkContext.setJobGroup(JOB_GROUP, "ddcli service warm-up", True)
            _run_once(work)
            self.log(f"warm-up: done in {time.monotonic() - started:.1f} s")
        except Exception as e:  # noqa: BLE001 - a warm-up that fails only leaves the engine colder
            self.log(f"warm-up: failed: {type(e).__name__}: {e}")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _updates(columns: dict[str, list], at: int):
    import pyarrow as pa

    n = len(next(iter(columns.values())))
    return pa.table({**{c: pa.array(v, pa.int64()) for c, v in columns.items()},
                     "time": pa.array([at] * n, pa.int64()), "diff": pa.array([1] * n, pa.int64())})


def _ingest(store, name: str, table, work: str, **options) -> None:
    import pyarrow.parquet as pq

    path = os.path.join(work, f"{name}-{table.column('time')[0].as_py()}.parquet")
    pq.write_table(table, path)
    store.ingest(name, [path], **options)


def _run_once(work: str) -> None:
    from ops.run.run import run_pipeline
    from storage.store import Store

    store = Store(os.path.join(work, "store"))
    nodes = 200
    _ingest(store, "edges", _updates({"src": [i % nodes for i in range(400)],
                                      "dst": [(i * 7 + 1) % nodes for i in range(400)]}, 0), work)
    _ingest(store, "roots", _updates({"node": [0, 1, 2]}, 0), work, upper="{}")
    with open(os.path.join(work, "warm_up.py"), "w") as fh:
        fh.write(PIPELINE)
    run_pipeline(store, os.path.join(work, "warm_up.py"))
