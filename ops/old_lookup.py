"""A Python worker's DuckDB lookup of the stored old updates of a task's touched keys.

A reduce against a stored arrangement reads, in each task, the old updates of the keys
the task's new updates touch (DuckDB prunes the key-sorted layers' row groups). The
reduces of one task that share a shuffle (``ops/reduce_shared.py``) look up the same keys
in the same immutable files, so the lookup is kept while that task runs and its rows are
read and accumulated once for all of them. It is closed when the task ends: a worker does
not hold one task's old rows while it waits for the next.
"""

from __future__ import annotations

from contextlib import contextmanager

import pyarrow as pa


class OldLookup:
    """A DuckDB connection over the stored files with a task's touched keys registered
    (``touched_keys``), and whether it holds their accumulated old rows (``old_rows``)."""

    last: "OldLookup | None" = None
    #: set while one task runs several reduces over the same keys: keep the lookup
    shared_task: bool = False

    def __init__(self, files: list[str], keys: pa.Table, key: list[str], values: list[str]):
        from storage.blob import duckdb_connect
        self.what, self.keys, self.accumulated = (tuple(files), tuple(key), tuple(values)), keys, False
        self.con = duckdb_connect(files)  # the files may be on an object store
        self.con.register("touched_keys", keys)

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
