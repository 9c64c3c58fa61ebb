"""A store in a local (or shared, POSIX) folder: exactly the behaviour ddcli always had.

Write once: a temporary name, fsync, rename, fsync of the folder (the syncs of a run's
files deferred to just before its commit: storage/blobs/durability.py). Put-if-absent: a hard
link (``link`` fails when the name exists, and never overwrites). A link that ends
ambiguously (``EEXIST`` after a network filesystem retried a link that had succeeded)
returns False: the log reads the version back and compares its commit id.
"""

from __future__ import annotations

import os
import uuid

from storage import faults
from storage.blobs import durability
from storage.blobs.base import Blobs, Stat
from storage.blobs.checksums import handle_checksums


class LocalBlobs(Blobs):
    spark_reads_files = True
    is_folder = True

    def __init__(self):
        self.root = ""

    def normalise(self, location: str) -> str:
        return os.path.abspath(location)

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def where(self) -> str:
        return "local folder"

    def check(self) -> None:
        return None

    # ------------------------------------------------------------ reading

    def get(self, path: str) -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    def get_with_ident(self, path: str) -> tuple[bytes, tuple]:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            return fh.read(), _ident(st)

    def stat(self, path: str) -> Stat:
        st = os.stat(path)
        return Stat(st.st_size, st.st_mtime, _ident(st), st.st_ctime_ns)

    def list(self, folder: str) -> list[str]:
        try:
            return [n for n in os.listdir(folder) if not os.path.isdir(os.path.join(folder, n))]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_folders(self, folder: str) -> list[str]:
        try:
            return [n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n))]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def open_read(self, path: str):
        return open(path, "rb")

    def arrow(self, path: str) -> tuple[object, str]:
        return None, path

    def prepare_duckdb(self, con) -> None:
        return None

    # ------------------------------------------------------------ writing

    def write_new(self, path: str, write) -> dict:
        directory = os.path.dirname(path)
        self.make_folder(directory)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as fh:
                write(fh)
                fh.flush()
                faults.point("layer.before_fsync")
                later = durability.deferred(path)  # synced with the others before the commit
                if not later:
                    os.fsync(fh.fileno())
            with open(tmp, "rb") as written:  # read back from the page cache: what is on disk now
                sums = handle_checksums(written)
            faults.point("layer.before_rename")
            os.rename(tmp, path)
        except BaseException:
            _remove_quietly(tmp)  # a full disk must not stay full of our half-written files
            raise
        if not later:
            _fsync_dir(directory)
        faults.point("layer.after_rename")
        return {"bytes": os.path.getsize(path), **sums}

    def put_if_absent(self, path: str, data: bytes, point: str = "log.before_link") -> bool:
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            _remove_quietly(tmp)  # e.g. a full disk: leave no partial version behind
            raise
        try:
            faults.point(point)
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        _fsync_dir(directory)
        return True

    def replace(self, path: str, data: bytes) -> None:
        tmp = os.path.join(os.path.dirname(path), f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise

    def replace_hint(self, path: str, data: bytes) -> None:
        """Removed, then the new file renamed in: ext4 (``auto_da_alloc``) writes a file's
        data out before it is renamed over another, which behind a run's fresh layer files
        made a command wait 10-25 ms for a hint of a few hundred bytes."""
        tmp = os.path.join(os.path.dirname(path), f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            _remove_quietly(path)
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise

    def delete(self, path: str) -> bool:
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False

    def make_folder(self, folder: str) -> None:
        ensure_dir(folder)

    def remove_folder(self, folder: str, older_than: float | None = None) -> None:
        """Remove ``folder`` if it is empty (and, with ``older_than``, not newer than that)."""
        try:
            if older_than is None or os.stat(folder).st_mtime < older_than:
                os.rmdir(folder)
        except OSError:
            pass


def _ident(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def ensure_dir(directory: str) -> None:
    """Create ``directory`` (and missing parents) durably: the new entries are fsynced too,
    so a committed version never names a file in a directory a crash forgot."""
    if os.path.isdir(directory):
        return
    missing = []
    d = os.path.abspath(directory)
    while not os.path.isdir(d):
        missing.append(d)
        d = os.path.dirname(d)
    os.makedirs(directory, exist_ok=True)
    for m in missing:
        _fsync_dir(os.path.dirname(m))


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


LOCAL = LocalBlobs()
