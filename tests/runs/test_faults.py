"""Fault injection: ddcli commands killed with SIGKILL at 200+ random points, then rerun.

A seeded random schedule of commands on one store — ingests into a trace of integer times
(``words``) and one of product times (``strings``, sealed with ``--upper``), ``advance
--since`` on both, ``compact`` (geometric, ``--full``, ``--grace 0``) and runs of two
pipelines (``wordcount``, ``length_count``) — where command after command is killed:

* store commands run in processes forked from a server that has ddcli imported (so a
  process costs milliseconds) and die either at a fault point (``DDCLI_FAULT=point@N``,
  storage/faults.py: ``os._exit(137)`` where it stands) or by ``SIGKILL`` after a random
  delay within the command's usual duration; a command may be killed several times in a
  row before it is allowed to finish;
* ``ddcli run`` runs as ``python -m ddcli`` in a process group of its own (its JVM and
  Python workers die with it), killed at a fault point around its commit or by SIGKILL
  after a random delay; fewer of these, as each starts Spark.

After every kill the store is readable (the newest version parses, every file it names is
there and is Parquet) and every input holds exactly the old or the new collection at every
time beyond its since, never a mix; then the command is rerun (runs rerun in this process,
on the warm Spark session) and must succeed. At the end every input equals the fold of its
files at every time beyond its since (nothing lost or doubled), every output equals a plain
reference at every time, ``verify`` (the from-scratch evaluation) finds no difference, and
``compact --grace 0`` leaves exactly the files the newest version names.
"""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import time
from collections import Counter

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ddcli.cli import app
from storage.store import Store
from tests.helpers.operations import (PIPELINES, WordStream, cli_child, ddcli_process, fold, forkserver, trace_at,
                                      wordcount_reference)

SEED = int(os.environ.get("DDCLI_FAULT_SEED", "20241121"))
# kills in total (store commands and runs), and of them kills of `ddcli run` (each starts
# Spark); the environment may ask for more (or, to try something out, fewer)
TARGET_KILLS = int(os.environ.get("DDCLI_FAULT_KILLS", "200"))
RUN_KILLS = int(os.environ.get("DDCLI_FAULT_RUN_KILLS", "5"))

# fault points each kind of command can reach (with the geometric merge after a write)
WRITE = ["layer.before_fsync", "layer.before_rename", "layer.after_rename", "log.before_link", "log.after_link"]
MERGE = ["compact.before_commit", "compact.after_commit"]
POINTS = {
    "ingest": WRITE + ["ingest.before_commit", "ingest.after_commit"] + MERGE,
    "advance": ["log.before_link", "log.after_link", "advance.before_commit", "advance.after_commit"] + MERGE,
    "compact": WRITE + MERGE,
    "run": ["lease.before_link", "run.before_commit", "run.after_commit", "log.before_link", "log.after_link"],
}

WORDCOUNT = os.path.join(PIPELINES, "wordcount.py")
LENGTH_COUNT = os.path.join(PIPELINES, "length_count.py")
runner = CliRunner()


class StringStream:
    """Update files for ``strings`` (column ``s``, d = 2): epoch ``i`` has times ``(i, 0..2)``
    and is sealed with ``--upper (i+1,0)``; insertions and retractions of strings present."""

    ALPHABET = ["a", "b", "c", "ab", "bc", "ca", "abc", "bca"]

    def __init__(self, directory: str, seed: int):
        self.dir, self.rng = directory, random.Random(seed)
        self.present: Counter = Counter()
        self.updates: list = []
        self.files: list[str] = []

    def next_file(self) -> str:
        i = len(self.files)
        rows = []
        for _ in range(8):
            t = (i, self.rng.randrange(3))
            present = sorted(s for s, n in self.present.items() if n > 0)
            if present and self.rng.random() < 0.35:
                s, diff = self.rng.choice(present), -1
            else:
                s, diff = self.rng.choice(self.ALPHABET), self.rng.choice((1, 2))
            self.present[s] += diff
            rows.append((s, *t, diff))
        path = os.path.join(self.dir, f"strings_{i:03d}.csv")
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["s", "time_0", "time_1", "diff"])
            w.writerows(rows)
        self.updates += [((s,), (a, b), diff) for s, a, b, diff in rows]
        self.files.append(path)
        return path


def length_count_reference(updates, t) -> dict:
    per_length: Counter = Counter()
    for (s,), n in fold(updates, t).items():
        if n > 0:
            per_length[len(s)] += 1
    return {(length, n): 1 for length, n in per_length.items()}


class Harness:
    def __init__(self, tmp_path, rng: random.Random):
        self.rng = rng
        self.store = Store(str(tmp_path / "store"))
        self.words = WordStream(str(tmp_path), seed=rng.randrange(1 << 30))
        self.strings = StringStream(str(tmp_path), seed=rng.randrange(1 << 30))
        self.ingested = {"words": 0, "strings": 0}  # files surely committed
        self.logs = str(tmp_path / "logs")
        os.makedirs(self.logs)
        self.kills: Counter = Counter()
        self.attempts = 0
        self.durations: dict[str, list[float]] = {}
        self.run_seconds = 8.0  # how long `ddcli run` in a process takes, measured as we go
        self.spark_tmp = str(tmp_path / "spark-tmp")  # scratch of killed Spark processes lands here
        os.makedirs(self.spark_tmp)
        self._folds: dict = {}
        self.seconds: Counter = Counter()  # where the test's time goes, reported at the end

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())

    # ---- checks

    def stream(self, name):
        return self.words if name == "words" else self.strings

    def times(self, name):
        st = self.stream(name)
        n = len(st.files)
        if name == "words":
            return [(t,) for t in range(3 * n + 1)]
        return [(a, b) for a in range(n + 1) for b in range(4)]

    def reference(self, name: str, files: int) -> dict:
        """The fold of the first ``files`` files at every time of :meth:`times` (cached)."""
        times = self.times(name)
        key = (name, files, len(times))
        if key not in self._folds:
            st = self.stream(name)
            ups = st.updates[:files * (len(st.updates) // len(st.files))]
            self._folds[key] = {t: fold(ups, t) for t in times}
        return self._folds[key]

    def collection_is(self, name: str, files: int) -> bool:
        """The trace equals the fold of its first ``files`` files at every time beyond its since."""
        state = self.store.state()
        if name not in state.traces:
            return files == 0
        tr = state.traces[name]
        got = Accumulator(self.store.read_updates(tr), tr)
        return all(got.at(t) == want for t, want in self.reference(name, files).items() if tr.since.beyond(t))

    def assert_readable(self, what: str) -> None:
        t0 = time.perf_counter()
        self._assert_readable(what)
        self.seconds["checks"] += time.perf_counter() - t0

    def _assert_readable(self, what: str) -> None:
        state = self.store.state()
        for name, tr in state.traces.items():
            for p in self.store.layer_paths(tr):
                assert os.path.exists(p), f"after {what}: the newest version names a missing file {p}"
                assert pq.read_metadata(p).num_rows >= 0
        for name, files in self.ingested.items():
            if files or name in state.traces:
                ok_old = self.collection_is(name, files)
                ok_new = len(self.stream(name).files) > files and self.collection_is(name, files + 1)
                assert ok_old or ok_new, f"after {what}: trace {name!r} is neither the old nor the new collection"

    # ---- store commands in forked processes

    def attempt(self, args: list[str], fault: str | None, delay: float | None) -> tuple[int | None, str]:
        """Run ``ddcli ARGS`` in a forked process; kill it after ``delay`` seconds if given.
        Returns (exit code or -9, its output)."""
        self.attempts += 1
        log = os.path.join(self.logs, f"{self.attempts:05d}.log")
        p = forkserver().Process(target=cli_child, args=([*args, "--store", self.store.path], fault, log))
        t0 = time.perf_counter()
        p.start()
        p.join(delay)
        if p.exitcode is None:
            p.kill()
            p.join()
        elif fault is None and p.exitcode == 0:
            self.durations.setdefault(args[0], []).append(time.perf_counter() - t0)
        self.seconds["store command processes"] += time.perf_counter() - t0
        try:
            with open(log) as fh:
                return p.exitcode, fh.read()
        except FileNotFoundError:  # killed before it opened its log
            return p.exitcode, ""

    def usual_duration(self, kind: str) -> float:
        d = sorted(self.durations.get(kind, []))
        return 1.5 * d[len(d) // 2] if d else 0.3

    def store_command(self, args: list[str], *, after=None) -> None:
        kind = args[0]
        for _ in range(self.rng.choice((1, 2, 2, 3, 4))):
            if self.total_kills >= TARGET_KILLS + 10:
                break
            if self.rng.random() < 0.6:
                point = self.rng.choice(POINTS[kind])
                fault, delay = f"{point}@{self.rng.choice((1, 1, 2))}", None
            else:
                fault, delay = None, self.rng.uniform(0, self.usual_duration(kind))
            code, out = self.attempt(args, fault, delay)
            if code in (137, -signal.SIGKILL):
                self.kills[(kind, "fault point" if fault else "SIGKILL")] += 1
                self.assert_readable(f"killing `ddcli {' '.join(args)}` ({fault or f'after {delay:.3f}s'})")
            else:
                assert code == 0, f"`ddcli {' '.join(args)}` with {fault or delay}: exit {code}\n{out}"
        code, out = self.attempt(args, None, None)  # the rerun, to the end
        assert code == 0, f"rerun of `ddcli {' '.join(args)}`: exit {code}\n{out}"
        if after:
            after()
        self.assert_readable(f"`ddcli {' '.join(args)}`")

    def ingest(self, name: str) -> None:
        path = self.stream(name).next_file()
        args = ["ingest", name, path]
        if name == "strings":
            args += ["--upper", f"({len(self.strings.files)},0)"]

        def committed():
            self.ingested[name] += 1
        self.store_command(args, after=committed)

    # ---- runs: killed in a real process, rerun in this one

    def run(self, pipeline: str, kill: bool) -> None:
        if kill:
            if self.rng.random() < 0.5:
                fault, delay = f"{self.rng.choice(POINTS['run'])}@1", None
            else:
                fault, delay = None, self.rng.uniform(0.5, 0.9 * self.run_seconds)
            t0 = time.perf_counter()
            # the run's own process dies (a service that dies mid-run: tests/service/)
            env = {"TMPDIR": self.spark_tmp, "DDCLI_SERVICE": "0", **({"DDCLI_FAULT": fault} if fault else {})}
            p = ddcli_process(["run", pipeline], self.store.path, env=env)
            try:
                p.communicate(timeout=delay if delay is not None else 600)
            except subprocess.TimeoutExpired:  # kill it where it stands
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
            if fault:  # it ran to its commit: about as long as a whole run
                self.run_seconds = time.perf_counter() - t0
            _wait_group_gone(p.pid)
            self.seconds["killed runs (processes)"] += time.perf_counter() - t0
            if p.returncode in (137, -signal.SIGKILL):
                self.kills[("run", "fault point" if fault else "SIGKILL")] += 1
                self.assert_readable(f"killing `ddcli run {os.path.basename(pipeline)}`")
            else:
                assert p.returncode == 0, f"`ddcli run` with {fault or delay}: exit {p.returncode}\n{p.stderr}"
        t0 = time.perf_counter()
        res = runner.invoke(app, ["run", pipeline, "--store", self.store.path])
        self.seconds["runs (in process)"] += time.perf_counter() - t0
        assert res.exit_code == 0, f"rerun of `ddcli run {pipeline}`: exit {res.exit_code}\n{res.stderr}"
        self.assert_readable(f"`ddcli run {os.path.basename(pipeline)}`")


class Accumulator:
    """A trace's updates, accumulated at any time with numpy (read once, asked many times)."""

    def __init__(self, table, trace):
        import numpy as np

        from storage.lattice import time_columns
        self.np = np
        self.n = table.num_rows
        if self.n:
            self.times = np.stack([table.column(c).to_numpy() for c in time_columns(trace.d)], axis=1)
            self.data = list(zip(*[table.column(c).to_pylist() for c in trace.data_columns]))
            self.diff = table.column("diff").to_numpy()

    def at(self, t) -> dict:
        if not self.n:
            return {}
        acc: Counter = Counter()
        for i in self.np.flatnonzero(self.np.all(self.times <= self.np.asarray(t), axis=1)):
            acc[self.data[i]] += int(self.diff[i])
        return {k: v for k, v in acc.items() if v}


def _wait_group_gone(pgid: int, timeout: float = 30) -> None:
    """Wait until every process of the group (the JVM, Python workers) has exited."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes of group {pgid} survived SIGKILL")


@pytest.mark.slow
def test_two_hundred_random_kills_lose_nothing_double_nothing_and_leave_a_readable_store(spark, tmp_path):
    from ops.verify.verify import verify_pipeline

    rng = random.Random(SEED)
    h = Harness(tmp_path, rng)
    run_kills = 0
    step = 0
    min_run_kills = min(10, RUN_KILLS)
    while step < 12 or h.total_kills < TARGET_KILLS or run_kills < min_run_kills:
        assert step < 80, f"only {h.total_kills} kills after {step} steps"
        h.ingest("words")
        h.ingest("strings")
        if step % 3 == 2:
            h.store_command(["advance", "words", "--since", str(3 * step - 4)])
            h.store_command(["advance", "strings", "--since", f"({step - 2},1)"])
        compaction = [["compact"], ["compact", "--full", "--grace", "0"], ["compact", "words"],
                      ["compact", "strings", "--full"]][step % 4]
        h.store_command(compaction)
        for pipeline, every in ((WORDCOUNT, 3), (LENGTH_COUNT, 4)):
            if step % every == every - 1:
                kill = run_kills < RUN_KILLS and rng.random() < 0.9
                before = h.kills[("run", "fault point")] + h.kills[("run", "SIGKILL")]
                h.run(pipeline, kill)
                run_kills += h.kills[("run", "fault point")] + h.kills[("run", "SIGKILL")] - before
        step += 1

    # the end: everything processed, and checked against independent references
    for pipeline in (WORDCOUNT, LENGTH_COUNT):
        h.run(pipeline, kill=False)
    st = h.store
    for name in ("words", "strings"):
        assert h.ingested[name] == len(h.stream(name).files)
        assert h.collection_is(name, h.ingested[name]), f"{name}: an update was lost or doubled"
    # outputs are exact at every time the inputs are exact at: beyond their since, below their upper
    words, strings = st.trace("words"), st.trace("strings")
    for t in h.times("words"):
        if words.since.beyond(t) and not words.upper.beyond(t):
            assert trace_at(st, "counts", t) == wordcount_reference(h.words.updates, t), f"counts at {t}"
    for t in h.times("strings"):
        if strings.since.beyond(t) and not strings.upper.beyond(t):
            assert trace_at(st, "length_counts", t) == length_count_reference(h.strings.updates, t), \
                f"length_counts at {t}"
    for pipeline in (WORDCOUNT, LENGTH_COUNT):
        v = verify_pipeline(st, pipeline, max_times=400)
        assert v.ok, v.differences[0].describe()
        assert len(v.times) >= 3, v.times
    st.compact(grace_seconds=0)
    on_disk = set()
    for r, folders, names in os.walk(os.path.join(st.path, "traces")):
        folders[:] = [f for f in folders if f != "_delta_log"]  # the traces' Delta logs (storage/lake/)
        on_disk.update(os.path.join(r, n) for n in names)
    assert on_disk == {p for tr in st.state().traces.values() for p in st.layer_paths(tr)}, \
        "files of killed writers survived compact --grace 0"
    lake = {"_delta_synced.json", "_tables_synced.json", "tables"}  # the Delta tables (storage/lake/)
    kept = {"plans"}  # the pipelines' planned schemas (ops/run/plan_cache.py)
    assert set(os.listdir(st.path)) - lake - kept == {"log", "traces"}

    assert h.total_kills >= TARGET_KILLS, h.kills
    assert run_kills >= min_run_kills, h.kills
    assert {k for k, _ in h.kills} == {"ingest", "advance", "compact", "run"}, h.kills
    print(f"\n{h.total_kills} kills in {step} steps ({h.attempts} store command processes): "
          + ", ".join(f"{k} by {m}: {n}" for (k, m), n in sorted(h.kills.items()))
          + "; seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in h.seconds.items()))
