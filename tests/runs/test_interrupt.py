"""Ctrl-C during ``ddcli run``, and a run killed: nothing of it outlives it.

A real process in its own session gets SIGINT for its whole process group, as a terminal
sends it, while a Spark task of the run is busy (the pipeline's function leaves a marker
file when it starts working). The run must stop Spark, print one line
"interrupted; nothing was written", exit 130, and commit nothing: the store's log is
unchanged, and once garbage is collected so is every trace's folder. The next run then
does the work.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from storage.store import Store
from tests.helpers import REPO as ROOT

SLOW = """
import os
import time


def slow(counts):
    if len(counts) and os.environ.get("SLOW_MARK"):
        open(os.environ["SLOW_MARK"], "w").close()
        time.sleep(120)
    return counts


def pipeline(p):
    p.output("slowed", p.input("words").threshold(slow))
"""

# the second pipeline of the command: it must not start once Ctrl-C stopped the first
AFTER = """
import os


def mark(counts):
    if os.environ.get("AFTER_MARK"):
        open(os.environ["AFTER_MARK"], "w").close()
    return counts


def pipeline(p):
    p.output("after", p.input("words").threshold(mark))
"""


def ddcli(store: str, *args: str, **env: str) -> subprocess.Popen:
    # in a process of its own (Ctrl-C of a command the warm engine runs: tests/service/)
    # on Spark: a small run in the driver (ops/run/in_driver.py) starts no task to interrupt
    environ = dict(os.environ, DDCLI_STORE=store, DDCLI_SERVICE="0", DDCLI_DRIVER_ROWS="0", **env)
    return subprocess.Popen([sys.executable, "-m", "ddcli", *args], env=environ, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def finished(p: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        raise
    return p.returncode, out, err


@pytest.mark.slow
def test_ctrl_c_during_a_run_stops_spark_exits_130_and_commits_nothing(tmp_path, digest):
    store = str(tmp_path / "store")
    (tmp_path / "w.csv").write_text("word,time\na,1\nb,2\n")
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "after.py").write_text(AFTER)
    code, _, err = finished(ddcli(store, "ingest", "words", str(tmp_path / "w.csv")))
    assert code == 0, err
    log_before = digest(os.path.join(store, "log"))
    traces_before = digest(os.path.join(store, "traces"))

    mark, after = tmp_path / "working", tmp_path / "after_ran"
    run = ddcli(store, "run", str(tmp_path / "slow.py"), str(tmp_path / "after.py"), SLOW_MARK=str(mark),
                AFTER_MARK=str(after))
    deadline = time.time() + 600
    while not mark.exists():
        assert run.poll() is None, run.communicate()
        assert time.time() < deadline, "the run never reached its Spark task"
        time.sleep(0.2)
    os.killpg(run.pid, signal.SIGINT)
    sent = time.time()
    code, out, err = finished(run, timeout=120)
    assert code == 130, (out, err)
    *progress, last = err.splitlines()  # progress lines ("· …"), then the one error line
    assert last == "error: interrupted; nothing was written" and all(x.startswith("· ") for x in progress), err
    assert time.time() - sent < 60, "Spark was not stopped: the run waited for its task"
    assert not after.exists(), "Ctrl-C stopped the first pipeline, then the command ran the second"

    assert digest(os.path.join(store, "log")) == log_before
    assert Store(store).state().pipelines == {}
    code, _, err = finished(ddcli(store, "compact", "--grace", "0"))
    assert code == 0, err
    assert digest(os.path.join(store, "traces")) == traces_before

    code, out, err = finished(ddcli(store, "run", str(tmp_path / "slow.py"), str(tmp_path / "after.py"), "--json"))
    assert code == 0, err
    assert out.count('"noop":false') == 2, out


STUCK = """
import os
import signal
import time


def stuck(counts):
    if len(counts) and os.environ.get("SLOW_MARK"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a task that does not stop when Spark does
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(os.environ["SLOW_MARK"], "w").close()
        time.sleep(120)
    return counts


def pipeline(p):
    p.output("stuck", p.input("words").threshold(stuck))
"""


def _session_processes(sid: int) -> dict[int, str]:
    """The live (not zombie) processes of session ``sid``: pid -> command line."""
    out = {}
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != b"Z":
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    out[int(name)] = fh.read().replace(b"\0", b" ").decode()[:120]
        except (OSError, ValueError, IndexError):
            continue
    return out


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="follows processes through /proc")
def test_a_killed_run_takes_spark_and_its_workers_with_it(tmp_path):
    store = str(tmp_path / "store")
    (tmp_path / "w.csv").write_text("word,time\na,1\nb,2\n")
    (tmp_path / "stuck.py").write_text(STUCK)
    code, _, err = finished(ddcli(store, "ingest", "words", str(tmp_path / "w.csv")))
    assert code == 0, err
    mark = tmp_path / "working"
    run = ddcli(store, "run", str(tmp_path / "stuck.py"), SLOW_MARK=str(mark))
    deadline = time.time() + 600
    while not mark.exists():
        assert run.poll() is None, run.communicate()
        assert time.time() < deadline, "the run never reached its Spark task"
        time.sleep(0.2)
    assert len(_session_processes(run.pid)) >= 3  # ddcli, the JVM, Python workers
    os.kill(run.pid, signal.SIGKILL)  # ddcli alone, as a scheduler's timeout may
    run.communicate()
    end = time.time() + 20
    while _session_processes(run.pid) and time.time() < end:
        time.sleep(0.2)
    left = _session_processes(run.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"outlived the killed run: {list(left.values())}"


def test_ctrl_c_that_surfaces_as_a_failed_job_stops_the_whole_command(tmp_path, monkeypatch):
    """Ctrl-C cancels Spark's jobs; the cancelled job may reach the command as any error
    (its KeyboardInterrupt swallowed on the way). Then the next pipeline must not start."""
    from ops.run import run as run_module
    from ops.spark import session
    from tests.helpers.cli import cli
    monkeypatch.setitem(session._interrupt, "seen", False)
    started = []

    def run_pipeline(store, path, **kw):
        started.append(os.path.basename(path))
        session._interrupt["seen"] = True  # the user pressed Ctrl-C during this pipeline's job
        raise RuntimeError("Job 3 cancelled because SparkContext was shut down")

    monkeypatch.setattr(run_module, "run_pipeline", run_pipeline)
    res = cli(str(tmp_path / "store"), "run", str(tmp_path / "a.py"), str(tmp_path / "b.py"))
    assert res.exit_code == 130, (res.stdout, res.stderr)
    # the one error line, after at most progress notes (stopping the session this process
    # shares with other tests may write Spark's class archive, and says so)
    *notes, last = res.stderr.splitlines()
    assert last == "error: interrupted; nothing was written", res.stderr
    assert all(line.startswith("· ") for line in notes), res.stderr
    assert started == ["a.py"]
