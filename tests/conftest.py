"""Fixtures shared by every test module. Keep this file light.

Nothing here imports pyspark: the store and CLI tests must run without starting Spark.
The Spark fixtures live in ``tests/helpers/spark_fixtures.py`` (loaded as a plugin below) and
import pyspark inside their bodies, so only the tests that ask for them pay for them.
"""

from __future__ import annotations

import hashlib
import os
import sys

import pytest

# make `tests.<module>` importable (tests/ is not a package; pytest puts tests/ itself on sys.path)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

pytest_plugins = ["tests.helpers.spark_fixtures"]

from tests.helpers.operations import SPARK_CONF  # noqa: E402
from tests.helpers.s3 import moto_endpoint, s3_env, store_location  # noqa: E402,F401 - fixtures

# the Spark session of this process (tests/helpers/spark_fixtures.py) as the commands' own
os.environ.setdefault("DDCLI_SPARK_CONF", SPARK_CONF)

# Variables that change what a command does; a test sets the ones it means to.
_DDCLI_ENV = ("DDCLI_STORE", "DDCLI_STRICT_NOOP", "DDCLI_DEBUG", "DDCLI_FAULT", "DDCLI_NO_PROGRESS",
              "DDCLI_MAX_LINE_BYTES", "DDCLI_INGEST_MEMORY")


@pytest.fixture(scope="session", autouse=True)
def ddcli_services():
    """The folder of the warm engines this test session's ``ddcli run`` processes start
    (``DDCLI_SERVICE_DIR``; each xdist worker has its own, so no worker stops a service
    another is using), never the developer's own; every service in it is stopped at the
    end. Short, under /tmp: a socket's path must fit in 100 bytes."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="ddsvc-", dir="/tmp" if os.path.isdir("/tmp") else None)
    saved = os.environ.get("DDCLI_SERVICE_DIR")
    os.environ["DDCLI_SERVICE_DIR"] = folder
    try:
        yield folder
    finally:
        from ddcli.service.client import stop
        from ddcli.service.folder import keys
        for key in keys(folder):
            stop(folder, key)
        if saved is None:
            os.environ.pop("DDCLI_SERVICE_DIR", None)
        else:
            os.environ["DDCLI_SERVICE_DIR"] = saved
        shutil.rmtree(folder, ignore_errors=True)


# The current-state table of an output (storage/lake/current.py) costs its first commit
# about half a second to create: the tests of tests/lake/ and the README's guide (which
# reads one) run with those tables on, the product's default; every other test runs with
# them off, which keeps the suite's time.
_TABLES_TESTED_IN = (os.path.join(_ROOT, "tests", "lake") + os.sep, os.path.join(_ROOT, "tests", "runs", "test_guide.py"))


@pytest.fixture(autouse=True)
def _clean_ddcli_env(monkeypatch, request):
    for name in _DDCLI_ENV:
        monkeypatch.delenv(name, raising=False)
    if not str(request.node.fspath).startswith(_TABLES_TESTED_IN):
        monkeypatch.setenv("DDCLI_TABLES", "off")


@pytest.fixture
def store_dir(tmp_path) -> str:
    """The path of a store that does not exist yet (the first write creates it)."""
    return str(tmp_path / "store")


@pytest.fixture
def store(store_dir):
    """A :class:`storage.store.Store` on :func:`store_dir`."""
    from storage.store import Store
    return Store(store_dir)


def tree_digest(path: str) -> dict[str, str] | None:
    """Every file and directory under ``path`` (relative name -> sha256 of its bytes);
    None if ``path`` does not exist. Equal digests mean the tree was left byte-identical.
    An ``s3://`` prefix is digested object by object (directories do not exist there)."""
    if path.startswith("s3://"):
        from tests.helpers.s3 import object_digest
        return object_digest(path)
    if not os.path.exists(path):
        return None
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path) + "/"] = "dir"
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture
def digest():
    """:func:`tree_digest`, as a fixture."""
    return tree_digest
