"""What a run reports while it works, measured at the Spark jobs that really do the work.

Spark is lazy: building a join or a reduce runs nothing, and an operator's work happens
inside the job that first needs its result — an output's or a state trace's write, a
loop round's checkpoint. Timing the operator where it is declared would time nothing, so
time is measured per job boundary (each write, each loop round) and each operator is
credited with the writes that computed it. Rows are those the engine already knows: a
written layer's rows, a loop round's pending updates (counted by the job that finds the
next round anyway). An operator whose result no layer holds says so: counting it would
cost a Spark job of its own (0.1–0.4 s), and counters inside the plan would count twice
where a frame feeds a plan twice (a join reads its delta on both sides).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable


class RunProgress:
    """Progress lines (``say``; None: silent) and the steps of one run, for ``--json``.

    Callable with a message, like a plain progress printer. The figures are gathered
    whether or not lines are printed: they cost clock reads and one driver-side lookup of
    the job ids, no Spark job.
    """

    def __init__(self, say: Callable[[str], None] | None = None, watcher: "Watcher | None" = None):
        self.say = say
        self.watcher = watcher or Watcher()
        self.steps: list[dict] = []
        self._tracker = None

    def __call__(self, msg: str) -> None:
        if self.say:
            self.say(msg)

    def attach(self, spark) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._first = self._jobs()
        self.watcher.attach(self._tracker)

    def phase(self, label: str) -> None:
        """What runs now, within the current step (a loop's round): for a live display."""
        self.watcher.phase(label)

    def jobs_so_far(self) -> int:
        """Spark jobs since :meth:`attach` (every job of the run: a check that the steps
        account for all of them, and that progress costs none)."""
        return len(self._jobs() - self._first) if self._tracker is not None else 0

    def _jobs(self) -> set[int]:
        return job_ids(self._tracker) if self._tracker is not None else set()

    @contextmanager
    def step(self, kind: str, spark: bool = True, **fields):
        """Time a piece of work that runs Spark jobs (none with ``spark`` False: its jobs
        are not counted, two Py4J calls saved); the body may fill ``rows`` (and other
        figures) in the yielded dict, which becomes one of :attr:`steps`."""
        rec = {"step": kind, **fields}
        before, t0 = self._jobs() if spark else None, time.monotonic()
        self.watcher.begin(step_label(kind, fields))
        try:
            yield rec
        finally:
            self.watcher.end()
        rec["seconds"] = round(time.monotonic() - t0, 3)
        rec["jobs"] = len(self._jobs() - before) if spark else 0
        self.steps.append(rec)

    def loop_round(self, loop: str, rnd: int, iteration: int, seconds: float, nxt: int | None,
                   pending: int | None) -> None:
        """A loop round, reported after the job that ran it (which also counted ``pending``,
        the updates waiting at the next iteration ``nxt``; None: a fixed point)."""
        self.steps.append({"step": "loop_round", "loop": loop, "round": rnd, "iteration": iteration,
                           "seconds": round(seconds, 3), "next_iteration": nxt,
                           "rows": pending if nxt is not None else 0})
        then = "fixed point reached" if nxt is None else f"{updates(pending or 0)} pending at iteration {nxt}"
        self(f"loop {loop}: round {rnd} (iteration {iteration}) in {seconds:.2f} s; {then}")

    def operators(self, ran: list, writes: dict[str, dict], cone: Callable, counted: Callable) -> None:
        """One line (and step) per operator that did work: its rows where a written layer
        holds them (``counted(node)`` -> (trace, rows) or None), and the writes that
        computed it (``cone(trace)``: the operators a trace's write ran)."""
        for n in ran:
            by = [t for t, w in writes.items() if n in cone(t)]
            seconds = round(sum(writes[t]["seconds"] for t in by), 3)
            got = counted(n)
            rec = {"step": "operator", "operator": n.describe(), "rows": got[1] if got else None,
                   "written_to": got[0] if got else None, "seconds": seconds, "computed_by": by}
            self.steps.append(rec)
            rows = (f"{updates(got[1])} (written to {got[0]})" if got else
                    "rows not counted (no layer holds its result; counting would cost a Spark job)")
            where = f"computed by the write{'s' if len(by) > 1 else ''} of {', '.join(by)} in {seconds:.2f} s" \
                if by else "not computed by any write (its changes cancelled or fed nothing)"
            self(f"{n.describe()}: {rows}; {where}")


def job_ids(tracker) -> set[int]:
    """The ids of every job Spark still knows (up to ``spark.ui.retainedJobs``, 1,000), in
    two Py4J calls: reading the Java array element by element costs a call per job, and a
    warm engine's session knows a thousand of them."""
    from pyspark import SparkContext

    java = getattr(tracker, "_jtracker", None)
    if java is None:  # not PySpark's tracker (a display's own): its ids as it gives them
        return set(tracker.getJobIdsForGroup())
    jvm = SparkContext._jvm
    if _ARRAYS[0] is not jvm:  # looking the class up by its package path is three more calls
        _ARRAYS[:] = [jvm, jvm.java.util.Arrays]
    ids = _ARRAYS[1].toString(java.getJobIdsForGroup(None))
    return {int(x) for x in ids.strip("[]").split(",") if x.strip()}


_ARRAYS: list = [None, None]  # (the JVM view, its java.util.Arrays)


def step_label(kind: str, fields: dict) -> str:
    """What a step does, in a few words."""
    if kind == "spark_start":
        return "starting Spark"
    if kind == "batch":
        return f"evaluating batch {fields['batch']}" if fields.get("batch", 1) > 1 else "evaluating"
    if kind == "write":
        together = fields.get("together") or []
        return f"writing {', '.join(together)}" if len(together) > 1 else f"writing {fields.get('trace')}"
    return kind.replace("_", " ")


class Watcher:
    """What a live display is told while a run works (this one ignores it): the steps as
    they begin and end, the phases within them (a loop's rounds), and Spark's status
    tracker, to read task counts from (:class:`TaskCounts`)."""

    def attach(self, tracker) -> None:
        pass

    def begin(self, label: str) -> None:
        pass

    def end(self) -> None:
        pass

    def phase(self, label: str) -> None:
        pass


class TaskCounts:
    """Tasks done and in all of the Spark jobs started since :meth:`mark`, read from the
    status tracker: driver-side look-ups, no job. A finished job counts whole (the stages it
    skipped, their output already computed, report tasks that never run) and is not looked
    up again."""

    def __init__(self, tracker):
        self.tracker = tracker
        self.finished: dict[int, tuple[int, int]] = {}
        self.base: set[int] = set()

    def mark(self) -> None:
        self.base = job_ids(self.tracker)

    def now(self) -> tuple[int, int]:
        done = total = 0
        for job in job_ids(self.tracker) - self.base:
            counts = self.finished.get(job) or self._job(job)
            done, total = done + counts[0], total + counts[1]
        return done, total

    def _job(self, job: int) -> tuple[int, int]:
        info = self.tracker.getJobInfo(job)
        if info is None:
            return 0, 0
        done = total = 0
        for stage in info.stageIds:
            st = self.tracker.getStageInfo(stage)
            if st is not None:
                done, total = done + st.numCompletedTasks, total + st.numTasks
        if info.status in ("SUCCEEDED", "FAILED"):
            self.finished[job] = (total, total) if info.status == "SUCCEEDED" else (done, total)
        return done, total


def cone_of(node, ran: set[int]) -> list:
    """The operators of ``ran`` (node ids) that ``node``'s frame depends on, in the order
    of the graph: what a write of ``node`` computes, since a write recomputes what no
    checkpoint holds (with several batches, earlier batches' work is in their own steps)."""
    seen: set[int] = set()
    out = []

    def visit(n) -> None:
        if n.id in seen:
            return
        seen.add(n.id)
        for i in n.inputs:
            visit(i)
        if n.id in ran:
            out.append(n)

    visit(node)
    return out


def updates(n: int) -> str:
    return f"{n:,} update{'' if n == 1 else 's'}"
