"""The zip of ddcli's own packages that a cluster's executors import (ops/spark/session.py ships it).

Executors on other hosts have pyspark, pyarrow and the like, but not ddcli: the driver adds
this zip to the session (``addPyFile``). It is named by the hash of its content and built
once into a cache folder of the temp dir, so every process of one version shares it; zips of
other versions are deleted once no process used them for a day and none holds them.
"""

from __future__ import annotations

import os
import tempfile

SHIPPED_PACKAGES = ("ops", "storage")


CODE_ZIP_KEEP_SECONDS = 86400.0  # code zips no process used for a day are deleted
_held_zips: list = []  # open files of the code zips this process uses (shared locks, kept to the end)


def code_zip() -> str:
    """A zip of ddcli's packages the executors import (``ops``, ``storage``: their ``.py``
    files), named by the hash of its content and built once into a cache folder of the
    temp dir; returns its path.

    Executors fetch the zip from the driver while it runs, so a process holds a shared
    ``flock`` on its zip for its whole life and marks it used (mtime). Other zips of the
    folder (older versions of the code) are deleted once unused for
    ``CODE_ZIP_KEEP_SECONDS`` and not locked by any process (:func:`_remove_stale_zips`).
    """
    import hashlib
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = []
    for pkg in SHIPPED_PACKAGES:
        for folder, dirs, names in os.walk(os.path.join(root, pkg)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    digest = hashlib.sha256()
    contents = []
    for path in files:
        with open(path, "rb") as fh:
            data = fh.read()
        rel = os.path.relpath(path, root)
        digest.update(rel.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
        contents.append((rel, data))
    cache = os.path.join(tempfile.gettempdir(), f"ddcli-code-{os.getuid()}")
    os.makedirs(cache, mode=0o700, exist_ok=True)
    target = os.path.join(cache, f"ddcli-{digest.hexdigest()[:20]}.zip")
    for _ in range(10):
        if not os.path.exists(target):
            _write_zip(cache, target, contents)
        if _hold(target):
            break
    else:  # pragma: no cover - ten cleaners deleting our fresh zip in a row
        raise OSError(f"cannot keep the code zip {target}: it keeps being deleted")
    _remove_stale_zips(cache, keep=target)
    return target


def _write_zip(cache: str, target: str, contents: list[tuple[str, bytes]]) -> None:
    import zipfile
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            for rel, data in contents:
                info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        os.replace(tmp, target)  # same content, same name: a racing writer is harmless
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _hold(target: str) -> bool:
    """Take a shared lock on ``target`` for the rest of this process and mark it used;
    False when a cleaner deleted it meanwhile (then it is built again)."""
    import fcntl
    try:
        fh = open(target, "rb")
    except FileNotFoundError:
        return False
    fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
    try:
        same = os.path.samestat(os.fstat(fh.fileno()), os.stat(target))
    except FileNotFoundError:
        same = False
    if not same:  # deleted (or replaced) between open and lock
        fh.close()
        return False
    os.utime(target)
    _held_zips.append(fh)
    return True


def _remove_stale_zips(cache: str, keep: str) -> int:
    """Delete the code zips of ``cache`` other than ``keep`` that no process used for
    ``CODE_ZIP_KEEP_SECONDS`` and none holds now (an exclusive lock taken without
    waiting, then the age checked again), and temporary files of builds that died as old.
    Returns how many files went."""
    import fcntl
    import time
    removed = 0
    for name in os.listdir(cache):
        path = os.path.join(cache, name)
        if path == keep or not (name.startswith("ddcli-") and name.endswith(".zip") or name.endswith(".tmp")):
            continue
        try:
            if time.time() - os.stat(path).st_mtime < CODE_ZIP_KEEP_SECONDS:
                continue
            if name.endswith(".tmp"):
                os.unlink(path)
                removed += 1
                continue
            with open(path, "rb") as fh:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a running process ships it
                st = os.stat(path)
                if os.path.samestat(st, os.fstat(fh.fileno())) and time.time() - st.st_mtime >= CODE_ZIP_KEEP_SECONDS:
                    os.unlink(path)
                    removed += 1
        except OSError:
            continue  # gone already, or not ours to delete: another day
    return removed
