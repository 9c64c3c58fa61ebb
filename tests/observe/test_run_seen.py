"""What a person sees of a run: the live display on a terminal (steps, loop rounds, Spark's
task counts, elapsed time), plain lines elsewhere, nothing on ``--json``; what ``verify``
says while it works; and, from the same real run, the OpenLineage START and COMPLETE
events naming its inputs and outputs."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO
from tests.helpers.cli import runner
from tests.helpers.lineage import Receiver

from ddcli.cli import app

SAMPLE = os.path.join(REPO, "sample_data")
JOIN = os.path.join(SAMPLE, "pipelines", "join_example.py")


# ---------------------------------------------------------------- which output, where


def _console(terminal: bool):
    from rich.console import Console
    return Console(file=io.StringIO(), force_terminal=terminal, width=120)


@pytest.mark.parametrize("out, terminal, env, expect", [
    ("table", True, {}, "live"),
    ("table", False, {}, "lines"),
    ("jsonl", True, {}, "none"),
    ("jsonl", False, {"DDCLI_PROGRESS": "1"}, "lines"),
    ("table", True, {"DDCLI_NO_PROGRESS": "1"}, "none"),
    ("csv", False, {"DDCLI_PROGRESS": "0"}, "none"),
])
def test_the_run_shows_live_on_a_terminal_lines_elsewhere_nothing_for_programs(out, terminal, env, expect,
                                                                                  monkeypatch):
    from ddcli.run_display import LiveDisplay, progress_output
    monkeypatch.delenv("DDCLI_PROGRESS", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    con = _console(terminal)
    say, live = progress_output(out, con)
    got = "live" if isinstance(live, LiveDisplay) else "lines" if say else "none"
    assert got == expect
    if got == "lines":
        say("wrote [x]: 3 updates")  # markup-like text stays as it is
        assert con.file.getvalue() == "· wrote [x]: 3 updates\n"


class FakeTracker:
    """Spark's status tracker as the display reads it: jobs, their stages, task counts."""

    def __init__(self):
        self.jobs: dict[int, tuple[list[int], str]] = {}
        self.stages: dict[int, tuple[int, int]] = {}  # stage -> (tasks done, tasks)

    def getJobIdsForGroup(self):  # noqa: N802 - Spark's names
        return list(self.jobs)

    def getJobInfo(self, job):  # noqa: N802
        from pyspark.core.status import SparkJobInfo
        stages, status = self.jobs[job]
        return SparkJobInfo(job, stages, status)

    def getStageInfo(self, stage):  # noqa: N802
        from pyspark.core.status import SparkStageInfo
        done, n = self.stages[stage]
        return SparkStageInfo(stage, 0, "s", n, n - done, done, 0)


def test_the_live_display_shows_each_step_and_round_with_its_tasks_and_elapsed_time():
    from ddcli.run_display import POLL_SECONDS, LiveDisplay
    con = _console(True)
    tracker = FakeTracker()
    tracker.jobs[0] = ([0], "SUCCEEDED")  # a job before the step: not its own
    tracker.stages[0] = (4, 4)
    with LiveDisplay(con) as live:
        live.pipeline("reach")
        live.attach(tracker)
        live.begin("evaluating")
        live.phase("loop loop_4: round 3 (iteration 3)")
        tracker.jobs[1] = ([1, 2], "RUNNING")
        tracker.stages |= {1: (4, 4), 2: (1, 3)}
        time.sleep(POLL_SECONDS * 6)
        live.line("loop loop_4: round 3 (iteration 3) in 0.40 s; fixed point reached")
        live.end()
    text = con.file.getvalue()
    assert "pipeline reach" in text and "evaluating" in text and "loop loop_4: round 3 (iteration 3)" in text
    assert "5/7 tasks" in text, text  # the step's job only: 4 + 1 of 4 + 3
    assert re.search(r"\d:\d\d:\d\d", text)  # elapsed
    assert "· loop loop_4: round 3 (iteration 3) in 0.40 s; fixed point reached" in text
    assert "\x1b[" in text  # drawn and redrawn in place


def test_task_counts_are_those_of_the_jobs_since_the_mark(spark):
    from ops.run.progress import TaskCounts
    counts = TaskCounts(spark.sparkContext.statusTracker())
    spark.sparkContext.parallelize(range(10), 2).count()
    counts.mark()
    assert counts.now() == (0, 0)
    spark.sparkContext.parallelize(range(10), 3).count()
    spark.sparkContext.parallelize(range(10), 4).count()
    assert counts.now() == (7, 7)


# ---------------------------------------------------------------- a real run on a terminal


def _ingest(store: str) -> None:
    from storage.store import Store
    st = Store(store)
    st.ingest("orders", [f"{SAMPLE}/orders_1.csv", f"{SAMPLE}/orders_2.csv"])
    st.ingest("customers", [f"{SAMPLE}/customers_1.csv", f"{SAMPLE}/customers_2.csv"])


def _run_on_a_terminal(args: list[str], env: dict, timeout: float = 600) -> tuple[int, str, str]:
    """Run ``ddcli ARGS`` with stderr on a pseudo-terminal (stdout a pipe): exit code,
    what the terminal showed, stdout."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ddcli", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    shown = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read().decode()
    code = proc.wait(timeout=60)
    os.close(leader)
    return code, shown.decode(errors="replace"), out


@pytest.fixture(scope="module")
def seen_run(tmp_path_factory):
    """One real ``ddcli run`` of join_example, its stderr on a terminal and its events sent
    to a receiver."""
    store = str(tmp_path_factory.mktemp("seen") / "store")
    _ingest(store)
    receiver = Receiver()
    env = {k: v for k, v in os.environ.items() if k not in ("DDCLI_PROGRESS", "DDCLI_NO_PROGRESS")}
    env |= {"DDCLI_DRIVER_ROWS": "0",  # Spark's jobs, as the events report them
            "OPENLINEAGE_URL": receiver.url, "OPENLINEAGE_NAMESPACE": "tests", "TERM": "xterm",
            "COLUMNS": "120", "DDCLI_SHUFFLE_PARTITIONS": "2", "PYTHONPATH": REPO}
    try:
        code, shown, out = _run_on_a_terminal(["run", JOIN, "--store", store], env)
    finally:
        receiver.close()
    return store, code, shown, out, [e for _, e in receiver.events]


def test_a_run_on_a_terminal_shows_its_steps_live(seen_run):
    _, code, shown, out, _ = seen_run
    assert code == 0, shown
    assert out.startswith("pipeline 'join_example' ran in ") and "\x1b" not in out
    assert "\x1b[" in shown  # the display, redrawn in place
    for seen in ("pipeline join_example", "starting Spark", "evaluating", "writing "):
        assert seen in shown, (seen, shown)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    assert re.search(r"· wrote revenue: \d+ updates", plain), plain
    assert re.search(r"· pipeline join_example: reading 14 updates from 1 layer of orders, 1 layer of customers",
                     plain), plain


def test_a_run_sends_start_and_complete_naming_its_traces(seen_run):
    from storage.store import Store
    store, code, _, out, events = seen_run
    assert code == 0
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    start, done = events
    assert start["run"]["runId"] == done["run"]["runId"] and done["job"] == {**done["job"], "namespace": "tests",
                                                                            "name": "join_example"}
    state = Store(store).state()
    folder = os.path.join(os.path.abspath(store), "traces")
    assert sorted(d["name"] for d in start["inputs"]) == [os.path.join(folder, "customers"), os.path.join(folder, "orders")]
    reads = {d["facets"]["ddcli_trace"]["trace"]: d["inputFacets"]["inputStatistics"]["rowCount"] for d in start["inputs"]}
    assert reads == {"orders": state.traces["orders"].rows(), "customers": state.traces["customers"].rows()}
    assert start["outputs"] == []  # revenue did not exist before this first run
    (revenue,) = done["outputs"]
    written = int(re.search(r"revenue \(\+(\d+) updates\)", out).group(1))
    assert revenue["name"] == os.path.join(folder, "revenue")
    assert revenue["outputFacets"]["outputStatistics"]["rowCount"] == written
    trace = revenue["facets"]["ddcli_trace"]
    t = state.traces["revenue"]
    assert (trace["since"], trace["upper"], trace["rows"], trace["layers"]) == (
        str(t.since.elements[0][0]), str(t.upper.elements[0][0]), t.rows(), len(t.layers))
    run = done["run"]["facets"]["ddcli_run"]
    assert run["rows_out"] == written and run["spark_jobs"] >= 1 and run["seconds"] > 0 and run["rows_in"] == 14
    assert run["_producer"] == done["producer"] and "DdcliRunRunFacet" in run["_schemaURL"]


def test_verify_says_what_it_does_in_plain_lines(seen_run, spark):
    store = seen_run[0]
    res = runner.invoke(app, ["verify", JOIN, "--store", store])
    assert res.exit_code == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0] == f"· loading {JOIN} and Spark's libraries" and "· starting Spark" in lines
    assert any(re.fullmatch(r"· Spark ready in \d+\.\d s", line) for line in lines), lines
    assert re.search(r"^· checking output revenue at \d+ times: ", res.stderr, re.M), lines
    assert json.dumps(res.stdout).count("verified") == 1
