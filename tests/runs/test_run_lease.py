"""A run lease: a second run of a pipeline exits 3 at its start.

The lease is held by a real other process; ``ddcli run`` of the same pipeline must exit 3
with one line before it starts Spark and leave the store as it was. A killed holder frees
the pipeline at once on its host, a holder elsewhere after the lease's time to live.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from ddcli.cli import app
from tests.helpers import REPO as ROOT

WORDCOUNT = os.path.join(ROOT, "sample_data", "pipelines", "wordcount.py")
runner = CliRunner()

HOLDER = """
import sys, time
from storage.writes.lease import lease
with lease(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    time.sleep(600)
"""


def hold_in_another_process(store: str, pipeline: str = "wordcount") -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, store, pipeline], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.fixture
def words_store(tmp_path) -> str:
    s = str(tmp_path / "store")
    res = runner.invoke(app, ["ingest", "words", os.path.join(ROOT, "sample_data", "words_1.csv"), "--store", s])
    assert res.exit_code == 0, res.stderr
    return s


def test_a_second_run_of_a_pipeline_exits_3_at_its_start(words_store, digest, monkeypatch):
    from ops.spark import session
    started = []
    real = session.get_spark
    # (another test of this worker may have started Spark already: watch for the call)
    monkeypatch.setattr(session, "get_spark", lambda *a, **kw: started.append(1) or real(*a, **kw))
    holder = hold_in_another_process(words_store)
    try:
        before = digest(os.path.join(words_store, "log"))
        res = runner.invoke(app, ["run", WORDCOUNT, "--store", words_store])
        assert res.exit_code == 3, res.stdout + res.stderr
        assert not started, "the run started Spark before finding the lease"
        assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
        assert f"being run by another process (pid {holder.pid}" in res.stderr
        assert digest(os.path.join(words_store, "log")) == before
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_a_killed_holder_frees_the_pipeline_at_once(words_store):
    from storage.writes.lease import lease
    holder = hold_in_another_process(words_store)
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    assert os.listdir(os.path.join(words_store, "leases")), "the killed holder left its lease file"
    with lease(words_store, "wordcount"):
        pass
    assert not os.path.exists(os.path.join(words_store, "leases")), "a released lease leaves nothing"


def test_compact_collects_what_killed_lease_holders_leave(words_store):
    """A holder killed while creating its lease leaves a temporary file, one killed while
    holding it its lease file: garbage collection removes both, and the folder; a live
    holder's lease stays."""
    env = {**os.environ, "DDCLI_FAULT": "lease.before_link"}
    code = "import sys; from storage.writes.lease import lease\nwith lease(sys.argv[1], 'counts'): pass"
    died = subprocess.run([sys.executable, "-c", code, words_store], cwd=ROOT, env=env)
    assert died.returncode == 137
    holder = hold_in_another_process(words_store)
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    leases = os.path.join(words_store, "leases")
    names = sorted(os.listdir(leases))
    assert len(names) == 2 and names[0].startswith(".tmp-") and names[1] == "wordcount.1.json", names
    live = hold_in_another_process(words_store, "lengths")
    try:
        res = runner.invoke(app, ["compact", "--grace", "0", "--store", words_store])
        assert res.exit_code == 0, res.stderr
        assert os.listdir(leases) == ["lengths.1.json"], "a live lease was collected, or a dead one kept"
    finally:
        os.killpg(live.pid, signal.SIGKILL)
        live.wait()
    res = runner.invoke(app, ["compact", "--grace", "0", "--store", words_store])
    assert res.exit_code == 0, res.stderr
    lake = {"_delta_synced.json", "_tables_synced.json", "tables"}  # the Delta tables (storage/lake/)
    assert set(os.listdir(words_store)) - lake == {"log", "traces"}


def _foreign_lease(store: str, age: float) -> None:
    folder = os.path.join(store, "leases")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "wordcount.1.json")
    with open(path, "w") as fh:
        json.dump({"pid": 1, "host": "elsewhere-" + socket.gethostname(), "started": "earlier"}, fh)
    t = time.time() - age
    os.utime(path, (t, t))


def test_a_lease_from_another_host_expires_after_its_time_to_live(words_store, monkeypatch):
    from storage.errors import Conflict
    from storage.writes.lease import lease
    monkeypatch.setenv("DDCLI_LEASE_SECONDS", "30")
    _foreign_lease(words_store, age=5)
    res = runner.invoke(app, ["run", WORDCOUNT, "--store", words_store])
    assert res.exit_code == 3 and "on elsewhere-" in res.stderr
    with pytest.raises(Conflict):
        with lease(words_store, "wordcount"):
            pass
    _foreign_lease(words_store, age=31)
    with lease(words_store, "wordcount") as path:
        assert path.endswith("wordcount.2.json")


def test_a_killed_holder_not_yet_collected_by_its_parent_holds_nothing():
    from storage.processes import pid_alive
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid) and pid_alive(os.getpid())
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.time() + 10
        while pid_alive(child.pid) and time.time() < deadline:  # a zombie until wait() below
            time.sleep(0.05)
        assert not pid_alive(child.pid)
        with open(f"/proc/{child.pid}/stat") as fh:  # still there, not collected
            assert fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid) and not pid_alive(-1)
