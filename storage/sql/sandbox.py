"""Read-only DuckDB: what ``ddcli sql`` and ``--where`` may touch, and nothing more.

A reader's SQL comes from the user, so the DuckDB it runs on is locked down twice
(each lock alone leaks; measured on DuckDB 2.0.0):

* **The database** (:func:`sandbox`): ``enable_external_access=false`` with
  ``allowed_paths`` (exactly the layer files a read needs) or ``allowed_directories``
  (the store's ``traces/`` folder), then ``lock_configuration=true`` so no ``SET`` can
  undo it. No file outside can be read (``read_text('/etc/passwd')`` is a permission
  error); ``ATTACH``, ``EXPORT``, ``INSTALL``, ``LOAD`` and ``COPY … TO`` elsewhere fail.
  But an *allowed* file can still be written: ``COPY … TO '<layer>' (USE_TMP_FILE
  false)`` truncates a layer.
* **The statements** (:func:`check_read_only`): only ``SELECT`` (``WITH``, ``VALUES``,
  ``DESCRIBE``, ``SUMMARIZE``, ``SHOW`` parse as one) and ``EXPLAIN`` of a ``SELECT``
  run. ``EXPLAIN ANALYZE COPY …`` executes the copy, so an ``EXPLAIN``'s body is checked
  as well.

Errors are :class:`storage.errors.StoreError` (a user error, exit 2): one line naming the
statement or the file that was refused.
"""

from __future__ import annotations

import re

from storage.errors import StoreError

# DuckDB settings applied, in this order, to every reader's database. allowed_paths and
# allowed_directories can only be set while external access is still on.
_LOCKDOWN = ("SET enable_external_access = false", "SET lock_configuration = true")
_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(.*)$", re.IGNORECASE | re.DOTALL)
_REFUSED_FILE = re.compile(r'Cannot access (?:file|directory) "([^"]*)"')


def _sql_list(items) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in items) + "]"


def sandbox(*, paths=(), directories=(), prepare=None):
    """A new in-memory DuckDB that may read only ``paths`` (files) and ``directories``
    (each given with a trailing separator, so ``traces/`` does not admit ``traces_x/``).
    ``prepare(con)`` runs first (the store's storage registers how to read its paths)."""
    import duckdb
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    try:
        if prepare is not None:
            prepare(con)
        if paths:
            con.execute(f"SET allowed_paths = {_sql_list(paths)}")
        if directories:
            con.execute(f"SET allowed_directories = {_sql_list(directories)}")
        for s in _LOCKDOWN:
            con.execute(s)
    except BaseException:
        con.close()
        raise
    return con


def _statement_kind(statement) -> str:
    return str(statement.type).rsplit(".", 1)[-1]


def check_read_only(query: str) -> None:
    """Refuse any statement of ``query`` that is not a query (before anything runs)."""
    import duckdb
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error:
        return  # a syntax error: DuckDB itself reports it, nothing can run
    for st in statements:
        kind = _statement_kind(st)
        if kind == "SELECT":
            continue
        if kind == "EXPLAIN":
            m = _EXPLAIN.match(st.query)
            body = duckdb.extract_statements(m.group(1)) if m else []
            if len(body) == 1 and _statement_kind(body[0]) == "SELECT":
                continue
            kind = "EXPLAIN of a non-SELECT"
        raise StoreError(f"sql is read-only: {kind} statements are refused (only SELECT queries run; "
                         f"to save a result use --output FILE)")


def refused_file(error: Exception) -> str | None:
    """The file a DuckDB permission error names (None for any other error)."""
    import duckdb
    if not isinstance(error, duckdb.PermissionException):
        return None
    m = _REFUSED_FILE.search(str(error))
    return m.group(1) if m else "a file outside the store"
