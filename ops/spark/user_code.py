"""A long-lived process runs each command, or each Spark task, on the user's current code.

The warm engine's service (ddcli/service/) runs many commands in one process, and a local
Python worker (ops/spark/daemon.py) runs many tasks; a new process would import every
module afresh. Two kinds of modules are told apart:

* **kept**: ddcli's own packages (an edit of them gives the service another key,
  ddcli/service/identity.py), the libraries of Python's own folders (the standard library,
  site-packages), and the submodules of a package the process already keeps (pyspark from
  ``$SPARK_HOME/python``). Importing them again would cost seconds, and a C extension
  cannot be imported twice. Their files are watched instead (:class:`KeptFiles`): a
  process whose kept code changed on disk must not serve (the service stops itself).
* **the user's**: every other module a command or a task imported — a pipeline's helpers,
  wherever they live (the current folder, ``PYTHONPATH``, ddcli's own checkout, an
  editable install). They are forgotten after each command (before each task), so the
  next one imports their current version, as a new process would.
"""

from __future__ import annotations

import contextlib
import functools
import os
import site
import sys
import sysconfig
import weakref

OWN_PACKAGES = frozenset({"ddcli", "ops", "storage"})


@functools.lru_cache(maxsize=1)
def library_folders() -> tuple[str, ...]:
    """The folders of Python's standard library and installed packages, each ending in a
    separator (ddcli's own checkout is not one of them: a user's helpers may live there)."""
    folders = set()
    paths = sysconfig.get_paths()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(name):
            folders.add(paths[name])
    with contextlib.suppress(Exception):
        folders.update(site.getsitepackages())
    with contextlib.suppress(Exception):
        folders.add(site.getusersitepackages())
    folders = {f for f in folders if f}
    return tuple({os.path.join(os.path.abspath(f), "") for f in folders}
                 | {os.path.join(os.path.realpath(f), "") for f in folders})


def is_kept(name: str, module, kept: set[str], libraries: tuple[str, ...]) -> bool:
    """Is ``module`` (imported as ``name``) one a long-lived process keeps (see the module's
    docstring)? ``kept``: the names it keeps already."""
    top = name.partition(".")[0]
    if top in OWN_PACKAGES or (top != name and top in kept):
        return True
    path = getattr(module, "__file__", None)
    if not path:  # built into Python, or made by code (no file to read again)
        return True
    return os.path.abspath(path).startswith(libraries) or os.path.realpath(path).startswith(libraries)


def forget_user_modules(kept: set[str]) -> set[str]:
    """Forget the user's modules imported since ``kept`` was taken; the names kept now.

    A forgotten submodule is also taken off its package when the package stays, so that
    ``from package import sub`` imports it again too."""
    new = sys.modules.keys() - kept
    if not new:
        return kept
    libraries = library_folders()
    modules = sys.modules.copy()
    now = set(kept)
    forgotten = []
    for name in sorted(new & modules.keys()):  # parents before their submodules
        if is_kept(name, modules[name], now, libraries):
            now.add(name)
        else:
            forgotten.append(name)
    for name in forgotten:
        module = sys.modules.pop(name, None)
        parent, _, child = name.rpartition(".")
        if parent in now and getattr(sys.modules.get(parent), child, None) is module:
            with contextlib.suppress(AttributeError, TypeError):
                delattr(sys.modules[parent], child)
    return now & set(sys.modules)


def user_code_status() -> tuple:
    """The status of the file of every user's module loaded now: what a cache of results a
    pipeline's code computes must be keyed by, besides fingerprints (a fingerprint reads a
    module a function uses by its name only). Some 1-2 ms after a run."""
    libraries = library_folders()
    out = []
    for name, module in sys.modules.copy().items():
        known = _KEPT_BY_NAME.get(name)
        if known is not None and known[0]() is module:
            kept = known[1]
        else:
            kept = is_kept(name, module, set(), libraries)
            with contextlib.suppress(TypeError):  # an object that takes no weak reference
                _KEPT_BY_NAME[name] = (weakref.ref(module), kept)
        if not kept:
            path = _file_of(module)
            out.append((name, path, _status(path) if path else None))
    return tuple((path, status) for _, path, status in sorted(out, key=lambda x: x[0]))


#: Per module name, the module last seen under it (weakly: a forgotten user module is
#: not kept alive) and whether it is kept. A module's answer never changes while it is
#: the one imported, and each run asks about the thousand modules of the process.
_KEPT_BY_NAME: dict[str, tuple[weakref.ref, bool]] = {}


def _status(path: str):
    """What changes when a file is written, replaced or removed (content is not read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


class KeptFiles:
    """The files of the modules a process keeps, as they were when it imported them.

    Checking them is a ``stat`` of each (some 1,100 files after a run, about 3 ms)."""

    CHANGED = "changed while imported"

    def __init__(self):
        self.status: dict[str, object] = {}

    def remember(self, since_ns: int | None = None) -> None:
        """Note the files of modules not seen before. ``since_ns``: when their import may have
        begun; a file changed after it may hold other code than was imported, and counts as
        changed."""
        for module in sys.modules.copy().values():
            path = _file_of(module)
            if path is None or path in self.status:
                continue
            status = _status(path)
            if since_ns is not None and status is not None and max(status[1], status[2]) >= since_ns:
                status = self.CHANGED
            self.status[path] = status

    def first_changed(self) -> str | None:
        """A file of a kept module that is not as it was imported, if any."""
        for path, status in self.status.items():
            if status == self.CHANGED or _status(path) != status:
                return path
        return None


def _file_of(module) -> str | None:
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return None
    archive = getattr(getattr(getattr(module, "__spec__", None), "loader", None), "archive", None)
    return archive if isinstance(archive, str) else path  # a module of a zip: the zip
