"""The storage interface: where a store's files live, a local folder or an object store.

Everything in ``storage/`` and ``ops/`` that touches a store's files goes through a
:class:`Blobs` (one per location), chosen in one place (storage/blobs/resolve.py):
``s3://bucket/prefix`` is :class:`storage.blobs.s3.S3Blobs`, anything else a local folder
(:class:`storage.blobs.local.LocalBlobs`). Paths are plain strings, full paths or
``s3://`` URLs, so a path alone says which implementation reads it, also inside a Spark
task.

What the store needs of its storage, and nothing more:

* **write once** (:meth:`Blobs.write_new`): a layer file appears whole under its unique
  name or not at all;
* **put-if-absent** (:meth:`Blobs.put_if_absent`): the commit of a metadata version; of
  two writers exactly one creates the name;
* get, stat (size, age, identity), list one folder, delete, replace (for hints only);
* reading Parquet with pyarrow, DuckDB and Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Stat:
    size: int
    mtime: float          # seconds since 1970 (the object store's clock for objects)
    ident: tuple          # changes whenever the file is replaced
    changed: object = None  # changes whenever the file's bytes may have (local: its ctime)


class Blobs:
    """One storage location (see the module docstring). Missing files raise
    :class:`FileNotFoundError`, as on a local disk."""

    root: str                    # the store's location, normalised
    spark_reads_files = True     # Spark can read its Parquet paths itself (no object-store jars)
    is_folder = False            # a filesystem folder (local or shared): tasks can exchange files in it
    counts_requests = False      # object stores count the requests they send (for the bench)
    requests = 0

    def normalise(self, location: str) -> str: raise NotImplementedError
    def join(self, *parts: str) -> str: raise NotImplementedError
    def where(self) -> str: raise NotImplementedError
    def get(self, path: str) -> bytes: raise NotImplementedError
    def get_with_ident(self, path: str) -> tuple[bytes, tuple]: raise NotImplementedError
    def stat(self, path: str) -> Stat: raise NotImplementedError
    def put_if_absent(self, path: str, data: bytes, point: str = "log.before_link") -> bool:
        raise NotImplementedError  # ``point``: the fault point just before the create (storage/faults.py)
    def replace(self, path: str, data: bytes) -> None: raise NotImplementedError

    def replace_hint(self, path: str, data: bytes) -> None:
        """:meth:`replace` a file its readers treat as a hint, which they may find missing
        for a moment (they then do without it): a store may write it more cheaply."""
        self.replace(path, data)

    def delete(self, path: str) -> bool: raise NotImplementedError
    def list(self, folder: str) -> list[str]: raise NotImplementedError
    def list_folders(self, folder: str) -> list[str]: raise NotImplementedError
    def make_folder(self, folder: str) -> None: raise NotImplementedError
    def remove_folder(self, folder: str, older_than: float | None = None) -> None: raise NotImplementedError
    def open_read(self, path: str): raise NotImplementedError
    def arrow(self, path: str) -> tuple[object, str]: raise NotImplementedError
    def prepare_duckdb(self, con) -> None: raise NotImplementedError
    def check(self) -> None: raise NotImplementedError

    def local_copy(self, path: str) -> tuple[str, int, str] | None:
        """For readers (DuckDB, pyarrow): ``(local path, size, sha256)`` of a copy of
        ``path``'s bytes in a local folder, hashed as they arrived, or None where files are
        read in place (a local folder). Layer files are written once under unique names,
        so a copy made in this process stays good for its life; the copies go with it."""
        return None

    def forget_copy(self, path: str) -> None:
        """Drop the local copy of ``path`` (it did not match the log)."""
        return None

    def read_folders(self, folder: str) -> list[str]:
        """The folders (with a trailing separator) a sandboxed DuckDB must be allowed to
        read to read the files under ``folder``: the folder itself and any local copies."""
        return [folder]

    def write_new(self, path: str, write: Callable[[object], None]) -> dict:
        """Write a new file once: ``write(fh)`` fills it; it appears whole under ``path``
        or not at all. Returns ``{"bytes", "sha256", "footer_sha256"}``."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def ident(self, path: str) -> tuple | None:
        try:
            return self.stat(path).ident
        except FileNotFoundError:
            return None
