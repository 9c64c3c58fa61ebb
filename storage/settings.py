"""Every setting of ddcli in one registry: its key in ``ddcli.toml``, its environment
variable, its type, its default and what it does.

The code reads its settings from the environment, where the command line puts the values
of the configuration file for the variables the environment does not set (ddcli/config.py):
so a value of ``ddcli.toml`` reaches every place that reads one — the commands, the
library, Spark's driver and the Python workers (which inherit the driver's environment; on
a cluster the session hands the ``executors`` settings on as ``spark.executorEnv.*``).
Precedence: a command-line option, then the environment, then the file, then the default.

Adding a setting is one :class:`Setting` in :data:`SETTINGS`; the code that uses it reads
``os.environ[setting.env]`` (or its default), and ``ddcli config`` lists it.

Not settings (left out on purpose): ``DDCLI_FAULT`` and ``DDCLI_TEST_NOW`` (hooks of the
tests: storage/faults.py, storage/clock.py) and ``DDCLI_CONFIG`` (which file to read).
"""

from __future__ import annotations

import os
import re
from typing import Callable, NamedTuple

from storage.errors import StoreError

CONFIG_ENV = "DDCLI_CONFIG"
CONFIG_FILE = "ddcli.toml"
MAX_CONFIG_BYTES = 1 << 20  # a file of settings is a few hundred bytes


class SettingError(StoreError):
    """A configuration file, or a setting's value, that ddcli cannot use (exit 2)."""


# ---------------------------------------------------------------- kinds of values
# Each kind checks a value written as text and returns its canonical text (what the code
# that reads the variable understands), or raises ValueError saying what it expects.

_SIZE_RE = re.compile(r"(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?")
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _text(raw: str) -> str:
    if "\n" in raw or "\0" in raw:
        raise ValueError("must be one line of text")
    return raw


def _size(raw: str) -> str:
    """Bytes, as ``16m``, ``2g``, ``1.5g``, ``65536``: canonical as the largest exact unit."""
    m = _SIZE_RE.fullmatch(raw.strip().lower())
    n = int(float(m.group(1)) * _SIZE_UNITS[m.group(2)]) if m else 0
    if n < 1:
        raise ValueError("is not a size such as 512m or 2g")
    for unit in "gmk":
        if n % _SIZE_UNITS[unit] == 0:
            return f"{n // _SIZE_UNITS[unit]}{unit}"
    return str(n)


def _size_or_off(raw: str) -> str:
    """A size (:func:`_size`), or 0 for none."""
    return "0" if raw.strip() == "0" else _size(raw)


def _jvm_size(raw: str) -> str:
    """A JVM heap size: a whole number and a unit, k, m, g or t (``3g``, ``512m``)."""
    v = raw.strip().lower()
    if not re.fullmatch(r"[1-9]\d*[kmgt]", v):
        raise ValueError("is not a JVM memory size such as 3g or 512m")
    return v


def _count(least: int) -> Callable[[str], str]:
    def check(raw: str) -> str:
        v = raw.strip()
        if not re.fullmatch(r"\d+", v) or int(v) < least:
            raise ValueError("is not a whole number" + (" of at least 1" if least else ""))
        return str(int(v))
    return check


def _seconds(raw: str) -> str:
    try:
        v = float(raw.strip())
    except ValueError:
        raise ValueError("is not a number of seconds") from None
    if not v > 0 or v != v or v == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return raw.strip()


def _spark_conf(raw: str) -> str:
    """Spark settings as ``spark.name=value`` pairs separated by ``;`` (a value may hold
    spaces, as Java options do): canonical without the spaces around each pair."""
    pairs = [p.strip() for p in raw.split(";") if p.strip()]
    for p in pairs:
        name, eq, _ = p.partition("=")
        if not eq or not re.fullmatch(r"spark\.[A-Za-z0-9_.\-]+", name.strip()):
            raise ValueError(f"is not spark.NAME=VALUE pairs separated by ; (at {p!r})")
    return ";".join(f"{n.strip()}={v.strip()}" for n, _, v in (p.partition("=") for p in pairs))


def _flag(raw: str) -> str:
    v = raw.strip().lower()
    if v in _TRUE:
        return "1"
    if v in _FALSE:
        return "0"
    raise ValueError("is not true or false")


def _choice(*values: str) -> Callable[[str], str]:
    def check(raw: str) -> str:
        v = raw.strip().lower()
        if v not in values:
            raise ValueError(f"is not one of {', '.join(values)}")
        return v
    return check


class Setting(NamedTuple):
    """One setting. ``default`` is text as the environment would hold it; None when the
    code computes it (``help`` says how). ``path``: relative values in a configuration file
    are taken from the file's folder. ``executors``: read inside Spark tasks too. (A named
    tuple: every ``ddcli`` process reads the settings first, and importing ``dataclasses``
    costs a warm engine's client some 9 ms of its start.)"""

    key: str
    env: str
    check: Callable[[str], str]
    default: str | None
    help: str
    path: bool = False
    executors: bool = False


_POSITIVE, _NON_NEGATIVE = _count(1), _count(0)

SETTINGS: list[Setting] = [
    # the store and the commands
    Setting("store", "DDCLI_STORE", _text, "./ddstore", "the store: a folder or s3://bucket/prefix", path=True),
    Setting("strict_noop", "DDCLI_STRICT_NOOP", _flag, "0", "exit 4 (not 0) when a command has nothing to do"),
    Setting("debug", "DDCLI_DEBUG", _flag, "0", "an internal error prints its traceback"),
    Setting("progress", "DDCLI_PROGRESS", _flag, "0",
            "progress lines on stderr also with --json and other formats for programs"),
    Setting("no_progress", "DDCLI_NO_PROGRESS", _flag, "0", "no progress display nor progress lines"),
    Setting("lineage_timeout", "DDCLI_LINEAGE_TIMEOUT", _seconds, "2",
            "seconds a run may wait in all for its OpenLineage events (with OPENLINEAGE_URL set)"),
    # reading update files
    Setting("ingest_memory", "DDCLI_INGEST_MEMORY", _size, "1g", "memory the updates of one ingest may take"),
    Setting("max_line_bytes", "DDCLI_MAX_LINE_BYTES", _size, "16m",
            "the longest line or text value an update file may hold"),
    # the store's files
    Setting("log_retention", "DDCLI_LOG_RETENTION", _seconds, "3600",
            "seconds old metadata versions are kept before a checkpoint lets them go"),
    Setting("run_history", "DDCLI_RUN_HISTORY", _NON_NEGATIVE, "30",
            "runs whose figures each pipeline keeps in the store (ddcli runs, ddcli report)"),
    Setting("lease_seconds", "DDCLI_LEASE_SECONDS", _seconds, "60",
            "seconds a run's lease on its pipeline lasts without being renewed"),
    Setting("s3_timeout", "DDCLI_S3_TIMEOUT", _seconds, "5", "seconds an S3 request may take", executors=True),
    Setting("merge_rows", "DDCLI_MERGE_ROWS", _POSITIVE, str(1 << 22),
            "rows a merge of layers holds at once: a larger merge goes one range of keys at a time"),
    Setting("delta", "DDCLI_DELTA", _flag, "1",
            "write each trace's Delta Lake log beside its layers, so other engines read it"),
    Setting("tables", "DDCLI_TABLES", _flag, "1",
            "write each pipeline output's current state as a Delta table under STORE/tables/"),
    Setting("iceberg_outputs", "DDCLI_ICEBERG_OUTPUTS", _text, None,
            "outputs published to Iceberg after each change: OUTPUT=CATALOG_URI#NS.TABLE, separated by ';'"),
    Setting("delta_retention", "DDCLI_DELTA_RETENTION", _seconds, None,
            "seconds compact keeps the layer files a Delta version names (default: the grace period)"),
    # Spark
    Setting("spark_master", "DDCLI_SPARK_MASTER", _text, "local[*]",
            "Spark master URL (run --master): local[*] or spark://HOST:PORT"),
    Setting("spark_memory", "DDCLI_SPARK_MEMORY", _jvm_size, "3g", "the Spark driver's heap"),
    Setting("shuffle_partitions", "DDCLI_SHUFFLE_PARTITIONS", _POSITIVE, None,
            "Spark shuffle partitions (default: sized from each run's new updates)"),
    Setting("spark_connect_timeout", "DDCLI_SPARK_CONNECT_TIMEOUT", _seconds, "120",
            "seconds a cluster's master and executors have to answer"),
    Setting("spark_driver_host", "DDCLI_SPARK_DRIVER_HOST", _text, None,
            "the address the driver advertises to a cluster (default: this host's on the route to the master)"),
    Setting("spark_bind_address", "DDCLI_SPARK_BIND_ADDRESS", _text, None,
            "the address the driver binds (default: the driver host)"),
    Setting("spark_executor_python", "DDCLI_SPARK_EXECUTOR_PYTHON", _text, None,
            "the Python a cluster's executors run (default: PYSPARK_PYTHON, else python3)"),
    Setting("spark_ship_code", "DDCLI_SPARK_SHIP_CODE", _flag, "1", "ship ddcli's code to a cluster's executors"),
    Setting("spark_conf", "DDCLI_SPARK_CONF", _spark_conf, "",
            "more Spark settings, spark.NAME=VALUE;spark.NAME=VALUE (these win over ddcli's own)"),
    Setting("spark_cds", "DDCLI_SPARK_CDS", _flag, "1", "keep a class-data archive for faster Spark starts"),
    Setting("service", "DDCLI_SERVICE", _flag, "1",
            "run and verify go to the warm engine, a per-user service keeping Spark running (0: in their own process)"),
    Setting("service_idle", "DDCLI_SERVICE_IDLE", _seconds, "300",
            "seconds the warm engine waits for its next command before it stops"),
    Setting("service_grace", "DDCLI_SERVICE_GRACE", _seconds, "30",
            "seconds the warm engine may take to stop a command after Ctrl-C before the client kills it"),
    Setting("service_dir", "DDCLI_SERVICE_DIR", _text, None,
            "the folder of the warm engines (default: service/ in the cache folder)", path=True),
    Setting("cache_dir", "DDCLI_CACHE_DIR", _text, None,
            "where the class-data archive lives (default: $XDG_CACHE_HOME/ddcli or ~/.cache/ddcli)", path=True),
    # reduce and loops
    Setting("reduce_memory", "DDCLI_REDUCE_MEMORY", _size, "1g",
            "memory a reduce task may use for one key's grid of times", executors=True),
    Setting("reduce_task_rows", "DDCLI_REDUCE_TASK_ROWS", _POSITIVE, str(1 << 20),
            "rows a reduce or join task brings into Arrow at once"),
    Setting("held_memory", "DDCLI_HELD_MEMORY", _size_or_off, "0",
            "decoded layers the warm engine keeps to read by key without DuckDB (0: none)"),
    Setting("driver_rows", "DDCLI_DRIVER_ROWS", _NON_NEGATIVE, "100000",
            "new updates up to which a run is evaluated in the driver, without Spark jobs (0: never)"),
    Setting("reduce_split_rows", "DDCLI_REDUCE_SPLIT_ROWS", _NON_NEGATIVE, str(1 << 20),
            "new updates from which a reduce splits hot keys among tasks (0: always)"),
    Setting("loop_path", "DDCLI_LOOP_PATH", _choice("auto", "round", "local", "resident"), "auto",
            "how loops run: auto, round (by round), local (inside tasks) or resident"),
    Setting("loop_tasks", "DDCLI_LOOP_TASKS", _POSITIVE, "16", "the most tasks a resident loop runs in"),
    Setting("loop_task_rows", "DDCLI_LOOP_TASK_ROWS", _POSITIVE, str(1 << 24),
            "rows a loop's task may hold after a round", executors=True),
    Setting("loop_exchange_timeout", "DDCLI_LOOP_EXCHANGE_TIMEOUT", _seconds, "3600",
            "seconds a resident loop's task waits for the others at an exchange", executors=True),
]

BY_KEY = {s.key: s for s in SETTINGS}
BY_ENV = {s.env: s for s in SETTINGS}


def checked(s: Setting, raw: str) -> str:
    """``raw`` as the canonical text of setting ``s``; ValueError says what it expects."""
    return s.check(str(raw))


# The TOML types a kind takes besides a string (a string is read as the environment
# variable's text would be): a boolean is a flag only, not the number 1; an integer is not
# a flag; a float is a number of seconds, never a whole number.
_TOML_TYPES: dict[Callable[[str], str], tuple[type, ...]] = {
    _flag: (bool,), _size: (int,), _size_or_off: (int,), _seconds: (int, float), _POSITIVE: (int,), _NON_NEGATIVE: (int,)}
_TOML_NAMES = {bool: "boolean", int: "integer", float: "float", list: "array", dict: "table"}


def from_toml(s: Setting, value: object, folder: str) -> str:
    """A value of the configuration file (in ``folder``) as setting ``s``'s canonical text."""
    if isinstance(value, str):
        text = value
    elif type(value) in _TOML_TYPES.get(s.check, ()):  # type(), not isinstance: True is an int
        text = ("1" if value else "0") if isinstance(value, bool) else str(value)
    else:
        kind = _TOML_NAMES.get(type(value), type(value).__name__)
        raise ValueError(f"is a TOML {kind}; write it as {_example(s)}")
    text = s.check(text)
    if s.path and text and "://" not in text:
        text = os.path.normpath(os.path.join(folder, os.path.expanduser(text)))
    return text


def _example(s: Setting) -> str:
    return {_flag: "true or false", _size: "a size such as \"2g\"", _seconds: "a number of seconds",
            _size_or_off: "a size such as \"2g\", or 0", _jvm_size: "a JVM memory size such as \"3g\"", _POSITIVE: "a whole number",
            _NON_NEGATIVE: "a whole number"}.get(s.check, "a string")


def config_path(explicit: str | None, environ=os.environ) -> str | None:
    """The configuration file to read: ``--config PATH``, else ``$DDCLI_CONFIG``, else
    ``ddcli.toml`` in the working folder if there is one (None: no file)."""
    named = explicit or environ.get(CONFIG_ENV)
    if named:
        if not os.path.isfile(named):
            how = "--config" if explicit else CONFIG_ENV
            raise SettingError(f"configuration file {named} ({how}) does not exist or is not a file")
        return named
    return CONFIG_FILE if os.path.isfile(CONFIG_FILE) else None


def read_config(path: str) -> dict[str, str]:
    """Every setting ``path`` holds (environment variable -> canonical text), each key and
    value checked: an unknown key, a value of the wrong kind or a file that is not TOML is
    one :class:`SettingError` naming the file, the key and the value."""
    import tomllib
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)  # bounded: a huge file is refused unread
    except OSError as e:
        raise SettingError(f"configuration file {path}: cannot read it: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise SettingError(f"configuration file {path}: larger than {MAX_CONFIG_BYTES >> 20} MiB, too large for "
                           f"a file of settings")
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SettingError(f"configuration file {path}: not valid TOML: not UTF-8 text at byte {e.start}") from None
    except tomllib.TOMLDecodeError as e:
        raise SettingError(f"configuration file {path}: not valid TOML: {e}") from None
    folder = os.path.dirname(os.path.abspath(path))
    out = {}
    for key, value in table.items():
        s = BY_KEY.get(key)
        if s is None:
            import difflib
            near = difflib.get_close_matches(key, list(BY_KEY), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise SettingError(f"configuration file {path}: unknown key {key!r} ({hint}`ddcli config` lists "
                               f"the keys)")
        try:
            out[s.env] = from_toml(s, value, folder)
        except ValueError as e:
            raise SettingError(f"configuration file {path}: {key} = {_show(value)} {e}") from None
    return out


def _show(value: object) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (int, float)) else f"<a TOML {type(value).__name__}>"


def check_environment(environ=os.environ) -> dict[str, str]:
    """The settings the environment sets, as canonical text; a bad value is one
    :class:`SettingError` naming the variable and its value."""
    out = {}
    for s in SETTINGS:
        raw = environ.get(s.env)
        if raw is None or not raw.strip():  # set empty: as if unset, as the code reads it
            continue
        try:
            out[s.env] = s.check(raw)
        except ValueError as e:
            raise SettingError(f"environment variable {s.env}={raw!r} {e}") from None
    return out
