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
  run. ``EXPLAIN ANALYZE COPY …`` executes the copy, so an ``EXPLAIN``'s body (after its
  comments and options, ``EXPLAIN (ANALYZE, FORMAT json) …``) is checked as well, and a
  body that cannot be told apart is refused.

Errors are :class:`storage.errors.StoreError` (a user error, exit 2): one line naming the
statement or the file that was refused.
"""

from __future__ import annotations

import re

from storage.errors import StoreError

# DuckDB settings applied, in this order, to every reader's database. allowed_paths and
# allowed_directories can only be set while external access is still on.
_LOCKDOWN = ("SET enable_external_access = false", "SET lock_configuration = true")
_REFUSED_FILE = re.compile(r'Cannot access (?:file|directory) "([^"]*)"')


def _sql_list(items) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in items) + "]"


def sandbox(*, paths=(), directories=(), prepare=None, config: dict | None = None):
    """A new in-memory DuckDB that may read only ``paths`` (files) and ``directories``
    (each given with a trailing separator, so ``traces/`` does not admit ``traces_x/``).
    ``prepare(con)`` runs first (the store's storage registers how to read its paths);
    ``config``: more of DuckDB's settings, fixed with the rest."""
    import duckdb
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False, **(config or {})})
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


def _statement_kind(statement) -> str | None:
    """The statement's type name, or None for a type this duckdb module cannot name
    (``UPDATE EXTENSIONS`` has a number without a name)."""
    try:
        return str(statement.type).rsplit(".", 1)[-1]
    except ValueError:
        return None


def _leading_words(query: str) -> str:
    """The keywords a statement starts with (``UPDATE EXTENSIONS``), for the refusal."""
    import duckdb
    words = []
    for pos, kind in duckdb.tokenize(query):
        if kind == duckdb.token_type.comment:
            continue
        if kind != duckdb.token_type.keyword or len(words) == 2:
            break
        words.append(query[pos:].split(None, 1)[0].upper())
    return " ".join(words) or "unrecognised"


def _explained(query: str) -> list[str]:
    """The texts an ``EXPLAIN`` may be explaining: what follows ``EXPLAIN``, its comments
    and a bare ``ANALYZE``, and, when a parenthesis follows, also what follows that group
    (``EXPLAIN (FORMAT json, ANALYZE) SELECT …``; but ``EXPLAIN (SELECT 1)`` explains the
    group itself)."""
    import duckdb
    tokens = [(pos, kind) for pos, kind in duckdb.tokenize(query) if kind != duckdb.token_type.comment]
    words = [query[pos:].split(None, 1)[0].upper() for pos, _ in tokens]
    i = 1
    while i < len(tokens) and words[i] in ("ANALYZE", "ANALYSE"):
        i += 1
    if not words or words[0] != "EXPLAIN" or i == len(tokens):
        return []
    bodies = [query[tokens[i][0]:]]
    depth = 0
    for j in range(i, len(tokens)):
        pos, kind = tokens[j]
        if kind != duckdb.token_type.operator or query[pos] not in "()":
            if depth == 0:
                break
            continue
        depth += 1 if query[pos] == "(" else -1
        if depth == 0:
            if j + 1 < len(tokens):
                bodies.append(query[tokens[j + 1][0]:])
            break
    return bodies


def _read_only_kind(statement) -> str | None:
    """None when ``statement`` only reads; otherwise what it is, for the refusal."""
    import duckdb
    kind = _statement_kind(statement)
    if kind == "SELECT":
        return None
    if kind != "EXPLAIN":
        return kind or _leading_words(statement.query)
    # every reading of the body that parses must be a read, and one must parse
    verdicts = []
    for body in _explained(statement.query):
        try:
            inner = duckdb.extract_statements(body)
        except duckdb.Error:
            continue
        verdicts.append(len(inner) == 1 and _read_only_kind(inner[0]) is None)
    return None if verdicts and all(verdicts) else "EXPLAIN of a non-SELECT"


def check_read_only(query: str) -> None:
    """Refuse any statement of ``query`` that is not a query (before anything runs).

    ``EXPLAIN`` is a query when what it explains is one: ``EXPLAIN ANALYZE`` runs its
    statement, so ``EXPLAIN (ANALYZE) COPY …`` is refused like the ``COPY``.
    """
    import duckdb
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error:
        return  # a syntax error: DuckDB itself reports it, nothing can run
    for st in statements:
        kind = _read_only_kind(st)
        if kind is not None:
            raise StoreError(f"sql is read-only: {kind} statements are refused (only SELECT queries run; "
                             f"to save a result use --output FILE)")


def refused_file(error: Exception) -> str | None:
    """The file a DuckDB permission error names (None for any other error)."""
    import duckdb
    if not isinstance(error, duckdb.PermissionException):
        return None
    m = _REFUSED_FILE.search(str(error))
    return m.group(1) if m else "a file outside the store"
