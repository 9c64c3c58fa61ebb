"""The warm engine (ddcli/service/): what a user expects of it, each in real processes.

Every command here is ``python -m ddcli`` in a process of its own, as a shell, cron or
Airflow would start it; the services it starts live in a folder of the test's own
(``DDCLI_SERVICE_DIR``): the tests count and kill services, so none of another test may be
there; every service in it is stopped at the end. The commands of one test share one
service where they can, as a user's commands do.

The store is checked with pyarrow and a plain fold of the update files, never through the
code under test; "identical" compares two stores built with and without the service.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from storage.store import Store
from tests.helpers import REPO
from tests.helpers.operations import ddcli_env

WORDS = [os.path.join(REPO, "sample_data", f"words_{i}.csv") for i in (1, 2)]
WORDCOUNT = os.path.join(REPO, "sample_data", "pipelines", "wordcount.py")

# a pipeline whose task waits (while SLOW_MARK is set) until a release file appears: a run
# that is busy in a Spark task for as long as a test needs
HELD = """
import os
import time


def held(counts):
    mark = os.environ.get("SLOW_MARK")
    if len(counts) and mark:
        open(mark, "w").close()
        deadline = time.time() + 300
        while not os.path.exists(mark + ".release") and time.time() < deadline:
            time.sleep(0.1)
    return counts


def pipeline(p):
    p.output("held", p.input("words").threshold(held))
"""


def ddcli(args: list[str], cwd, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m ddcli ARGS`` in ``cwd`` (stdout and stderr are pipes: it must return)."""
    return subprocess.run([sys.executable, "-m", "ddcli", *args], cwd=str(cwd), env=ddcli_env(env),
                          capture_output=True, text=True, timeout=timeout)


def started(args: list[str], cwd, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ddcli", *args], cwd=str(cwd), env=ddcli_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def services() -> dict[str, int]:
    """The live services of the test session's folder: key -> pid."""
    from ddcli.service.folder import holder, keys
    folder = os.environ["DDCLI_SERVICE_DIR"]
    return {k: pid for k in keys(folder) if (pid := holder(folder, k)) is not None}


def wait_for(path, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, out, err


def fold_csv(paths: list[str]) -> dict:
    """Word counts of update files (word, time, diff), folded in plain Python."""
    acc: Counter = Counter()
    for path in paths:
        with open(path) as fh:
            head = fh.readline().strip().split(",")
            for line in fh:
                row = dict(zip(head, line.strip().split(",")))
                acc[row["word"]] += int(row.get("diff") or 1)
    return {w: n for w, n in acc.items() if n}


def collection(store: str, trace: str) -> dict:
    """A trace accumulated over all its times, read with pyarrow: row -> multiplicity."""
    import pyarrow.parquet as pq
    st = Store(store)
    t = st.state().traces[trace]
    acc: Counter = Counter()
    for path in st.layer_paths(t, t.layers):
        for r in pq.read_table(path).to_pylist():
            acc[tuple(sorted((k, v) for k, v in r.items() if k != "diff" and not k.startswith("time")))] += r["diff"]
    return {k: v for k, v in acc.items() if v}


def history(store: str) -> dict:
    """Every trace's updates (data, time, diff), consolidated, read with pyarrow."""
    import pyarrow.parquet as pq
    st = Store(store)
    out = {}
    for name, t in st.state().traces.items():
        acc: Counter = Counter()
        for path in st.layer_paths(t, t.layers + t.pending):
            for r in pq.read_table(path).to_pylist():
                acc[tuple(sorted((k, v) for k, v in r.items() if k != "diff"))] += r["diff"]
        out[name] = sorted((k, v) for k, v in acc.items() if v)
    return out


@pytest.fixture(autouse=True)
def own_services(monkeypatch):
    """A folder of services for this test alone (short, under /tmp: a socket's path must
    fit in 100 bytes); every service in it is stopped at the end."""
    import shutil
    import tempfile

    from ddcli.service.client import stop
    from ddcli.service.folder import keys

    folder = tempfile.mkdtemp(prefix="ddsvc-", dir="/tmp")
    monkeypatch.setenv("DDCLI_SERVICE_DIR", folder)
    yield folder
    for key in keys(folder):
        stop(folder, key)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def words_store(tmp_path):
    """A folder with a store ``./ddstore`` holding the first words file, and the held pipeline."""
    (tmp_path / "held.py").write_text(HELD)
    ok(ddcli(["ingest", "words", WORDS[0]], tmp_path))
    return tmp_path


# ------------------------------------------------------------------ identical results


def _normalised(res: subprocess.CompletedProcess) -> tuple[int, str, str]:
    out = re.sub(r"ran in \d+\.\d s", "ran in N s", res.stdout)
    records = []
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            r.pop("seconds", None)
            r["steps"] = [s["step"] for s in r.get("steps", []) if s["step"] != "spark_start"]
            line = json.dumps(r, sort_keys=True)
        records.append(line)
    return res.returncode, "\n".join(records), res.stderr


@pytest.mark.slow
def test_results_exit_codes_and_stores_are_the_same_with_and_without_the_service(tmp_path):
    (tmp_path / "bad.py").write_text('def pipeline(p):\n    p.output("o", p.input("words").select("nope"))\n')
    steps = [["ingest", "words", WORDS[0]], ["run", WORDCOUNT], ["run", str(tmp_path / "bad.py")],
             ["ingest", "words", WORDS[1]], ["run", WORDCOUNT, "--json"], ["run", WORDCOUNT, "--strict-noop"],
             ["verify", WORDCOUNT], ["run", WORDCOUNT, "missing.py"]]
    seen = {}
    for mode in ("0", "1"):
        work = tmp_path / f"service_{mode}"
        work.mkdir()
        seen[mode] = [_normalised(ddcli(args, work, {"DDCLI_SERVICE": mode})) for args in steps]
        seen[mode + "store"] = history(str(work / "ddstore"))
        seen[mode + "runs"] = {n: (r["runs"], r["frontier"], r["fingerprint"])
                               for n, r in Store(str(work / "ddstore")).state().pipelines.items()}
    assert [code for code, _, _ in seen["1"]] == [0, 0, 2, 0, 0, 4, 0, 2], seen["1"]
    assert seen["1"] == seen["0"]
    assert seen["1store"] == seen["0store"] and seen["1store"]["counts"]
    assert seen["1runs"] == seen["0runs"]
    assert len(services()) >= 1


# ------------------------------------------------------------------ the client's world


SCALED = """
import os

from factor import FACTOR

SCALE = int(os.environ["SCALE"])  # read by the pipeline file, in the command's process


def scaled(counts):
    # read inside a Spark task: the task sees the client's environment
    return counts * int(os.environ["TASK_SCALE"]) * FACTOR * SCALE


def pipeline(p):
    p.output(os.environ["OUT_NAME"], p.input("words").threshold(scaled))
"""


def test_a_command_uses_the_clients_folder_environment_and_current_files(tmp_path):
    base = fold_csv([WORDS[0]])
    ran_by = []
    for name, factor, scale, task_scale in (("a", 1, 2, 1), ("b", 5, 1, 3)):
        work = tmp_path / name
        work.mkdir()
        (work / "factor.py").write_text(f"FACTOR = {factor}\n")
        (work / "scaled.py").write_text(SCALED)
        ok(ddcli(["ingest", "words", WORDS[0]], work))  # the default store: ./ddstore of the client's folder
        env = {"SCALE": str(scale), "TASK_SCALE": str(task_scale), "OUT_NAME": f"out_{name}"}
        ok(ddcli(["run", "scaled.py"], work, env))
        got = {dict(k)["word"]: v for k, v in collection(str(work / "ddstore"), f"out_{name}").items()}
        assert got == {w: n * factor * scale * task_scale for w, n in base.items()}
        ran_by.append(services())
    assert ran_by[0] == ran_by[1] and len(ran_by[0]) == 1, ran_by  # one service ran both

    # a helper module the pipeline imports is read again: rebuilt with FACTOR = 7
    work = tmp_path / "a"
    (work / "factor.py").write_text("FACTOR = 7\n")
    env = {"SCALE": "1", "TASK_SCALE": "1", "OUT_NAME": "out_a"}
    ok(ddcli(["run", "scaled.py", "--rebuild"], work, env))
    got = {dict(k)["word"]: v for k, v in collection(str(work / "ddstore"), "out_a").items()}
    assert got == {w: n * 7 for w, n in base.items()}
    # and so is the pipeline file: an edit of its dataflow is refused until --rebuild
    (work / "scaled.py").write_text(SCALED.replace(".threshold(scaled)", ".distinct().threshold(scaled)"))
    res = ddcli(["run", "scaled.py"], work, env)
    assert res.returncode == 2 and "changed since its last run: new distinct (scaled.py:" in res.stderr, res.stderr
    assert services() == ran_by[0]


# ------------------------------------------------------------------ two commands at once


def test_a_busy_service_sends_the_next_command_to_its_own_process_and_the_lease_still_holds(words_store, tmp_path):
    mark = tmp_path / "mark"
    first = started(["run", "held.py"], words_store, {"SLOW_MARK": str(mark)})
    try:
        wait_for(mark, first)
        # another store: runs at once, in a process of its own (the service is busy)
        other = tmp_path / "other"
        other.mkdir()
        ok(ddcli(["ingest", "words", WORDS[1]], other))
        ok(ddcli(["run", WORDCOUNT, "--json"], other))
        assert collection(str(other / "ddstore"), "counts")
        # the same store and pipeline: the run lease of the first says no, in one line, at once
        asked = time.monotonic()
        res = ddcli(["run", "held.py"], words_store)
        assert res.returncode == 3, res
        assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1 and "another process" in res.stderr
        assert time.monotonic() - asked < 30, "the client waited for the busy service"
        # a busy service's clients run the command themselves: no second service was started
        assert not any("not starting" in open(os.path.join(os.environ["DDCLI_SERVICE_DIR"], f)).read()
                       for f in os.listdir(os.environ["DDCLI_SERVICE_DIR"]) if f.endswith(".log"))
    finally:
        (tmp_path / "mark.release").touch()
    code, out, err = finish(first)
    assert code == 0 and "pipeline 'held' ran" in out, (out, err)
    assert collection(str(words_store / "ddstore"), "held") == collection(str(words_store / "ddstore"), "words")


# ------------------------------------------------------------------ Ctrl-C, death, hang


def test_ctrl_c_cancels_the_command_exits_130_writes_nothing_and_the_service_stays(words_store, tmp_path, digest):
    store = str(words_store / "ddstore")
    ok(ddcli(["run", WORDCOUNT], words_store))  # the service is warm
    before = services()
    log_before = digest(os.path.join(store, "log"))
    mark = tmp_path / "mark"
    run = started(["run", "held.py"], words_store, {"SLOW_MARK": str(mark)})
    wait_for(mark, run)
    os.killpg(run.pid, signal.SIGINT)  # what a terminal sends
    sent = time.time()
    code, out, err = finish(run, timeout=120)
    assert (code, out, err) == (130, "", "error: interrupted; nothing was written\n")
    assert time.time() - sent < 60
    assert digest(os.path.join(store, "log")) == log_before
    assert "held" not in Store(store).state().pipelines
    assert services() == before  # the same service, still warm
    res = ok(ddcli(["run", "held.py", "--json"], words_store))
    assert json.loads(res.stdout)["noop"] is False
    assert services() == before


def test_a_service_killed_mid_run_loses_nothing_and_the_client_says_so_in_one_line(words_store, tmp_path, digest):
    store = str(words_store / "ddstore")
    mark = tmp_path / "mark"
    run = started(["run", "held.py"], words_store, {"SLOW_MARK": str(mark)})
    wait_for(mark, run)
    log_before = digest(os.path.join(store, "log"))
    (pid,) = services().values()
    os.kill(pid, signal.SIGKILL)
    code, out, err = finish(run, timeout=120)
    assert code == 1 and out == "" and err.count("\n") == 1, (code, out, err)
    assert err.startswith("error: the ddcli service stopped during the command") and "run it again" in err
    assert digest(os.path.join(store, "log")) == log_before
    # a new service; the run does all the work, once
    res = ok(ddcli(["run", "held.py", "--json"], words_store))
    assert json.loads(res.stdout)["noop"] is False and services() and pid not in services().values()
    assert collection(store, "held") == collection(store, "words")

    # dying just after its commit is linked: the commit stands, the next run has nothing to do
    ok(ddcli(["ingest", "words", WORDS[1]], words_store))
    res = ddcli(["run", WORDCOUNT], words_store, {"DDCLI_FAULT": "log.after_link"})
    assert res.returncode == 1 and res.stderr.startswith("error: the ddcli service stopped"), res
    assert "nothing to do" in ok(ddcli(["run", WORDCOUNT], words_store)).stdout
    counts = {(dict(k)["word"], dict(k)["count"]): v for k, v in collection(store, "counts").items()}
    assert counts == {(w, n): 1 for w, n in fold_csv(WORDS).items()}


def test_a_hung_service_is_killed_after_ctrl_c_and_the_client_says_so_in_one_line(words_store, tmp_path, digest):
    store = str(words_store / "ddstore")
    mark = tmp_path / "mark"
    run = started(["run", "held.py"], words_store, {"SLOW_MARK": str(mark), "DDCLI_SERVICE_GRACE": "3"})
    wait_for(mark, run)
    log_before = digest(os.path.join(store, "log"))
    (pid,) = services().values()
    os.kill(pid, signal.SIGSTOP)  # hung
    try:
        os.killpg(run.pid, signal.SIGINT)
        code, out, err = finish(run, timeout=120)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert code == 130 and out == "" and err.count("\n") == 1, (code, out, err)
    assert err.startswith("error: interrupted; the ddcli service did not stop the command"), err
    assert digest(os.path.join(store, "log")) == log_before
    deadline = time.time() + 30  # its lock goes with the last of its processes
    while pid in services().values() and time.time() < deadline:
        time.sleep(0.2)
    assert pid not in services().values()


# ------------------------------------------------------------------ which service


def test_another_spark_setting_or_version_never_reuses_a_service(tmp_path, monkeypatch):
    from ddcli.service import identity
    env = dict(os.environ, DDCLI_SPARK_MEMORY="1g")
    key = identity.service_key("local[*]", env)
    for changed in ({"DDCLI_SPARK_MEMORY": "2g"}, {"DDCLI_SPARK_CONF": "spark.sql.codegen.wholeStage=true"}, {"PYSPARK_PYTHON": "/usr/bin/python3"}, {"JAVA_HOME": "/opt/jdk"},
                    {"SPARK_CONF_DIR": "/etc/spark"}, {"DDCLI_SPARK_EXECUTOR_PYTHON": "python3.12"},
                    {"TMPDIR": "/var/tmp"}, {"PYTHONPATH": "/elsewhere"}):
        assert identity.service_key("local[*]", {**env, **changed}) != key, changed
    assert identity.service_key("local[2]", env) != key
    for same in ({"DDCLI_STORE": "/x"}, {"AWS_REGION": "eu-west-1"}, {"PWD": "/tmp"}, {"MY_SETTING": "1"}):
        assert identity.service_key("local[*]", {**env, **same}) == key, same  # commands bring their own
    # a Spark setting of the configuration file counts as the environment's would
    from ddcli.service import client
    monkeypatch.chdir(tmp_path)
    unset = {k: v for k, v in env.items() if k != "DDCLI_SPARK_MEMORY"}  # the environment beats the file
    monkeypatch.setattr(os, "environ", unset)
    plain = identity.service_key("local[*]", client._settings())
    assert plain == identity.service_key("local[*]", unset)
    (tmp_path / "ddcli.toml").write_text('spark_memory = "2g"\n')
    assert identity.service_key("local[*]", client._settings()) != plain
    (tmp_path / "ddcli.toml").write_text("spark_memory = \n")  # a broken file: the command runs in its own process
    assert client._settings() is None
    (tmp_path / "ddcli.toml").unlink()
    monkeypatch.undo()
    monkeypatch.setattr(identity, "pyspark_identity", lambda: "another pyspark")
    assert identity.service_key("local[*]", env) != key
    monkeypatch.undo()
    monkeypatch.setattr(identity.sys, "version", sys.version + " (another build)")
    assert identity.service_key("local[*]", env) != key
    monkeypatch.undo()

    # an edited source file of ddcli: another key (a copy of the code, edited)
    import shutil
    for package in ("ddcli", "ops", "storage"):
        shutil.copytree(os.path.join(REPO, package), tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(identity, "code_root", lambda: str(tmp_path))
    copied = identity.service_key("local[*]", env)
    with open(tmp_path / "ops" / "run" / "run.py", "a") as fh:
        fh.write("\n# an edit\n")
    assert identity.service_key("local[*]", env) != copied


def test_the_code_hash_a_client_keeps_follows_every_edit(tmp_path, monkeypatch):
    # a client keeps the hash of ddcli's code in the service folder under the files' status:
    # read back while nothing changed, another one after any edit, even one that keeps the
    # file's size and sets its modification time back
    import shutil

    from ddcli.service import identity
    for package in ("ddcli", "ops", "storage"):
        shutil.copytree(os.path.join(REPO, package), tmp_path / "code" / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(identity, "code_root", lambda: str(tmp_path / "code"))
    cache = tmp_path / "services"
    cache.mkdir()
    first = identity.code_identity(str(cache))
    assert first == identity.code_identity()
    kept = [p for p in cache.iterdir() if p.name.startswith(identity.CODE_CACHE)]
    assert len(kept) == 1 and kept[0].read_text() == first
    kept[0].write_text("f" * 64)  # what the cache holds is what a client reads while nothing changes
    assert identity.code_identity(str(cache)) == "f" * 64
    kept[0].write_text(first)

    edited = tmp_path / "code" / "ops" / "run" / "run.py"
    st = edited.stat()
    time.sleep(0.05)  # (the kernel's clock for file times ticks every few milliseconds)
    text = edited.read_text()
    edited.write_text(text[:-1] + "#")  # the last character replaced: the same size
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same modification time
    assert edited.stat().st_size == st.st_size and edited.stat().st_mtime_ns == st.st_mtime_ns
    second = identity.code_identity(str(cache))
    assert second != first and second == identity.code_identity()
    assert identity.service_key("local[*]", os.environ, cache=str(cache)) == identity.service_key("local[*]", os.environ)


def test_two_settings_two_services_and_a_cluster_master_bypasses_them(words_store, tmp_path):
    ok(ddcli(["run", WORDCOUNT], words_store))
    ok(ddcli(["run", WORDCOUNT], words_store, {"DDCLI_SPARK_MEMORY": "900m"}))  # nothing to do: no JVM
    assert len(set(services().values())) == 2

    from ddcli.service.client import forward
    env = {"DDCLI_SERVICE_DIR": str(tmp_path / "unused")}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        assert forward(["run", "x.py", "--master", "spark://127.0.0.1:7077"]) is None
        assert forward(["run", "x.py", "--master=spark://127.0.0.1:7077"]) is None
        mp.setenv("DDCLI_SPARK_MASTER", "spark://127.0.0.1:7077")
        assert forward(["verify", "x.py"]) is None
        mp.delenv("DDCLI_SPARK_MASTER")
        assert forward(["run", "--help"]) is None and forward(["query", "t"]) is None
        mp.setenv("DDCLI_SERVICE", "0")
        assert forward(["run", "x.py"]) is None
    assert not os.path.exists(tmp_path / "unused")  # nothing was started or made


# ------------------------------------------------------------------ private, detached, streams


def _descendants(pid: int) -> list[int]:
    out = [pid]
    for p in out:
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                out += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return out


def _listening_tcp() -> dict[str, str]:
    """Listening TCP sockets of the machine: inode -> local address (hex, as /proc has it)."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A":  # LISTEN
                    out[cols[9]] = cols[1].split(":")[0]
    return out


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_the_service_is_private_and_detached_from_the_clients_terminal_and_pipes(words_store):
    ok(ddcli(["service", "stop"], words_store))
    # pipes for stdout and stderr: the run returns and they reach EOF while the service lives on
    res = ok(ddcli(["run", WORDCOUNT], words_store))
    assert "pipeline 'wordcount' ran" in res.stdout
    (pid,) = services().values()
    folder = os.environ["DDCLI_SERVICE_DIR"]
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    (sock,) = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".sock")]
    assert stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) & 0o077 == 0
    assert os.getsid(pid) not in (os.getsid(0), os.getpgid(0)) and os.getsid(pid) != pid  # double fork
    fds = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    assert fds["0"] == "/dev/null" and fds["1"] == fds["2"] and fds["1"].endswith(".log"), fds
    for p in _descendants(pid):  # neither the service nor its JVM and Python workers write to a pipe
        for fd in ("1", "2"):
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except FileNotFoundError:  # an idle Python worker that just exited
                continue
            assert not link.startswith("pipe:"), (p, fd, link)
    own = {os.readlink(f"/proc/{pid}/fd/{fd}")[len("socket:["):-1] for fd in fds
           if fds[fd].startswith("socket:[")}
    # the service answers on its Unix socket only; the one TCP port its process listens on
    # is PySpark's (Py4J's callback server, on the loopback, with a secret), as in any run
    listening = _listening_tcp()
    assert all(listening[i] in LOOPBACK for i in own if i in listening), "a TCP port reachable from outside"
    # a folder open to others is made private again
    os.chmod(folder, 0o755)
    ok(ddcli(["run", WORDCOUNT], words_store))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


def test_progress_reaches_the_client_as_it_happens_and_a_terminal_is_a_terminal(words_store, tmp_path):
    mark = tmp_path / "mark"
    run = started(["run", "held.py"], words_store, {"SLOW_MARK": str(mark), "DDCLI_PROGRESS": "1",
                                                    "DDCLI_NO_PROGRESS": "0"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(run.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(mark, run)
        deadline = time.time() + 60
        while not any("Spark" in line for line in lines[1:]) and time.time() < deadline:
            time.sleep(0.1)
        assert lines[0] == "· starting Spark\n", lines  # while the run's task still waits
        assert re.fullmatch(r"· (Spark ready in \d+\.\d s|Spark already running)\n", lines[1]), lines
        assert run.poll() is None
    finally:
        (tmp_path / "mark.release").touch()
    assert run.wait(timeout=600) == 0
    reader.join(timeout=60)

    # on a terminal (a pty), progress shows without DDCLI_PROGRESS: the client's isatty decides
    import pty
    ok(ddcli(["ingest", "words", WORDS[1]], words_store))
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ddcli", "run", WORDCOUNT], cwd=str(words_store),
                            env=ddcli_env({"DDCLI_NO_PROGRESS": "0"}), stdin=subprocess.DEVNULL, stdout=secondary,
                            stderr=secondary)
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    assert proc.wait(timeout=600) == 0
    text = seen.decode()
    assert "starting Spark" in text and "pipeline 'wordcount' ran" in text, text


# ------------------------------------------------------------------ status, stop, idle


def test_status_stop_and_idle_stop(words_store):
    ok(ddcli(["run", WORDCOUNT], words_store))
    rows = [json.loads(line) for line in ok(ddcli(["service", "status", "--json"], words_store)).stdout.splitlines()]
    assert [r["pid"] for r in rows] == list(services().values())
    assert rows[0]["state"] == "idle" and rows[0]["commands"] >= 1 and rows[0]["master"] == "local[*]"
    stopped = json.loads(ok(ddcli(["service", "stop", "--json"], words_store)).stdout)
    assert len(stopped["stopped"]) == 1 and services() == {}
    assert "no ddcli service is running" in ok(ddcli(["service", "status"], words_store)).stdout

    # a short idle time: the service started by a command with nothing to do stops by itself
    ok(ddcli(["run", WORDCOUNT], words_store, {"DDCLI_SERVICE_IDLE": "1"}))
    deadline = time.time() + 60
    while services() and time.time() < deadline:
        time.sleep(0.2)
    assert services() == {}


def test_the_service_warms_up_once_after_its_first_command_and_leaves_nothing(words_store):
    """After its first run, the service runs a small pipeline of its own (a loop, a reduce,
    a join) in a folder it removes; the next command waits for it, the user's store holds
    only its own traces, and the warm-up's jobs are no command's (``--json`` counts the
    same jobs as a run in its own process: see the test of identical results)."""
    from ddcli.service.folder import log_path

    ok(ddcli(["run", WORDCOUNT], words_store))
    ok(ddcli(["ingest", "words", WORDS[1]], words_store))
    ok(ddcli(["run", WORDCOUNT], words_store))
    folder = os.environ["DDCLI_SERVICE_DIR"]
    (key,) = services()
    with open(log_path(folder, key)) as fh:
        logged = [line for line in fh if "warm-up" in line]
    assert len(logged) == 1 and "warm-up: done" in logged[0], logged
    assert not [n for n in os.listdir(folder) if n.startswith("warm-up-")]
    assert sorted(Store(str(words_store / "ddstore")).state().traces) == ["counts", "words"]
    assert collection(str(words_store / "ddstore"), "counts") == {
        (("count", n), ("word", w)): 1 for w, n in fold_csv(WORDS).items()}
