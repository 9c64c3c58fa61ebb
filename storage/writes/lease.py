"""A run's lease: a second run of the same pipeline finds out at its start, not at its commit.

Commits stay lock-free and safe without it (the second run to commit exits 3 and writes
nothing), but both runs would do the full work first. So ``ddcli run`` takes a lease on the
pipeline's name before it starts Spark, and a run that finds a live lease exits 3 at once.

A lease is a file ``STORE/leases/<pipeline>.<n>.json`` (pid, host, start) created with
put-if-absent (``O_CREAT|O_EXCL`` semantics, storage/blobs/base.py); the holder rewrites it every
``ttl/3`` seconds. It is live while it was
touched within ``ttl`` seconds (``DDCLI_LEASE_SECONDS``, default 60) — and, on the same
host, while its process exists, so a killed run frees its pipeline at once (and on another
host after ``ttl``). A lease that is not live is taken over by creating the next number
``n + 1``, again put-if-absent: of two processes taking over together, one wins.
Garbage collection removes what killed holders leave: their lease files once not live, and
the temporary files of a create or renewal killed half-way (``collect_dead``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time

from storage import clock
from storage.blobs.resolve import for_path
from storage.errors import Conflict
from storage.processes import pid_alive

DEFAULT_TTL = 60.0


def ttl_seconds() -> float:
    return float(os.environ.get("DDCLI_LEASE_SECONDS") or DEFAULT_TTL)


def _leases(blobs, folder: str, name: str) -> list[tuple[int, str]]:
    pattern = re.compile(re.escape(name) + r"\.(\d+)\.json\Z")
    names = blobs.list(folder)
    return sorted((int(m.group(1)), blobs.join(folder, f)) for f in names if (m := pattern.match(f)))


def _holder(blobs, path: str, ttl: float) -> dict | None:
    """The lease's record if it is live, else None."""
    try:
        age = clock.now() - blobs.stat(path).mtime
        text = blobs.get(path).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    if age > ttl:
        return None
    try:
        rec = json.loads(text)
    except ValueError:  # its holder is still writing it
        return {"pid": "?", "host": "?", "started": "just now"}
    if rec.get("host") == socket.gethostname() and not pid_alive(int(rec.get("pid", -1))):
        return None
    return rec


@contextlib.contextmanager
def lease(store_path: str, name: str, ttl: float | None = None):
    """Hold the lease on pipeline ``name`` for the duration of the block, or raise
    :class:`Conflict` at once when another live process holds it."""
    ttl = ttl_seconds() if ttl is None else ttl
    blobs = for_path(store_path)
    folder = blobs.join(store_path, "leases")
    path, record = _take(blobs, folder, name, ttl)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl / 3):
            try:
                blobs.replace(path, record)  # a new modification time
            except Exception:  # noqa: BLE001 - a lease that lapses only lets a second run start early
                return

    beat = threading.Thread(target=renew, name=f"lease-{name}", daemon=True)
    beat.start()
    try:
        yield path
    finally:
        stop.set()
        blobs.delete(path)
        blobs.remove_folder(folder)  # only when empty: a store at rest holds its log and traces only


def _take(blobs, folder: str, name: str, ttl: float) -> tuple[str, bytes]:
    for _ in range(3):  # the folder may vanish between making it and the create (a release's rmdir)
        blobs.make_folder(folder)
        held = _leases(blobs, folder, name)
        n = held[-1][0] if held else 0
        if held:
            rec = _holder(blobs, held[-1][1], ttl)
            if rec is not None:
                raise Conflict(f"pipeline {name!r} is being run by another process (pid {rec.get('pid')} on "
                               f"{rec.get('host')}, started {rec.get('started')}); this run did nothing")
        path = blobs.join(folder, f"{name}.{n + 1}.json")
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode()
        try:
            if not blobs.put_if_absent(path, record, "lease.before_link"):
                raise Conflict(f"pipeline {name!r} was just started by another process; this run did nothing")
        except FileNotFoundError:
            continue
        for _, old in held:
            blobs.delete(old)
        return path, record
    raise Conflict(f"pipeline {name!r}: could not take its run lease; retry")


def collect_dead(blobs, store_path: str, cutoff: float, ttl: float | None = None) -> int:
    """Remove the leases no live process holds and the temporary files older than ``cutoff``
    of holders killed while writing one; then the folder, when that leaves it empty (a run
    that made it just before takes its lease again, as after a release's removal)."""
    ttl = ttl_seconds() if ttl is None else ttl
    folder = blobs.join(store_path, "leases")
    pattern = re.compile(r".+\.\d+\.json\Z")
    removed = 0
    for fname in blobs.list(folder):
        path = blobs.join(folder, fname)
        try:
            if fname.startswith(".tmp-"):
                dead = blobs.stat(path).mtime < cutoff
            else:
                dead = pattern.match(fname) is not None and _holder(blobs, path, ttl) is None
        except FileNotFoundError:
            continue
        if dead and blobs.delete(path):
            removed += 1
    blobs.remove_folder(folder)
    return removed
