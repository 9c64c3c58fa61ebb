"""Ctrl-C during ``ddcli run``.

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


def ddcli(store: str, *args: str, **env: str) -> subprocess.Popen:
    # in a process of its own (Ctrl-C of a command the warm engine runs: tests/service/)
    environ = dict(os.environ, DDCLI_STORE=store, DDCLI_SERVICE="0", **env)
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
    code, _, err = finished(ddcli(store, "ingest", "words", str(tmp_path / "w.csv")))
    assert code == 0, err
    log_before = digest(os.path.join(store, "log"))
    traces_before = digest(os.path.join(store, "traces"))

    mark = tmp_path / "working"
    run = ddcli(store, "run", str(tmp_path / "slow.py"), SLOW_MARK=str(mark))
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

    assert digest(os.path.join(store, "log")) == log_before
    assert Store(store).state().pipelines == {}
    code, _, err = finished(ddcli(store, "compact", "--grace", "0"))
    assert code == 0, err
    assert digest(os.path.join(store, "traces")) == traces_before

    code, out, err = finished(ddcli(store, "run", str(tmp_path / "slow.py"), "--json"))
    assert code == 0, err
    assert '"noop":false' in out
