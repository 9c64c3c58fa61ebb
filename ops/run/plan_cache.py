"""The planned schemas of a pipeline, kept in the store: a run that finds them needs no
Spark to plan, and a small run in the driver (``ops/run/in_driver.py``) no Spark at all.

Planning (``ops/run/run.py: check_pipeline``) evaluates the whole graph on empty frames to
learn every node's columns and types: a few hundred Py4J calls, and a JVM started for
them. What it finds depends only on the nodes (their fingerprints: operators, arguments,
expressions, functions' code), the inputs' schemas, the time dimension, and the engine
that plans: Spark's and pyarrow's versions, the Spark settings of the environment, and
ddcli's own code. A cold command (a cron line) that runs a small change would start
Spark for nothing else. So the first planning of a pipeline writes its schemas to
``STORE/plans/KEY.json``, KEY a hash of all of the above, and a later run with the same
key reads them instead. It is a cache: written once under its key (a put-if-absent, so
it is never half-written), a file that is missing or unreadable is planned again, and a
pipeline that imports modules of the user's is always planned (a module's code is not in
the fingerprints).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from functools import lru_cache

import pyarrow as pa

from ops.spark.user_code import user_code_status
from storage.store import Store

FOLDER = "plans"
_HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds ops/
_PACKAGES = [os.path.join(_HOME, top) for top in ("ddcli", "ops", "storage")]
_VERSION = 1  # of this file's format


def plan_key(d: int, fps: dict[int, str] | None, inputs: dict[str, pa.Schema]) -> str | None:
    """The key of a pipeline's planned schemas, or None when it cannot be kept."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)  # a launcher: no pipeline's code
    if fps is None or any(path is None or not (_own(path) or path == main) for path, _ in user_code_status()):
        return None
    h = hashlib.sha256()
    h.update(json.dumps([_VERSION, d, sorted(fps.items()), _engine()]).encode())
    for name in sorted(inputs):
        h.update(name.encode() + b"\0" + inputs[name].serialize().to_pybytes())
    return h.hexdigest()


def _own(path: str) -> bool:
    """A file of ddcli's own packages."""
    return any(os.path.abspath(path).startswith(folder + os.sep) for folder in _PACKAGES)


def load_plan(store: Store, key: str | None) -> dict[int, pa.Schema] | None:
    """The schemas kept under ``key`` (None: none kept, or not readable)."""
    if key is None:
        return None
    try:
        doc = json.loads(store.blobs.get(_path(store, key)))
        if doc.get("key") != key:
            return None
        return {int(n): pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s))) for n, s in doc["schemas"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, pa.ArrowException):
        return None


def save_plan(store: Store, key: str | None, schemas: dict[int, pa.Schema]) -> None:
    """Keep ``schemas`` under ``key`` (once; a failure to write only leaves it unkept)."""
    if key is None:
        return
    doc = {"key": key, "schemas": {str(n): base64.b64encode(s.serialize().to_pybytes()).decode()
                                   for n, s in schemas.items()}}
    try:
        store.blobs.make_folder(store.blobs.join(store.path, FOLDER))
        store.blobs.put_if_absent(_path(store, key), json.dumps(doc).encode(), point="plan.before_write")
    except OSError:
        pass


def _path(store: Store, key: str) -> str:
    return store.blobs.join(store.path, FOLDER, f"{key}.json")


def _engine() -> list:
    """What planning depends on besides the pipeline: the versions of Spark and pyarrow,
    the Spark settings of the environment, and the files of ddcli's own code."""
    import pyspark

    from storage.settings import SETTINGS

    ours = {s.env for s in SETTINGS if s.key.startswith(("spark", "shuffle"))}
    spark_env = sorted((k, v) for k, v in os.environ.items()
                       if k in ours or k.startswith(("SPARK_", "PYSPARK_", "JAVA_HOME", "TZ")))
    return [pyspark.__version__, pa.__version__, spark_env, _code()]


@lru_cache(maxsize=1)
def _code() -> list:
    """Each file of ddcli's engine, by size and time written (read once a process: a
    process whose code changes under it is a new one, ``ops/spark/user_code.py``)."""
    root = _HOME
    out = []
    for top in ("ops", "storage"):
        for folder, _, names in sorted(os.walk(os.path.join(root, top))):
            for n in sorted(names):
                if n.endswith(".py"):
                    st = os.stat(os.path.join(folder, n))
                    out.append([os.path.relpath(os.path.join(folder, n), root), st.st_size, st.st_mtime_ns])
    return out
