"""Which warm engine a command may use: the service's folder, its settings, and its key.

A service keeps a Spark session whose JVM and Python workers were started with one set of
settings and one version of every part: ddcli's own code, pyspark, Python, the Java
runtime, the Spark master and memory, the executors' Python, the search path the workers
import from. Any of these that differs would make a command run on another engine than
the one its own process would start, so none is ever reused silently: the service is
named by a hash of all of them (:func:`service_key`), and a client only ever talks to the
service of its own key. ddcli's code is identified by the content of its source files, so
an edited checkout gets a new service, never a stale one.

Nothing here imports more than the standard library: the client computes the key before
it decides to run a command at all, and a command that goes to the service pays only this.
"""

from __future__ import annotations

import hashlib
import os
import sys

# the commands the service runs: those that start Spark (benchmarks measure cold and warm
# starts themselves, so they run in their own process)
SERVICE_COMMANDS = ("run", "verify")
# a command a service already running takes, but starts none for: it starts no Spark, and
# when small it costs less there than a new process's imports (a refresh's few thousand
# rows: a third of a second against a second); local update files of at most this many
# bytes in all, never a command that must die where it is (a fault point, DDCLI_FAULT)
JOINING_COMMANDS = ("ingest",)
JOINING_BYTES = 64 << 20

# environment variables fixed when a service's JVM and Python workers start: part of its
# key, and the only ones (with the basics below) the service's own process starts with
JVM_START_SETTINGS = (
    "DDCLI_SPARK_MEMORY", "DDCLI_SPARK_CONF", "DDCLI_SPARK_EXECUTOR_PYTHON", "DDCLI_SPARK_DRIVER_HOST", "DDCLI_SPARK_BIND_ADDRESS",
    "DDCLI_SPARK_CDS", "DDCLI_CACHE_DIR", "XDG_CACHE_HOME", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUTF8",
    "TMPDIR", "TZ", "LANG", "LC_ALL", "LC_CTYPE",
)
JVM_START_PREFIXES = ("SPARK_", "PYSPARK_", "JAVA_", "_JAVA_", "JDK_", "HADOOP_")
BASICS = ("PATH", "HOME", "USER", "LOGNAME")  # what a JVM needs to start; not in the key

# variables a command's Spark tasks are not given: they change from shell to shell or from
# folder to folder, or only the command's own process reads them; tasks get every other
# variable of the command's environment (a new set of variables starts new Python workers)
NOT_FOR_TASKS = frozenset({
    "_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES",
    "DDCLI_STORE", "DDCLI_STRICT_NOOP", "DDCLI_DEBUG", "DDCLI_PROGRESS", "DDCLI_NO_PROGRESS",
    "DDCLI_SERVICE", "DDCLI_SERVICE_IDLE", "DDCLI_SERVICE_DIR", "DDCLI_SERVICE_GRACE",
})

DEFAULT_IDLE_SECONDS = 300.0
_OFF = ("0", "false", "no", "off")


def enabled(env=os.environ) -> bool:
    """``DDCLI_SERVICE=0`` (or false/no/off) turns the warm engine off."""
    return env.get("DDCLI_SERVICE", "1").strip().lower() not in _OFF


def idle_seconds(env=os.environ) -> float:
    """How long a service waits for its next command before it stops (``DDCLI_SERVICE_IDLE``)."""
    raw = env.get("DDCLI_SERVICE_IDLE", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_IDLE_SECONDS
    except ValueError:
        return DEFAULT_IDLE_SECONDS
    return value if value > 0 else DEFAULT_IDLE_SECONDS


def service_dir(env=os.environ) -> str:
    """The user's folder of services (sockets, locks, logs): ``DDCLI_SERVICE_DIR``, else
    ``service/`` in ddcli's cache folder (``DDCLI_CACHE_DIR``, else ``$XDG_CACHE_HOME/ddcli``,
    else ``~/.cache/ddcli``)."""
    explicit = env.get("DDCLI_SERVICE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    cache = env.get("DDCLI_CACHE_DIR") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ddcli")
    return os.path.join(os.path.abspath(cache), "service")


# ddcli's own options that take a value, before the command (ddcli/root.py): ``ddcli
# --store PATH run p.py`` names the command ``run``, not ``PATH``
ROOT_VALUE_OPTIONS = ("--config", "--store")


def root_options(argv: list[str]) -> tuple[dict[str, str], str | None]:
    """ddcli's own options given a value before the command (``--config`` -> its path), and
    the command (None: none)."""
    given: dict[str, str] = {}
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name in ROOT_VALUE_OPTIONS:
            if not eq:
                value, i = (argv[i + 1] if i + 1 < len(argv) else ""), i + 1
            given[name] = value
        elif not argv[i].startswith("-"):
            return given, argv[i]
        i += 1
    return given, None


def joins_running(argv: list[str], env=os.environ) -> bool:
    """Whether ``argv`` is a small command a running service may take (:data:`JOINING_COMMANDS`):
    every file it names local, :data:`JOINING_BYTES` in all."""
    given, command = root_options(argv)
    if command not in JOINING_COMMANDS or "--help" in argv or "-h" in argv or env.get("DDCLI_FAULT"):
        return False
    args = argv[argv.index(command) + 1:]
    if any("://" in a or a == "-" for a in args):  # an object store's files, or stdin
        return False
    files = [a for a in args if not a.startswith("-") and os.path.isfile(a)]
    return bool(files) and sum(os.path.getsize(f) for f in files) <= JOINING_BYTES


def command_of(argv: list[str]) -> str | None:
    """The command ``argv`` names when the service runs it (not for ``--help``), else None."""
    command = root_options(argv)[1]
    if command not in SERVICE_COMMANDS or "--help" in argv or "-h" in argv:
        return None
    return command


def master_of(argv: list[str], env=os.environ) -> str:
    """The Spark master a command asks for: ``--master URL``, else ``DDCLI_SPARK_MASTER``,
    else ``local[*]`` (as ops/spark/session.py resolves it)."""
    found = None
    for i, a in enumerate(argv):
        if a == "--master" and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith("--master="):
            found = a.partition("=")[2]
    return found or env.get("DDCLI_SPARK_MASTER") or "local[*]"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def code_root() -> str:
    """The folder that holds ddcli's packages (``ddcli``, ``ops``, ``storage``)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


CODE_CACHE = "code-"  # a file of the service folder: a version of ddcli's code, named by its files' status
CACHE_KEEP_SECONDS = 86400.0  # other versions' files are removed once this old


def _source_files() -> list[tuple[str, str]]:
    """(path relative to the code root, path) of every source file of ddcli's three packages."""
    root, out = code_root(), []
    for package in ("ddcli", "ops", "storage"):
        for folder, subfolders, files in os.walk(os.path.join(root, package)):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    out.append((os.path.relpath(path, root), path))
    return out


def _content_hash(files: list[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for rel, path in files:
        with open(path, "rb") as fh:
            h.update(f"{rel}\0".encode())
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def code_identity(cache: str | None = None) -> str:
    """A hash of every source file of ddcli's three packages (reading them takes some 5 ms).

    With ``cache`` (the user's private folder of services) the hash is kept in a file named
    by the files' status (size, modification and change time, inode): a command finds it
    after a ``stat`` of each file, about 1 ms. Any change to a file names another file, its
    change time included, which no edit can set back."""
    files = _source_files()
    if cache is None:
        return _content_hash(files)
    status = hashlib.sha256()
    for rel, path in files:
        st = os.stat(path)
        status.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0".encode())
    name = CODE_CACHE + status.hexdigest()[:32]
    path = os.path.join(cache, name)
    try:
        with open(path, encoding="ascii") as fh:
            known = fh.read()
        if len(known) == 64:
            return known
    except (OSError, UnicodeDecodeError):
        pass
    digest = _content_hash(files)
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(digest)
        os.replace(tmp, path)
        _forget_old_versions(cache, name)
    except OSError:
        pass  # the hash stands; the next command reads the files again
    return digest


def _forget_old_versions(cache: str, keep: str) -> None:
    """Remove the files of other versions of the code unused for a day (another checkout's
    commands write theirs again)."""
    import time
    for name in os.listdir(cache):
        if name.startswith(CODE_CACHE) and name != keep:
            try:
                if time.time() - os.stat(os.path.join(cache, name)).st_mtime > CACHE_KEEP_SECONDS:
                    os.remove(os.path.join(cache, name))
            except OSError:
                pass


def pyspark_identity() -> str:
    """Where pyspark is installed and its version file (without importing pyspark)."""
    import importlib.util
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        return "no pyspark"
    folder = os.path.dirname(spec.origin)
    try:
        with open(os.path.join(folder, "version.py"), "rb") as fh:
            version = hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        version = "?"
    return f"{folder}:{version}"


def java_identity(env=os.environ) -> str:
    """The Java runtime a new JVM would run: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH
    (the PATH itself is not part of the key: wrappers put on it change no engine)."""
    home = env.get("JAVA_HOME")
    exe = os.path.join(home, "bin", "java") if home else _on_path("java", env.get("PATH")) or "java"
    return os.path.realpath(exe)


def _on_path(name: str, path: str | None) -> str | None:
    """``shutil.which(name, path=path)`` for a plain name (importing shutil costs a client 3 ms)."""
    for folder in (os.defpath if path is None else path).split(os.pathsep):
        candidate = os.path.join(folder or os.curdir, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fixed_at_start(name: str) -> bool:
    """Is the environment variable ``name`` read when a JVM and its Python workers start?"""
    return name in JVM_START_SETTINGS or name.startswith(JVM_START_PREFIXES)


def key_parts(master: str, env=os.environ, cache: str | None = None) -> dict[str, str]:
    """Everything a service's key is made of (``cache``: see :func:`code_identity`)."""
    parts = {"ddcli": code_identity(cache), "code_root": code_root(), "pyspark": pyspark_identity(),
             "python": f"{sys.executable} {sys.version}", "java": java_identity(env), "master": master,
             "umask": oct(current_umask())}
    for name in sorted(set(JVM_START_SETTINGS) | {n for n in env if fixed_at_start(n)}):
        parts[f"env:{name}"] = env.get(name, "")
    return parts


def service_key(master: str, env=os.environ, cache: str | None = None) -> str:
    """The name of the service a command with these settings may use."""
    parts = key_parts(master, env, cache)
    text = "\n".join(f"{k}={v}" for k, v in sorted(parts.items()))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:20]


def task_environment(env) -> dict[str, str]:
    """The variables a command's Spark tasks see, on top of the service's own few: the
    command's environment, but for :data:`NOT_FOR_TASKS`."""
    return {k: v for k, v in env.items() if k not in NOT_FOR_TASKS}


def service_environment(env) -> dict[str, str]:
    """The environment a service starts with: the settings of its key and the basics a JVM
    needs, nothing else, so no command's tasks inherit another command's variables (each
    command's tasks get theirs, :func:`task_environment`); with ddcli's code first on the
    search path, so the service imports the code the client hashed."""
    out = {k: v for k, v in env.items() if k in BASICS or fixed_at_start(k)}
    root = code_root()
    out["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return out
