"""Helpers for the warm engine's tests in real processes.

* :func:`ddcli`: ``python -m ddcli`` in a process of its own, in a working folder;
* :func:`service_folder`: a folder of services for one test (``DDCLI_SERVICE_DIR``), every
  service in it stopped at the end;
* :func:`service_log` / :func:`commands_served` / :func:`wait_for_warm_up`: what the
  services of that folder say they did;
* :func:`accumulated`: a trace accumulated over all its times, read with pyarrow.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections import Counter

from tests.helpers.operations import ddcli_env


def ddcli(args: list[str], cwd, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m ddcli ARGS`` in ``cwd`` (stdout and stderr are pipes: it must return)."""
    return subprocess.run([sys.executable, "-m", "ddcli", *args], cwd=str(cwd), env=ddcli_env(env),
                          capture_output=True, text=True, timeout=timeout)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


@contextlib.contextmanager
def service_folder():
    """A folder of services of its own (short, under /tmp: a socket's path must fit in 100
    bytes) as ``DDCLI_SERVICE_DIR`` of this process and the commands it starts."""
    import shutil
    import tempfile

    from ddcli.service.client import stop
    from ddcli.service.folder import keys

    folder = tempfile.mkdtemp(prefix="ddsvc-", dir="/tmp")
    saved = os.environ.get("DDCLI_SERVICE_DIR")
    os.environ["DDCLI_SERVICE_DIR"] = folder
    try:
        yield folder
    finally:
        for key in keys(folder):
            stop(folder, key)
        shutil.rmtree(folder, ignore_errors=True)
        if saved is None:
            os.environ.pop("DDCLI_SERVICE_DIR", None)
        else:
            os.environ["DDCLI_SERVICE_DIR"] = saved


def service_log(folder: str) -> str:
    """The logs of every service of ``folder``, one after another."""
    text = ""
    for name in sorted(os.listdir(folder)):
        if name.endswith(".log"):
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as fh:
                text += fh.read()
    return text


def commands_served(folder: str, at_least: int = 0, timeout: float = 60) -> int:
    """How many commands the services of ``folder`` ran (their logs say so of each, just
    after the client has its exit code: waits up to ``timeout`` seconds for ``at_least``)."""
    deadline = time.time() + timeout
    while True:
        count = len(re.findall(r"\] ran (?:run|verify) for pid ", service_log(folder)))
        if count >= at_least or time.time() > deadline:
            return count
        time.sleep(0.1)


def wait_for_warm_up(folder: str, timeout: float = 300) -> None:
    """Until a service of ``folder`` has finished its warm-up: a command that comes meanwhile
    waits for it, and may give up waiting and run in its own process."""
    deadline = time.time() + timeout
    while "warm-up: " not in service_log(folder):
        assert time.time() < deadline, service_log(folder)
        time.sleep(0.2)


def accumulated(store: str, trace: str) -> dict:
    """A trace accumulated over all its times, read with pyarrow: data row -> multiplicity."""
    import pyarrow.parquet as pq

    from storage.store import Store
    st = Store(store)
    t = st.state().traces[trace]
    acc: Counter = Counter()
    for path in st.layer_paths(t, t.layers + t.pending):
        for r in pq.read_table(path).to_pylist():
            acc[tuple(sorted((k, v) for k, v in r.items() if k != "diff" and not k.startswith("time")))] += r["diff"]
    return {k: v for k, v in acc.items() if v}
