"""A class-data archive of the classes Spark's driver loads: faster starts of every command.

Why: a Spark session spends most of its start loading, parsing and verifying some ten
thousand classes. Java can instead map them from an archive written when an earlier JVM
exited (dynamic class-data sharing, ``-XX:ArchiveClassesAtExit`` / ``-XX:SharedArchiveFile``,
Java 13 and later). Measured here (2 cores, load 8): session start 31 s -> 17 s, first job
result 45 s -> 26 s.

How: the archive lives in the user's cache (``$DDCLI_CACHE_DIR``, else
``$XDG_CACHE_HOME/ddcli``, else ``~/.cache/ddcli``), named by what it depends on (the Java
runtime and the pyspark installation). When it is missing, the command's JVM writes one to
a file of its own when it exits, and :func:`finish` renames it into place only after that
JVM exited cleanly; concurrent first runs each write their own, any of them is complete,
and each install removes the others. A damaged or foreign archive is refused by the JVM, which then
loads classes as usual: the archive can make a start faster, never a run wrong. The JVM's
own messages about it go to its log file, not to ddcli's output. ``DDCLI_SPARK_CDS=0``
turns it off. Local mode only: on a cluster this is the driver's affair alone, and the
driver is where it applies.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import time

# an archive a JVM wrote at its exit but nobody moved into place (its Python was killed
# first) is removed once no JVM can still be writing it: a dump takes seconds
STALE_SECONDS = 600
# an archive of another Java runtime or pyspark is removed when a new one is installed,
# once it is this old (two installations in use side by side keep theirs meanwhile)
SUPERSEDED_DAYS = 30


def enabled() -> bool:
    return os.environ.get("DDCLI_SPARK_CDS", "1") not in ("0", "", "false", "no")


def cache_dir() -> str:
    explicit = os.environ.get("DDCLI_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ddcli")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = os.path.join(home, "bin", "java") if home else shutil.which("java") or "java"
    return os.path.realpath(exe)


def archive_stem() -> str:
    """Where the archive for this Java runtime and this pyspark lives, without its size:
    a new version of either gets a new file (the JVM would refuse the old one anyway, but
    silently and every time)."""
    import pyspark
    java = _java()
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    stamp = f"{java}|{os.path.getmtime(java) if os.path.exists(java) else 0}|{pyspark.__version__}|{jars}"
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"spark-driver-{pyspark.__version__}-{digest}")


def installed_archive(stem: str) -> str | None:
    """The complete archive of ``stem``: its name carries its size, so a file cut short
    (the JVM crashes mapping one) is never used."""
    for path in glob.glob(glob.escape(stem) + "-*.jsa"):
        try:
            if os.path.getsize(path) == int(path[len(stem) + 1:-len(".jsa")]) > 0:
                return path
        except (OSError, ValueError):
            continue
    return None


class Plan:
    """What this process's JVM does with the archive: map ``path`` (an installed archive),
    or write a new one to ``pending`` at its exit, for :func:`finish` to install under the
    stem ``path``."""

    def __init__(self, options: str, path: str | None = None, pending: str | None = None):
        self.options, self.path, self.pending = options, path, pending


# the JVM's unified logging (CDS warnings among it) defaults to stdout: send it to stderr,
# which for the driver JVM is its log file (ops/spark/session.py starts it that way)
_LOGGING = "-Xlog:disable -Xlog:all=warning:stderr"


def plan() -> Plan:
    """The driver's Java options for the archive (empty when off or when the cache cannot
    be written)."""
    if not enabled():
        return Plan("")
    stem = archive_stem()
    _remove_stale(os.path.dirname(stem))
    final = installed_archive(stem)
    if final:
        # should the JVM crash mapping it, its report goes to its log and the cache, not
        # to ddcli's output or the working directory (ops/spark/session.py then starts without)
        crash = f"-XX:ErrorFile={os.path.join(os.path.dirname(stem), 'hs_err_%p.log')}"
        return Plan(f"{_LOGGING} {crash} -XX:SharedArchiveFile={final}", final)
    try:
        os.makedirs(os.path.dirname(stem), exist_ok=True)
        pending = f"{stem}.{os.getpid()}.{time.time_ns()}.tmp"
        with open(pending, "wb"):  # the cache is writable: a first run may archive
            pass
        os.remove(pending)
    except OSError:
        return Plan("")
    return Plan(f"{_LOGGING} -XX:ArchiveClassesAtExit={pending}", stem, pending)


def _remove_stale(folder: str) -> None:
    """Unfinished archives no JVM is writing any more, and crash reports older than a week."""
    old = [(p, STALE_SECONDS) for p in glob.glob(os.path.join(folder, "spark-driver-*.tmp"))]
    old += [(p, 7 * 24 * 3600) for p in glob.glob(os.path.join(folder, "hs_err_*.log"))]
    for path, age in old:
        try:
            if time.time() - os.path.getmtime(path) > age:
                os.remove(path)
        except OSError:
            pass


def _remove_superseded(final: str, stem: str) -> None:
    """After installing ``final``: the other archives of its stem (concurrent first runs
    each install one, under their own sizes), and archives of other stems (an older Java or
    pyspark) not written for ``SUPERSEDED_DAYS``; each is some 180 MB. A command still
    mapping one keeps its mapping (removing a file does not unmap it)."""
    folder = os.path.dirname(stem)
    for path in glob.glob(os.path.join(folder, "spark-driver-*.jsa")):
        if path == final:
            continue
        try:
            same_stem = path.startswith(stem + "-")
            if same_stem or time.time() - os.path.getmtime(path) > SUPERSEDED_DAYS * 24 * 3600:
                os.remove(path)
        except OSError:
            pass


def finish(plan_: Plan, jvm_process, timeout: float = 120.0) -> bool:
    """After the session stopped: let the JVM exit (it writes the archive as it does) and
    move a complete archive into place. Returns whether an archive was installed."""
    if not plan_.pending or jvm_process is None:
        return False
    try:
        if jvm_process.stdin:
            jvm_process.stdin.close()  # the gateway exits when its stdin closes
        code = jvm_process.wait(timeout=timeout)
    except Exception:  # noqa: BLE001 - a JVM that does not exit in time keeps no archive
        code = None
    installed = False
    try:
        size = os.path.getsize(plan_.pending) if code == 0 and os.path.isfile(plan_.pending) else 0
        if size:
            final = f"{plan_.path}-{size}.jsa"
            os.replace(plan_.pending, final)
            installed = True
            _remove_superseded(final, plan_.path)
    except OSError:
        pass
    if not installed and os.path.exists(plan_.pending):
        try:
            os.remove(plan_.pending)
        except OSError:
            pass
    return installed


def discard(plan_: Plan) -> None:
    """Forget an archive the JVM could not start with (it crashed mapping it): the next
    start writes a new one."""
    if plan_.path and not plan_.pending:
        try:
            os.remove(plan_.path)
        except OSError:
            pass
