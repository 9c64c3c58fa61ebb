"""One quiet Spark session per command, tuned for small machines (see shared/SPARK_NOTES.md).

Local mode by default (an embedded engine: nothing to start); ``--master`` or
``DDCLI_SPARK_MASTER`` points at a cluster, with the store on a shared filesystem.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings

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


def master_url(master: str | None = None) -> str:
    return master or os.environ.get("DDCLI_SPARK_MASTER") or "local[*]"


def get_spark(master: str | None = None, *, memory: str | None = None):
    """The process's Spark session, started on first use with the project's settings."""
    global _session
    if _session is not None:
        return _session
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    import logging
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # PySpark logs every analysis error as a JSON record; ours is the one-line message
        logging.getLogger(name).setLevel(logging.CRITICAL)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or _python())
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
    driver_opts = java_opts + " -XX:+UseParallelGC"
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master_url(master))
        .appName("ddcli")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("DDCLI_SHUFFLE_PARTITIONS", "4"))
        .config("spark.default.parallelism", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.maxPlanStringLength", "10000")
        .config("spark.driver.memory", memory or os.environ.get("DDCLI_SPARK_MEMORY", "3g"))
        .config("spark.local.dir", scratch)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", driver_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.hadoop.parquet.filter.dictionary.enabled", "false")
        # layers carry page checksums (storage/integrity.py): a damaged page fails the read
        .config("spark.hadoop.parquet.page.verify-checksum.enabled", "true")
        .config("spark.sql.adaptive.enabled", "false")
        # constraint propagation through the unions of loop frames fails inside Spark's
        # optimizer ("key not found: time_2", a record entered at a priority into a loop
        # nested in another) and costs planning time on long plans; ddcli needs none of it
        .config("spark.sql.constraintPropagation.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    _session = _quietly(builder.getOrCreate, os.path.join(scratch, "jvm.log"))
    _watch_interrupts(_session)
    _session.sparkContext.setLogLevel("ERROR")
    _session.sparkContext.setCheckpointDir(os.path.join(scratch, "checkpoints"))
    return _session


def _quietly(start, log_path: str):
    """Start the JVM with its stderr going to a log file.

    The JVM prints a line about incubator modules that log4j cannot silence; the JVM
    inherits our stderr when it starts, so point it at a file for that moment.
    """
    import sys
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        return start()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cores(spark) -> int:
    """Task slots of the session: N for ``local[N]``, the CPUs for ``local[*]``."""
    import re
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", spark.sparkContext.master)
    if m is None:  # a cluster
        return max(2, spark.sparkContext.defaultParallelism)
    slots = m.group(1)
    if slots is None:
        return 1
    return (os.cpu_count() or 2) if slots == "*" else int(slots)


SINGLE_PARTITION_ROWS = 100_000


def size_partitions(spark, rows: int, *, single_ok: bool = False) -> int:
    """Shuffle partitions for a piece of work of about ``rows`` updates.

    Every task costs a few tens of milliseconds, so small work gets one partition per
    core and big work a few more (bounded memory per Arrow batch). A tiny run of a
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
        n = max(cores(spark), min(64, rows // 2_000_000 + 1))
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    return n


def partitions(spark) -> int:
    return int(spark.conf.get("spark.sql.shuffle.partitions"))


def _python() -> str:
    import sys
    return sys.executable


def stop_spark() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None


# ---------------------------------------------------------------- Ctrl-C

_interrupt = {"seen": False, "deferred": 0}


def _watch_interrupts(session) -> None:
    """Ctrl-C: remember it, cancel Spark's jobs, and raise KeyboardInterrupt — unless a
    commit is under way (:func:`no_interrupts`), which then finishes first.

    PySpark's own handler also cancels and raises, but the interrupted Py4J call often
    surfaces as some other error (a Py4JJavaError of the cancelled job); :func:`interrupted`
    lets the command tell the user's Ctrl-C from a failure whatever the error.
    """
    import logging
    import signal
    import sys
    import threading
    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigint(signum, frame):
        _interrupt["seen"] = True
        if _interrupt["deferred"]:
            return
        # the interrupted Py4J call logs tracebacks and finalizers report theirs: the
        # command says "interrupted" in one line instead
        logging.disable(logging.CRITICAL)
        sys.unraisablehook = lambda unraisable: None
        try:
            session.sparkContext.cancelAllJobs()
        except Exception:  # noqa: BLE001 - the JVM may be gone already; we stop anyway
            pass
        raise KeyboardInterrupt()

    signal.signal(signal.SIGINT, on_sigint)


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
