"""Local layer files made durable together, just before the commit that names them.

A local layer file is written under a temporary name and renamed; before a version of
the log names it, its bytes and its folder's entry must be on disk. Syncing each file as
it is written costs two fsyncs a file, one after the other (1–3 ms each on these
machines): a refresh that writes a hundred small layers spent more on them than on its
work. Inside :func:`together`, the local files a thread writes are only recorded, and
:func:`make_durable` syncs them all, then their folders, in parallel (the filesystem
joins concurrent syncs into few journal commits) — right before the commit
(``storage/store.py``: ``write_and_commit``) and when the block ends. Files written
outside one (Spark's tasks, other threads, objects on an object store) are synced as they
are written, as always.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

_state = threading.local()
_SYNCS_AT_ONCE = 16


@contextmanager
def together():
    """Defer the syncs of the local files this thread writes inside (nested blocks join
    the outermost); whatever is still pending is synced when the block ends normally."""
    if getattr(_state, "pending", None) is not None:
        yield
        return
    _state.pending = ([], set())
    try:
        yield
        make_durable()
    finally:
        _state.pending = None


def deferred(path: str) -> bool:
    """Record ``path`` (just renamed into place) to be synced with its folder later: True
    inside :func:`together`, else False (the caller syncs it now)."""
    pending = getattr(_state, "pending", None)
    if pending is None:
        return False
    pending[0].append(path)
    pending[1].add(os.path.dirname(path))
    return True


def make_durable() -> None:
    """Sync every file recorded so far, then their folders (a file removed meanwhile,
    e.g. discarded, needs nothing)."""
    pending = getattr(_state, "pending", None)
    if not pending or not pending[0]:
        return
    files, folders = list(pending[0]), sorted(pending[1])
    pending[0].clear()
    pending[1].clear()
    if len(files) == 1:
        _sync(files[0])
        _sync(folders[0])
        return
    with ThreadPoolExecutor(min(_SYNCS_AT_ONCE, len(files))) as pool:
        list(pool.map(_sync, files))
        list(pool.map(_sync, folders))


def _sync(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
