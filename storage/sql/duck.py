"""A private DuckDB connection on a store, and how its identifiers are written.

Every read of traces with DuckDB (``query``, ``history``, ``sql``, ``--where``, an upsert's
look-up of live rows) opens its connection here, sandboxed to the store's ``traces/``
folder (storage/sql/sandbox.py).
"""

from __future__ import annotations

import contextlib
import os
import threading

from storage.sql import sandbox


def quote(name: str) -> str:
    """A DuckDB identifier, quoted (trace and column names may contain dots or be keywords)."""
    return '"' + name.replace('"', '""') + '"'


def string_literal(text: str) -> str:
    """A DuckDB string literal (a file's path may hold a quote)."""
    return "'" + text.replace("'", "''") + "'"


def file_list(paths) -> str:
    """A DuckDB list of file paths, as ``read_parquet`` takes it."""
    return "[" + ", ".join(string_literal(p) for p in paths) + "]"


def parquet_source(paths) -> str | None:
    """The SQL table expression reading ``paths`` (a trace's layer files, whose later
    layers may carry columns the earlier lack), or None when there are none."""
    if not paths:
        return None
    return f"read_parquet({file_list(paths)}, union_by_name = true)"


_BASES: dict = {}
_BASES_LOCK = threading.Lock()
_MAX_BASES = 8


#: DuckDB memory the store's own upkeep (the current-state tables) may hold before it
#: spills: an output's collection is grouped over all its updates, whose distinct rows
#: may be far more than memory holds.
UPKEEP_MEMORY = "1GB"


@contextlib.contextmanager
def connect(store, *, upkeep: bool = False):
    """A private DuckDB connection for one read of ``store``, closed afterwards.

    The database may read only the store's ``traces/`` folder (see storage/sql/sandbox.py),
    so a ``--where`` cannot reach any other file. Opening one costs tens of milliseconds,
    so one per store and process is kept (lazily: the CLI starts without DuckDB) and every
    read gets its own cursor on it — a separate connection, safe to use from another
    thread, whose temporary views and registered tables nobody else sees. ``upkeep``: a
    database of its own that holds at most :data:`UPKEEP_MEMORY` and spills the rest to
    a folder of this process's (a user's query keeps DuckDB's default, most of memory).
    """
    key = (os.getpid(), store.blobs.join(store.path, "traces") + "/", upkeep)
    with _BASES_LOCK:
        base = _BASES.get(key)
        if base is None:
            if any(k[0] != key[0] for k in _BASES) or len(_BASES) >= _MAX_BASES:
                _BASES.clear()  # a forked child must not share its parent's databases
            config = {"memory_limit": UPKEEP_MEMORY, "temp_directory": _spill_folder()} if upkeep else None
            base = _BASES[key] = sandbox.sandbox(directories=store.blobs.read_folders(key[1]),
                                                 prepare=store.blobs.prepare_duckdb, config=config)
        con = base.cursor()
    try:
        yield con
    finally:
        con.close()


def upkeep_folder() -> str:
    """This process's folder for what upkeep spills."""
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"ddcli-duckdb-upkeep-{os.getpid()}")


def _spill_folder() -> str:
    """:func:`upkeep_folder`, removed when the process exits."""
    import atexit
    import shutil
    atexit.register(shutil.rmtree, upkeep_folder(), ignore_errors=True)
    return upkeep_folder()
