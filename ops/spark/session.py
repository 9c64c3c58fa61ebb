"""One quiet Spark session per command, tuned for small machines (docs/architecture.md says what Spark costs).

Local mode by default (an embedded engine: nothing to start); ``--master`` or
``DDCLI_SPARK_MASTER`` points at a cluster, with the store on a shared filesystem.

On a cluster (any master that is not ``local…``):

* the driver advertises ``DDCLI_SPARK_DRIVER_HOST`` (default: this host's address on the
  route to the master) and binds ``DDCLI_SPARK_BIND_ADDRESS`` (default: the driver host);
  local mode keeps both on 127.0.0.1;
* executors run ``DDCLI_SPARK_EXECUTOR_PYTHON``, else ``PYSPARK_PYTHON``, else
  ``python3`` on their PATH (local mode: this process's interpreter); it needs pyarrow,
  numpy and pandas (pyspark itself comes from the workers' Spark);
* ddcli's packages ``ops`` and ``storage`` are shipped as a zip (ops/spark/code_zip.py) unless
  ``DDCLI_SPARK_SHIP_CODE=0`` says the executors have them;
* the master must answer, and the executors run a first task that imports the shipped
  packages, within ``DDCLI_SPARK_CONNECT_TIMEOUT`` seconds (default 120): otherwise one
  :class:`SparkSetupError` line says what is missing, instead of a hang.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings

from ops.errors import SparkSetupError
from ops.spark import class_archive, code_zip, reaper
from ops.spark.arrow_types import SESSION_TIME_ZONE

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""

_session = None
announce = None  # a progress line's printer (the command's), told of long work at the end
_archive = class_archive.Plan("")  # the class archive this process's JVM maps or writes

LOOPBACK = "127.0.0.1"
#: the name Spark gives the Python daemon's Unix socket (a dot, a UUID, ``.sock``), and the
#: longest path a socket may have with room to spare (``sun_path``: 108 bytes on Linux, 104 on macOS)
UNIX_SOCKET_NAME = ".00000000-0000-0000-0000-000000000000.sock"
MAX_UNIX_SOCKET_PATH = 100


def worker_socket_settings(folder: str) -> dict[str, str]:
    """Spark's settings for its JVM to talk to local Python workers over a Unix socket in
    ``folder`` (the session's private scratch folder) rather than TCP on the loopback: a
    plain job of one Python task took 26-38 ms rather than 74-80 ms (a task's messages are
    small, and TCP delays them); PySpark's accumulator server listens there too. Empty when
    the socket's path would be too long (a deep ``TMPDIR``) or the system has no Unix
    sockets: TCP then, as by default."""
    import socket
    if not hasattr(socket, "AF_UNIX") or len(os.path.join(folder, UNIX_SOCKET_NAME)) > MAX_UNIX_SOCKET_PATH:
        return {}
    return {"spark.python.unix.domain.socket.enabled": "true", "spark.python.unix.domain.socket.dir": folder}


def master_url(master: str | None = None) -> str:
    return master or os.environ.get("DDCLI_SPARK_MASTER") or "local[*]"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def executor_settings() -> dict[str, str]:
    """The settings Spark tasks read (storage/settings.py), as this process has them."""
    from storage.settings import SETTINGS
    return {s.env: os.environ[s.env] for s in SETTINGS if s.executors and os.environ.get(s.env)}


def spark_conf() -> dict[str, str]:
    """``DDCLI_SPARK_CONF``: more Spark settings, ``spark.NAME=VALUE`` pairs separated by
    ``;`` (a command checks it with every other setting before it starts; a library caller
    with a bad value gets this one line)."""
    from storage.settings import BY_ENV
    raw = os.environ.get("DDCLI_SPARK_CONF", "")
    try:
        text = BY_ENV["DDCLI_SPARK_CONF"].check(raw)
    except ValueError as e:
        raise SparkSetupError(f"DDCLI_SPARK_CONF {e}") from None
    return dict(p.split("=", 1) for p in text.split(";") if p)


def connect_timeout() -> float:
    raw = os.environ.get("DDCLI_SPARK_CONNECT_TIMEOUT", "120")
    try:
        value = float(raw)
    except ValueError:
        raise SparkSetupError(f"DDCLI_SPARK_CONNECT_TIMEOUT={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise SparkSetupError(f"DDCLI_SPARK_CONNECT_TIMEOUT={raw!r} must be positive")
    return value


def running_spark():
    """The process's Spark session if it has started one, else None (nothing is started)."""
    return _session


def get_spark(master: str | None = None, *, memory: str | None = None):
    """The process's Spark session, started on first use with the project's settings."""
    global _session
    if _session is not None:
        if _warm["on"]:  # the command's settings are known now (ddcli.toml's among them)
            _apply_task_env(_session)
        return _session
    url = master_url(master)
    local = is_local(url)
    if not local:
        # before the JVM: an unreachable master is one line after the timeout, not a hang
        check_master(url, connect_timeout())
    host, bind = driver_addresses(url)
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    import logging
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # PySpark logs every analysis error as a JSON record; ours is the one-line message
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", bind)
    else:  # the address the driver's services bind (an inherited loopback would strand executors)
        os.environ["SPARK_LOCAL_IP"] = bind if bind != "0.0.0.0" else host
    # PySpark gives executors the interpreter named by PYSPARK_PYTHON when the context starts
    os.environ["PYSPARK_PYTHON"] = executor_python(url)
    scratch = tempfile.mkdtemp(prefix="ddcli-spark-")
    atexit.register(shutil.rmtree, scratch, True)
    log4j = os.path.join(scratch, "log4j2.properties")
    with open(log4j, "w") as fh:
        fh.write(_LOG4J)
    # -Xss: a long loop (hundreds of rounds, e.g. sssp prioritized by distance) builds task
    # closures deep enough that deserializing one overflowed the default 1 MB thread stack
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -XX:-UsePerfData -Xss16m"
    # the driver (in local mode the only JVM) uses the throughput collector: G1's concurrent
    # marking competed with tasks for the two cores (reach, 50,000 updates: JVM CPU 187 s ->
    # 155 s, run 113 s -> 111 s on local[1]); a cluster's executors keep their own choice
    # GCTimeRatio=9: the collector may spend up to a tenth of the time collecting rather
    # than grow the heap towards its maximum to spend a hundredth (the default, 99): a
    # year-long backfill's JVM peaked at 0.8 GiB instead of 1.4 GiB (ddcli bench backfill)
    driver_opts = java_opts + " -XX:+UseParallelGC -XX:GCTimeRatio=9"
    global _archive
    _archive = class_archive.plan() if local else class_archive.Plan("")
    if _archive.pending:  # runs before the scratch folder's removal (atexit is last-in, first-out)
        atexit.register(stop_spark)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(url)
        .appName("ddcli")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("DDCLI_SHUFFLE_PARTITIONS", "4"))
        .config("spark.default.parallelism", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.maxPlanStringLength", "10000")
        .config("spark.driver.memory", memory or os.environ.get("DDCLI_SPARK_MEMORY", "3g"))
        .config("spark.local.dir", scratch)
        .config("spark.driver.host", host)
        .config("spark.driver.bindAddress", bind)
        .config("spark.driver.extraJavaOptions", f"{driver_opts} {_archive.options}".strip())
        # a cluster's executors log as their workers are set up to (the log4j file is the driver's)
        .config("spark.executor.extraJavaOptions", java_opts if local else "-XX:-UsePerfData -Xss16m")
        .config("spark.hadoop.parquet.filter.dictionary.enabled", "false")
        # layers carry page checksums (storage/integrity.py): a damaged page fails the read
        .config("spark.hadoop.parquet.page.verify-checksum.enabled", "true")
        .config("spark.sql.adaptive.enabled", "false")
        # constraint propagation through the unions of loop frames fails inside Spark's
        # optimizer ("key not found: time_2", a record entered at a priority into a loop
        # nested in another) and costs planning time on long plans; ddcli needs none of it
        .config("spark.sql.constraintPropagation.enabled", "false")
        .config("spark.sql.session.timeZone", SESSION_TIME_ZONE)
        # decimal results exact or refused (ANSI), never rounded to fit 38 digits (Spark's default)
        .config("spark.sql.decimalOperations.allowPrecisionLoss", "false")
        # PySpark's DataFrame debugging records the Python call site of every DataFrame call:
        # a stack walk and three Py4J calls each (a pipeline's planning makes thousands), and
        # an import of IPython on the first (0.6 s); ddcli's errors name the pipeline's line
        # themselves
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # a barrier stage (a resident loop, ops/loops/local.py) is sized by the slots when it
        # is planned; should executors go in between, Spark retries its slot check, by
        # default 40 times 15 s: fail after a minute instead (the loop then goes round by round)
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "5s")
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "12")
    )
    for name, value in spark_conf().items():  # the user's own settings win over ddcli's
        builder = builder.config(name, value)
    if local and os.environ["PYSPARK_PYTHON"] == _python():  # workers forked with ddcli's task code imported
        builder = builder.config("spark.python.daemon.module", "ops.spark.daemon")
    for name, value in (worker_socket_settings(scratch) if local else {}).items():
        builder = builder.config(name, value)
    if not local:  # local workers inherit this process's environment; a cluster's are handed it
        for name, value in executor_settings().items():
            builder = builder.config(f"spark.executorEnv.{name}", value)
    host_handler = _sigint_handler()  # PySpark replaces it with its own as its context starts
    try:
        with _jvm_environment():
            _session = _quietly(builder.getOrCreate, os.path.join(scratch, "jvm.log"))
    except Exception:
        if not _archive.options:
            raise
        # the class archive is a speed-up, never a reason to fail: forget it, start plainly
        class_archive.discard(_archive)
        _archive = class_archive.Plan("")
        builder = builder.config("spark.driver.extraJavaOptions", driver_opts)
        with _jvm_environment():
            _session = _quietly(builder.getOrCreate, os.path.join(scratch, "jvm.log"))
    _watch_interrupts(host_handler)
    _apply_task_env(_session)
    _watch_jvm()
    _session.sparkContext.setLogLevel("ERROR")
    _session.sparkContext.setCheckpointDir(os.path.join(scratch, "checkpoints"))
    if not local:
        try:
            if os.environ.get("DDCLI_SPARK_SHIP_CODE", "1") not in ("0", ""):
                _session.sparkContext.addPyFile(code_zip.code_zip())
            check_executors(_session, url, connect_timeout())
        except BaseException:
            stop_spark()
            raise
    return _session


# ---------------------------------------------------------------- a cluster


def _master_addresses(url: str) -> list[tuple[str, int]]:
    """(host, port) of each master of ``spark://h1:p1[,h2:p2]`` (standby masters included);
    empty for other kinds of master (yarn, k8s://…), which are not checked here."""
    if not url.startswith("spark://"):
        return []
    out = []
    for part in url[len("spark://"):].split(","):
        host, sep, port = part.rpartition(":")
        if not sep or not port.isdigit():
            raise SparkSetupError(f"bad Spark master URL {url!r}: expected spark://HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    return out


def check_master(url: str, timeout: float) -> None:
    """Raise :class:`SparkSetupError` unless some master of ``url`` accepts a connection
    within ``timeout`` seconds."""
    import socket
    errors = []
    for host, port in _master_addresses(url):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as e:
            errors.append(f"{host}:{port}: {'no answer within %g s' % timeout if isinstance(e, TimeoutError) else e.strerror or e}")
    if errors:
        raise SparkSetupError(f"cannot reach the Spark master {url} ({'; '.join(errors)}); is it running, "
                              f"and is the address right? (DDCLI_SPARK_CONNECT_TIMEOUT sets the wait)")


def _route_address(url: str) -> str | None:
    """This host's address on the route to the (first) master: the address its executors
    are most likely to reach the driver at."""
    import socket
    for host, port in _master_addresses(url):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((host, port))  # a UDP "connect" sends nothing: it only picks the route
                return s.getsockname()[0]
        except OSError:
            continue
    return None


def driver_addresses(url: str) -> tuple[str, str]:
    """(advertised host, bind address) of the driver: ``DDCLI_SPARK_DRIVER_HOST`` and
    ``DDCLI_SPARK_BIND_ADDRESS``; by default 127.0.0.1 in local mode, and on a cluster the
    address on the route to the master (or this host's name)."""
    host = _env("DDCLI_SPARK_DRIVER_HOST")
    if host is None:
        if is_local(url):
            host = LOOPBACK
        else:
            import socket
            host = _route_address(url) or socket.gethostname()
    bind = _env("DDCLI_SPARK_BIND_ADDRESS") or (LOOPBACK if is_local(url) and host == LOOPBACK else host)
    return host, bind


def executor_python(url: str) -> str:
    """The Python the executors run: ``DDCLI_SPARK_EXECUTOR_PYTHON``, else ``PYSPARK_PYTHON``,
    else this interpreter in local mode and ``python3`` (on the executors' PATH) on a cluster."""
    return (_env("DDCLI_SPARK_EXECUTOR_PYTHON") or _env("PYSPARK_PYTHON")
            or (_python() if is_local(url) else "python3"))


def check_executors(spark, url: str, timeout: float) -> None:
    """Run one small task on the executors that imports what ddcli's tasks import; raise
    :class:`SparkSetupError` (one line) if none ran within ``timeout`` seconds or it failed."""
    import threading
    sc = spark.sparkContext
    python = os.environ.get("PYSPARK_PYTHON", "python3")
    needs = code_zip.SHIPPED_PACKAGES + ("pyarrow", "numpy", "pandas")

    def probe(_):  # a nested function: pickled by value, so the executors need not import ops
        import importlib
        import sys
        for mod in ("ops.io.write", "ops.reduce.kernel", "storage.layer", "pyarrow", "numpy", "pandas"):
            try:
                importlib.import_module(mod)
            except Exception as e:  # noqa: BLE001 - reported to the driver as text
                yield f"{type(e).__name__}: {e} (executor Python {sys.executable})"
                return

    outcome: dict = {}

    def job():
        try:
            sc.setJobGroup("ddcli-executor-check", "can the executors run ddcli's code?", True)
            outcome["problems"] = sc.parallelize([0], 1).mapPartitions(probe).collect()
        except Exception as e:  # noqa: BLE001 - turned into one line below
            outcome["error"] = e

    worker = threading.Thread(target=job, name="ddcli-executor-check", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        sc.cancelJobGroup("ddcli-executor-check")
        raise SparkSetupError(
            f"no executor of {url} ran a task within {timeout:g} s: are workers registered with the master, "
            f"with a free core and enough memory, and can they reach this driver at "
            f"{spark.conf.get('spark.driver.host')}? (DDCLI_SPARK_DRIVER_HOST, DDCLI_SPARK_CONNECT_TIMEOUT)")
    if "error" in outcome:
        raise SparkSetupError(f"the executors of {url} cannot run ddcli's tasks with Python {python!r} "
                              f"(DDCLI_SPARK_EXECUTOR_PYTHON): {_first_cause(outcome['error'])}")
    if outcome.get("problems"):
        raise SparkSetupError(f"the executors of {url} cannot import what ddcli's tasks need ("
                              f"{', '.join(needs)}): {outcome['problems'][0]}; ddcli ships ops and storage "
                              f"unless DDCLI_SPARK_SHIP_CODE=0; set DDCLI_SPARK_EXECUTOR_PYTHON to a Python "
                              f"{'%d.%d' % __import__('sys').version_info[:2]} with pyarrow, numpy and pandas")


def _first_cause(exc: BaseException) -> str:
    """The line of a failed Spark job's error that says why (a Python error of a task, or a
    program the executor could not start), not the JVM's stack."""
    import re
    text = str(exc)
    for pattern in (r"\[PYTHON_VERSION_MISMATCH\][^\n]*", r"Cannot run program[^\n]*",
                    r"(?:ModuleNotFoundError|ImportError|PySparkRuntimeError)[^\n]*"):
        m = re.search(pattern, text)
        if m:
            return m.group(0).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def _quietly(start, log_path: str):
    """Start the JVM with its stdout and stderr going to a log file.

    The JVM prints a line about incubator modules that log4j cannot silence, and its
    fatal-error reports to stdout (which is ddcli's output: tables, JSON); it inherits our
    descriptors when it starts, so point them at a file for that moment.
    """
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with open(log_path, "ab") as log:
        for fd in saved:
            os.dup2(log.fileno(), fd)
    try:
        return start()
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def cores(spark) -> int:
    """Task slots of the session for sizing partitions: N for ``local[N]``, the CPUs for
    ``local[*]``; on a cluster ``spark.default.parallelism``, which this session sets to 4
    whatever the executors hold (tasks that must run together use :func:`slots`)."""
    n = local_cores(spark.sparkContext.master)
    return max(2, spark.sparkContext.defaultParallelism) if n is None else n


def local_cores(master: str) -> int | None:
    """Task slots of a local-mode master (``local``: 1, ``local[N]``: N, ``local[*]``: the
    CPUs); None for a cluster."""
    import re
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if m is None:
        return None
    slots = m.group(1)
    if slots is None:
        return 1
    return (os.cpu_count() or 2) if slots == "*" else int(slots)


def slots(spark) -> int:
    """Tasks the session can run at once now: :func:`cores` in local mode; on a cluster, the
    cores of the executors registered now over ``spark.task.cpus``, the figure Spark checks
    a barrier stage's partitions against (``sc.maxNumConcurrentTasks``; 0 if unknown)."""
    if is_local(spark.sparkContext.master):
        return cores(spark)
    try:
        jsc = spark.sparkContext._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # noqa: BLE001 - a Spark without the method: no tasks that run together
        return 0


#: Updates of a run without loops that one partition takes whole (no shuffle): a join of
#: 128,000 updates (ddcli bench join, 20 keys, T = 1,600) took 0.5 s in one task, 1.2 s
#: shuffled into two
SINGLE_PARTITION_ROWS = 200_000
#: Updates of a run per shuffle partition beyond one per core: a task's Arrow working set
#: (its sweeps, its layer file's sort) stays a few hundred MB whatever the run's size
#: (a year-long backfill of 2.9 * 10^6 updates: Python workers 0.96 -> 0.72 GiB at peak
#: with 6 partitions instead of 2, the same CPU seconds).
TASK_SHARE_ROWS = 500_000


def size_partitions(spark, rows: int, *, single_ok: bool = False) -> int:
    """Shuffle partitions for a piece of work of about ``rows`` updates.

    Every task costs a few tens of milliseconds, so small work gets one partition per
    core and big work one per ``TASK_SHARE_ROWS`` updates (bounded memory per task), rounded
    up to a multiple of the cores: 3 tasks on 2 cores leave the third running alone, a
    stage twice a task's time (4 smaller ones take 1.5 task times). A tiny run of a
    pipeline whose work cannot multiply round after round (``single_ok``: no loops) gets
    one partition, which needs no shuffle at all to bring a key's updates together. Set
    once per command, before any plan is built; ``DDCLI_SHUFFLE_PARTITIONS`` fixes it.
    """
    fixed = os.environ.get("DDCLI_SHUFFLE_PARTITIONS")
    if fixed:
        n = int(fixed)
    elif single_ok and rows <= SINGLE_PARTITION_ROWS:
        n = 1
    else:
        c = cores(spark)
        n = max(c, -(-min(64, rows // TASK_SHARE_ROWS + 1) // c) * c)
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    return n


def partitions(spark) -> int:
    return int(spark.conf.get("spark.sql.shuffle.partitions"))


def _python() -> str:
    import sys
    return sys.executable


def stop_spark() -> None:
    """Stop the session; on the run that writes the class archive, also let the JVM exit
    (it writes the archive as it exits) and install the archive."""
    global _session, _archive
    if _session is not None:
        from pyspark import SparkContext
        gateway = SparkContext._gateway
        _session.stop()
        _session = None
        if _archive.pending:
            if announce is not None:  # the JVM takes seconds to write it as it exits
                announce("writing Spark's class archive as the JVM exits (once: later starts are faster)")
            class_archive.finish(_archive, getattr(gateway, "proc", None))
            _archive = class_archive.Plan("")
            SparkContext._gateway = None  # that JVM is gone: a later session starts a new one
            SparkContext._jvm = None


def _watch_jvm() -> None:
    """The JVM this process launched, and its Python workers, die with this process
    (ops/spark/reaper.py), even when it is killed."""
    from pyspark import SparkContext
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None and proc.pid not in _watched:
        _watched.add(proc.pid)
        reaper.watch(proc.pid)


_watched: set[int] = set()


# ---------------------------------------------------------------- Ctrl-C

_interrupt = {"seen": False, "deferred": 0}
_warm = {"on": False}  # this process runs many commands on one session (ddcli's service)


def _sigint_handler():
    import signal
    import threading
    return signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None


def _watch_interrupts(host_handler) -> None:
    """Ctrl-C: remember it, cancel Spark's jobs, and raise KeyboardInterrupt — unless a
    commit is under way (:func:`no_interrupts`), which then finishes first.

    PySpark's own handler also cancels and raises, but the interrupted Py4J call often
    surfaces as some other error (a Py4JJavaError of the cancelled job); :func:`interrupted`
    lets the command tell the user's Ctrl-C from a failure whatever the error. A process
    that keeps its session warm routes SIGINT to :func:`on_interrupt` itself, only while
    one of its commands runs: its handler (``host_handler``, from before PySpark installed
    its own) is put back.
    """
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return
    if _warm["on"]:
        if host_handler is not None:
            signal.signal(signal.SIGINT, host_handler)
        return
    signal.signal(signal.SIGINT, on_interrupt)


def on_interrupt(signum=None, frame=None) -> None:
    """The SIGINT handler of a command (see :func:`_watch_interrupts`)."""
    import logging
    import sys
    _interrupt["seen"] = True
    if _interrupt["deferred"]:
        return
    # the interrupted Py4J call logs tracebacks and finalizers report theirs: the
    # command says "interrupted" in one line instead
    logging.disable(logging.CRITICAL)
    sys.unraisablehook = lambda unraisable: None
    if _session is not None:
        _cancel_all_jobs(_session)
    raise KeyboardInterrupt()


def _cancel_all_jobs(session, timeout: float = 10.0) -> None:
    """Cancel every Spark job, from a thread of its own: the interrupted thread's Py4J
    connection is in the middle of a call (a job's result), and a second call on it fails
    ("reentrant call"), leaving the jobs running."""
    import threading

    def cancel() -> None:
        try:
            session.sparkContext.cancelAllJobs()
        except Exception:  # noqa: BLE001 - the JVM may be gone already; the command stops anyway
            pass

    worker = threading.Thread(target=cancel, name="ddcli-cancel-jobs", daemon=True)
    worker.start()
    worker.join(timeout)


def keep_warm() -> None:
    """This process runs one command after another on one session (ddcli's service,
    ddcli/service/): a Ctrl-C cancels the command's jobs and leaves the session running
    (:func:`stop_after_interrupt`), and the process calls :func:`on_interrupt` itself. Its
    JVM will start with the process's environment as it is now (:func:`_jvm_environment`)."""
    _warm["on"] = True
    _warm["env"] = dict(os.environ)


class _jvm_environment:
    """While the JVM starts: in a process that keeps its session warm, the process's own
    environment (:func:`keep_warm`), not that of the command that happens to start the
    JVM. The Python workers the JVM starts inherit its environment, and every later
    command's tasks would see the first command's variables (``AWS_*``, ``DDCLI_*``, those
    of its ddcli.toml) wherever theirs do not set them; each command's tasks get their own
    through ``SparkContext.environment`` instead (:func:`start_command`)."""

    _STARTUP = ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")  # set by get_spark for this JVM

    def __enter__(self):
        own = _warm.get("env") if _warm["on"] else None
        self.saved = dict(os.environ) if own is not None else None
        if own is not None:
            os.environ.clear()
            os.environ.update(own)
            os.environ.update({k: self.saved[k] for k in self._STARTUP if k in self.saved})

    def __exit__(self, *exc):
        if self.saved is not None:
            os.environ.clear()
            os.environ.update(self.saved)
        return False


def start_command(task_env: dict[str, str]) -> None:
    """Before each command of a process that keeps its session: forget the last command's
    Ctrl-C, and give the Python tasks of the jobs to come exactly ``task_env`` and the
    settings tasks read as the command resolves them (:func:`executor_settings`, set again
    by :func:`get_spark` once its configuration file is read) on top of the environment the
    session started with (PySpark starts a Python worker for each distinct set, so tasks
    never see another command's settings)."""
    import logging
    import sys
    _interrupt.update(seen=False, deferred=0)
    logging.disable(logging.NOTSET)
    sys.unraisablehook = sys.__unraisablehook__
    _task_env["current"] = dict(task_env)
    if _session is not None:
        _apply_task_env(_session)


_task_env: dict = {"current": None, "base": None}


def _apply_task_env(session) -> None:
    current = _task_env["current"]
    if current is None:
        return
    env = session.sparkContext.environment
    if _task_env["base"] is None:
        _task_env["base"] = dict(env)
    env.clear()
    env.update(_task_env["base"])
    env.update(current)
    env.update(executor_settings())


def stop_after_interrupt() -> None:
    """After Ctrl-C: stop the session, whose jobs are cancelled — unless the process keeps
    it warm for the commands to come."""
    if not _warm["on"]:
        stop_spark()


def check_interrupt() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed: a KeyboardInterrupt raised by the
    handler can be swallowed where it lands (a Py4J finalizer), so a run also checks
    before it commits."""
    if _interrupt["seen"]:
        raise KeyboardInterrupt()


def interrupted() -> bool:
    """True once the user pressed Ctrl-C (SIGINT) after the Spark session started."""
    return _interrupt["seen"]


class no_interrupts:
    """A section Ctrl-C must not cut short (a commit and what depends on it)."""

    def __enter__(self):
        _interrupt["deferred"] += 1

    def __exit__(self, *exc):
        _interrupt["deferred"] -= 1
        return False
