"""A Python worker's DuckDB lookup of the stored old updates of a task's touched keys.

A reduce against a stored arrangement reads, in each task, the old updates of the keys
the task's new updates touch (DuckDB prunes the key-sorted layers' row groups). The
reduces of one task that share a shuffle (``ops/reduce/shared_shuffle.py``) look up the same keys
in the same immutable files, so the lookup is kept while that task runs and its rows are
read and accumulated once for all of them. It is closed when the task ends: a worker does
not hold one task's old rows while it waits for the next.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager

import pyarrow as pa

from storage.sql.duck import string_literal

#: the multiplicity column of the accumulated old rows (``old_rows``): prefixed, so that no
#: key or value column of the user's (one may be named ``m``) is taken for it
M = "_ddcli_m"

#: DuckDB memory a lookup may hold (the looked-up rows, their accumulation) before it spills.
MEMORY_LIMIT = "512MB"


def spill_directory() -> str:
    """A folder of this worker's own for DuckDB's spilled rows (its default, ``.tmp``, would
    land in the worker's working directory)."""
    return os.path.join(tempfile.gettempdir(), f"ddcli-duckdb-{os.getpid()}")


def limit_memory(con):
    """``con`` holding its rows under :data:`MEMORY_LIMIT`, spilling beyond it to this worker's
    folder. The connection may be one of the process's database (``storage/blobs/resolve.py``),
    whose folder DuckDB refuses to set again once it has spilled there, even to itself: it
    is set only where it differs."""
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    folder = spill_directory()
    if con.sql("SELECT current_setting('temp_directory')").fetchall()[0][0] != folder:
        con.execute(f"SET temp_directory = {string_literal(folder)}")
    return con


_limited: set[int] = set()  # the processes whose own database (storage/blobs/resolve.py) is limited


def lookup_connection(files: list[str]):
    """A connection that reads ``files`` (local, or on an object store), limited as
    :func:`limit_memory` says. Local files are read through the process's one database,
    whose settings are its connections': they are set once per process, not per lookup
    (a refresh makes hundreds of lookups, a few milliseconds each)."""
    from storage.blobs.resolve import duckdb_connect, is_object_store
    con = duckdb_connect(files)
    shared = not (files and is_object_store(files[0]))
    if shared and os.getpid() in _limited:
        return con
    limit_memory(con)
    if shared:
        _limited.add(os.getpid())
    return con


class OldLookup:
    """A DuckDB connection over the stored files with a task's touched keys registered
    (``touched_keys``), and whether it holds their accumulated old rows (``old_rows``)."""

    last: "OldLookup | None" = None
    #: set while one task runs several reduces over the same keys: keep the lookup
    shared_task: bool = False

    def __init__(self, files: list[str], keys: pa.Table, key: list[str], values: list[str]):
        self.what, self.keys, self.accumulated = (tuple(files), tuple(key), tuple(values)), keys, False
        self.con = lookup_connection(files)  # the files may be on an object store
        if key:  # (DuckDB registers no table without columns; a reduce without key needs none)
            self.con.register("touched_keys", keys)
        self._count: int | None = None
        self.sql: str | None = None  # the SQL of the touched keys' old updates
        self.latest_old: int | None = None  # the latest time of the accumulated old rows

    def old_count(self, sql: str) -> int:
        """How many old updates ``sql`` (the touched keys' lookup) selects."""
        if self._count is None:
            self._count = int(self.con.sql(f"SELECT count(*) FROM ({sql})").fetchall()[0][0])
        return self._count

    @classmethod
    def of(cls, files: list[str], keys: pa.Table, key: list[str], values: list[str]) -> "OldLookup":
        """The kept lookup when it is over the same files and keys, else a new one."""
        last = cls.last
        if last is not None and last.what == (tuple(files), tuple(key), tuple(values)) and last.keys.equals(keys):
            return last
        cls.release()
        cls.last = cls(files, keys, key, values)
        return cls.last

    @classmethod
    def release(cls) -> None:
        """Close the kept lookup (its connection and the rows it holds)."""
        if cls.last is not None:
            cls.last.con.close()
            cls.last = None

    @classmethod
    def task_ended(cls) -> None:
        """A reduce's task is over: release the lookup unless more reduces of the same task follow."""
        if not cls.shared_task:
            cls.release()

    @classmethod
    @contextmanager
    def shared(cls):
        """Several reduces of one task run inside: they keep one lookup, released at the end."""
        cls.shared_task = True
        try:
            yield
        finally:
            cls.shared_task = False
            cls.release()
