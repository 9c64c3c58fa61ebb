"""Helpers for the operations tests (test_operations, test_faults, test_guide, test_bad_inputs).

* :func:`ddcli_process` / :func:`run_ddcli`: ``python -m ddcli`` in a real process, with the
  repository importable and no ``DDCLI_*`` variable of the test run leaking in;
* :class:`WordStream`: random word-count update files (insertions and retractions of words
  present) and the plain-Python fold they are checked against;
* :func:`trace_at` / :func:`wordcount_reference`: a trace accumulated at a time, read
  with pyarrow (no query engine), and what the word count must hold there.
"""

from __future__ import annotations

import csv
import os
import random
import subprocess
import sys
from collections import Counter

from tests.helpers import REPO

PIPELINES = os.path.join(REPO, "sample_data", "pipelines")


# kept from the test run's environment: the test session's folder of warm engines
_KEPT = ("DDCLI_SERVICE_DIR", "DDCLI_SERVICE", "DDCLI_SERVICE_IDLE")

# The suite's Spark evaluates expressions without generating and compiling code: the tests'
# many small jobs of ever new plans spent more of the two cores compiling (Janino, then the
# JIT) than computing; results are the same either way (Spark evaluates this way whenever
# generated code fails to compile).
# Measured: tests/pipelines/test_operators.py 227 s -> 193 s, CPU 436 s -> 367 s.
SPARK_CONF = "spark.sql.codegen.wholeStage=false;spark.sql.codegen.factoryMode=NO_CODEGEN"
# A command's JVM in a process of its own lives seconds: the JIT's first tier alone (C1).
# Measured: the real-process tests of test_run_crash.py and test_bad_inputs.py 118 s -> 82 s,
# CPU 233 s -> 155 s. (The test process's own session lives for the whole suite: both tiers.)
PROCESS_SPARK_CONF = SPARK_CONF + ";spark.driver.defaultJavaOptions=-XX:TieredStopAtLevel=1"


def ddcli_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDCLI_") or k in _KEPT}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    # small Spark for many short-lived processes on a small machine
    env["DDCLI_SHUFFLE_PARTITIONS"] = "2"
    env["DDCLI_SPARK_MEMORY"] = "1g"
    env["DDCLI_SPARK_CONF"] = PROCESS_SPARK_CONF
    env["DDCLI_NO_PROGRESS"] = "1"
    env.update(extra or {})
    return env


def ddcli_process(args: list[str], store: str, *, env: dict | None = None, **kw) -> subprocess.Popen:
    """Start ``python -m ddcli ARGS --store STORE`` in its own process group (so a kill
    takes its JVM and Python workers with it)."""
    return subprocess.Popen([sys.executable, "-m", "ddcli", *args, "--store", store], env=ddcli_env(env),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


def run_ddcli(args: list[str], store: str, *, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddcli", *args, "--store", store], env=ddcli_env(env),
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ word streams


VOCABULARY = ["apple", "banana", "cherry", "date", "elderberry", "fig", "grape", "kiwi", "lemon",
              "mango", "nectarine", "olive"]


class WordStream:
    """Update files for a trace ``words`` (column ``word``, d = 1), one per epoch.

    Epoch ``i`` has times ``[3i, 3i+3)``; it inserts words (multiplicity 1 or 2, some
    repeated) and retracts words present, so multiplicities stay positive and the word
    count sees retractions. ``updates`` is everything written so far, for the fold.
    """

    def __init__(self, directory: str, seed: int = 0, per_file: int = 12):
        self.dir = directory
        self.rng = random.Random(seed)
        self.per_file = per_file
        self.present: Counter = Counter()
        self.updates: list[tuple[tuple, tuple, int]] = []
        self.files: list[str] = []

    def next_file(self) -> str:
        i = len(self.files)
        rows = []
        for _ in range(self.per_file):
            t = 3 * i + self.rng.randrange(3)
            present = sorted(w for w, n in self.present.items() if n > 0)
            if present and self.rng.random() < 0.3:
                w, diff = self.rng.choice(present), -1
            else:
                w, diff = self.rng.choice(VOCABULARY), self.rng.choice((1, 1, 2))
            self.present[w] += diff
            rows.append((w, t, diff))
        path = os.path.join(self.dir, f"words_{i:03d}.csv")
        with open(path, "w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(["word", "time", "diff"])
            out.writerows(rows)
        self.updates += [((w,), (t,), diff) for w, t, diff in rows]
        self.files.append(path)
        return path


def fold(updates, t) -> dict:
    """The collection at time ``t``: diffs of updates at times ``<= t`` summed, zeros dropped."""
    acc: Counter = Counter()
    for data, s, diff in updates:
        if all(a <= b for a, b in zip(s, t)):
            acc[tuple(data)] += diff
    return {k: v for k, v in acc.items() if v}


def wordcount_reference(updates, t) -> dict:
    """What ``counts`` (word, count) must hold at ``t``: one row per word present."""
    return {(w, n): 1 for (w,), n in fold(updates, t).items()}


def trace_at(store, name: str, t, columns: list[str] | None = None) -> dict:
    """The collection of trace ``name`` at time ``t``, read from its layer files."""
    import numpy as np

    from storage.lattice import time_columns
    tr = store.trace(name)
    table = store.read_updates(tr)
    if not table.num_rows:
        return {}
    cols = columns or tr.data_columns
    times = np.stack([table.column(c).to_numpy() for c in time_columns(tr.d)], axis=1)
    mask = np.all(times <= np.asarray(t, dtype=np.int64), axis=1)
    data = list(zip(*[table.column(c).to_pylist() for c in cols]))
    diff = table.column("diff").to_pylist()
    acc: Counter = Counter()
    for i in np.flatnonzero(mask):
        acc[data[i]] += diff[i]
    return {k: v for k, v in acc.items() if v}


# ------------------------------------------------------------------ cheap killable processes


def cli_child(args: list[str], fault: str | None, log_path: str) -> None:
    """The body of a process that runs one ddcli command (a child of a forkserver that has
    ddcli imported already, so it starts in milliseconds) and exits with its exit code."""
    if fault:
        os.environ["DDCLI_FAULT"] = fault
    else:
        os.environ.pop("DDCLI_FAULT", None)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from ddcli.cli import app
    code = app(args=args, prog_name="ddcli", standalone_mode=False)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)


_CONTEXT = None


def forkserver():
    """A multiprocessing context whose children are forked from a clean server process
    with ddcli, storage, pyarrow and duckdb imported (never from pytest's own process,
    which may run a JVM gateway's threads)."""
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["tests.helpers.operations", "ddcli.cli", "ddcli.render", "storage.store",
                                    "storage.files.read", "storage.sql.query", "pyarrow", "pyarrow.parquet",
                                    "pyarrow.csv", "pyarrow.compute", "pyarrow.json", "pandas", "duckdb",
                                    "numpy", "rich.console", "rich.table", "rich.markup", "typer._adapters"])
        _CONTEXT = ctx
    return _CONTEXT
