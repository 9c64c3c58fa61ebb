"""A Spark standalone cluster for tests: a master and workers as separate JVMs, started
with pyspark's own ``bin/spark-class`` (nothing is downloaded).

Isolation, so that nothing works by accident:

* the workers run in a network namespace of their own (``ip netns`` + a veth pair): their
  own address and their own loopback, so the driver must advertise an address they can
  reach, and nothing of the driver's is reachable on 127.0.0.1; the master listens on the
  host side of the pair. Where a namespace cannot be made (not root, no ``ip``), the whole
  cluster runs on 127.0.0.1 and :attr:`Cluster.isolation` says why;
* the workers (and so their executors) start with a clean environment (no ``PYTHONPATH``,
  no virtualenv) in a scratch folder, and the executors' Python (:func:`executor_python`)
  is a virtualenv holding the driver's third-party packages but not ddcli: ``ops`` and
  ``storage`` reach the executors only as the zip ddcli ships.

The namespace shares the filesystem with the driver, so a store on a local path works
(a real cluster needs shared storage).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

WORKER_MEMORY = "1g"
DAEMON_MEMORY = "256m"  # heap of the master and worker daemons themselves


def spark_home() -> str:
    from pyspark.find_spark_home import _find_spark_home
    return _find_spark_home()


def executor_python(folder: str) -> str:
    """A virtualenv at ``folder`` (no pip, no system packages) whose site-packages links to
    every third-party package of this interpreter's environment, and not to ddcli (its
    editable-install hook, its .pth files, its metadata); returns its python."""
    import site
    import sysconfig
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", folder], check=True, capture_output=True)
    python = os.path.join(folder, "bin", "python")
    target = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    source = sysconfig.get_paths()["purelib"]
    assert source in site.getsitepackages() or os.path.isdir(source), source
    for name in os.listdir(source):
        low = name.lower()
        if (name.endswith(".pth") or low.startswith(("__editable__", "ddcli")) or name == "__pycache__"
                or name in ("ops", "storage")):
            continue
        dest = os.path.join(target, name)
        if not os.path.exists(dest):
            os.symlink(os.path.join(source, name), dest)
    return python


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=30)


class Cluster:
    """``Cluster(folder, workers=2).start()``; :meth:`stop` kills everything it started
    (process groups, then the namespace). ``url`` is the master's ``spark://`` URL,
    ``driver_host`` the address the workers reach the driver at."""

    def __init__(self, folder: str, workers: int = 2, *, namespace: bool = True):
        self.folder = folder
        self.n_workers = workers
        self.want_namespace = namespace
        self.procs: list[subprocess.Popen] = []
        self.netns: str | None = None
        self.veth: str | None = None
        self.isolation = ""
        self.host_addr = self.worker_addr = "127.0.0.1"
        self.url = ""
        self.logs: list[str] = []

    # ---------------------------------------------------------------- network

    def _make_namespace(self) -> None:
        ip = shutil.which("ip") or "/usr/sbin/ip"
        tag = f"{os.getpid() % 100000}"
        used = subprocess.run([ip, "-o", "addr"], capture_output=True, text=True, check=True).stdout
        subnet = next(f"10.77.{n}" for n in [os.getpid() % 200 + 20, *range(20, 250)]
                      if f" 10.77.{n}." not in used)
        ns, host_if, ns_if = f"ddcli-test-{tag}", f"ddh{tag}", f"ddn{tag}"
        _run(ip, "netns", "add", ns)
        self.netns = ns
        _run(ip, "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        self.veth = host_if
        _run(ip, "link", "set", ns_if, "netns", ns)
        _run(ip, "addr", "add", f"{subnet}.1/24", "dev", host_if)
        _run(ip, "link", "set", host_if, "up")
        _run(ip, "netns", "exec", ns, ip, "addr", "add", f"{subnet}.2/24", "dev", ns_if)
        _run(ip, "netns", "exec", ns, ip, "link", "set", ns_if, "up")
        _run(ip, "netns", "exec", ns, ip, "link", "set", "lo", "up")
        self.host_addr, self.worker_addr = f"{subnet}.1", f"{subnet}.2"
        self.isolation = f"network namespace {ns}: workers at {self.worker_addr}, master and driver at {self.host_addr}"

    def _drop_namespace(self) -> None:
        ip = shutil.which("ip") or "/usr/sbin/ip"
        if self.netns:
            # whatever still runs in the namespace (an executor the worker left behind)
            pids = subprocess.run([ip, "netns", "pids", self.netns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run([ip, "netns", "del", self.netns], capture_output=True)
            self.netns = None
        if self.veth:
            subprocess.run([ip, "link", "del", self.veth], capture_output=True)  # gone with the namespace, usually
            self.veth = None

    # ---------------------------------------------------------------- processes

    def _env(self, local_ip: str) -> dict:
        env = {k: os.environ[k] for k in ("PATH", "HOME", "JAVA_HOME", "LANG", "TMPDIR") if k in os.environ}
        venv_bin = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                                      if os.path.abspath(p) != os.path.abspath(venv_bin))
        env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP=local_ip, SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
                   SPARK_NO_DAEMONIZE="1")
        return env

    def _spawn(self, name: str, args: list[str], local_ip: str, netns: str | None) -> subprocess.Popen:
        log = os.path.join(self.folder, f"{name}.log")
        self.logs.append(log)
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), *args]
        if netns:
            cmd = [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", netns, *cmd]
        cwd = os.path.join(self.folder, name)
        os.makedirs(cwd, exist_ok=True)
        with open(log, "wb") as fh:
            p = subprocess.Popen(cmd, env=self._env(local_ip), cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p

    def _log(self, name: str) -> str:
        try:
            with open(os.path.join(self.folder, f"{name}.log"), errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def start(self, timeout: float = 120) -> "Cluster":
        os.makedirs(self.folder, exist_ok=True)
        if self.want_namespace:
            try:
                self._make_namespace()
            except (OSError, subprocess.SubprocessError, StopIteration) as e:
                detail = getattr(e, "stderr", "") or e
                self._drop_namespace()
                self.isolation = f"loopback only: cannot create a network namespace ({str(detail).strip()})"
        else:
            self.isolation = "loopback only: namespace not asked for"
        try:
            self._start_daemons(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_daemons(self, timeout: float) -> None:
        port = free_port(self.host_addr)
        self.url = f"spark://{self.host_addr}:{port}"
        master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", self.host_addr,
                                        "--port", str(port), "--webui-port", "0"], self.host_addr, None)
        deadline = time.monotonic() + timeout
        while "I have been elected leader" not in self._log("master"):
            if master.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark master did not start:\n{self._log('master')[-3000:]}")
            time.sleep(0.2)
        for i in range(self.n_workers):
            self._spawn(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", self.worker_addr,
                                       "--cores", "1", "--memory", WORKER_MEMORY, "--webui-port", "0",
                                       "--work-dir", os.path.join(self.folder, f"worker{i}", "work")],
                        self.worker_addr, self.netns)
        while self._log("master").count("Registering worker") < self.n_workers:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {os.path.basename(path)}\n{open(path, errors='replace').read()[-2000:]}"
                                 for path in self.logs)
                raise RuntimeError(f"the Spark workers did not register with the master:\n{logs}")
            time.sleep(0.2)

    def app_dirs(self) -> list[str]:
        """The executors' folders the workers made, one per application and executor."""
        out = []
        for i in range(self.n_workers):
            work = os.path.join(self.folder, f"worker{i}", "work")
            if os.path.isdir(work):
                for app in sorted(os.listdir(work)):
                    for ex in sorted(os.listdir(os.path.join(work, app))):
                        out.append(os.path.join(work, app, ex))
        return out

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the executors and Python workers of the group too
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()
        self._drop_namespace()
