"""Read one update file (CSV, JSON Lines, Parquet; local or on S3, plain or compressed)
into validated Arrow columns.

Everything a user can get wrong in a file is caught before anything is written, and
reported as one line naming the file, the row and the value (``UpdateFileError``,
``storage/files/messages.py``). The file's bytes are streamed and hashed as they pass
(``storage/files/streams.py``) and parsed block by block by its source
(``storage/files/sources.py``); its columns are then checked and typed
(``storage/files/validate.py``).

Why one pass, in memory: every row of every file of an ingest is validated before the
ingest writes its layer, and a layer is one sorted, consolidated file written in one
piece, so the updates are held until then anyway. What they may take is capped instead
(``DDCLI_INGEST_MEMORY``, :class:`storage.files.limits.ReadBudget`): blocks are charged as they
are read, and a file's text columns are given back once they are typed. An input too big
to hold (:class:`storage.files.limits.OverBudget`) is read again by
:func:`read_update_chunks`, chunk by chunk, for an ingest out of core (storage/writes/spill.py). The bytes of a file are never
held whole, so a huge sparse file, a line without end or a gzip bomb is refused within
the first blocks.
"""

from __future__ import annotations

import os
from typing import Callable

import pyarrow as pa

from storage.errors import UpdateFileError
from storage.files import limits
from storage.files.locations import UpdateObject
from storage.files.sources import FORMATS, CsvSource, JsonSource, ParquetSource, Source, choose_format
from storage.files.validate import UpdateBatch, validate

__all__ = ["UpdateFileError", "UpdateBatch", "read_update_file", "FORMATS"]

_SOURCES: dict[str, type[Source]] = {"csv": CsvSource, "jsonl": JsonSource, "parquet": ParquetSource}


def read_update_file(
    source: str | UpdateObject,
    *,
    fmt: str | None = None,
    schema: pa.Schema | None = None,
    d: int | None = None,
    time: tuple[int, ...] | str | None = None,
    null: str | None = None,
    budget: limits.ReadBudget | None = None,
    types: dict[str, pa.DataType] | None = None,
) -> UpdateBatch:
    """Read and validate one update file; raise ``UpdateFileError`` on any problem.

    ``schema`` and ``d`` describe an existing trace (the file must fit them); without them
    the types and the time dimension are inferred. ``time`` stamps every row of a file that
    has no time column. ``null`` is the text a CSV file writes for null (see storage/files/nulls.py).
    ``budget`` is the memory the updates of the whole ingest may take (one per file if not given).
    ``types`` (column -> type, storage/files/column_types.py) are parsed as asked, not inferred.
    """
    budget = budget or limits.ReadBudget()
    src = _source(source, fmt, d, budget, types)
    table = src.read()
    held = table.nbytes
    if src.fmt == "csv":
        from storage.files.nulls import apply_null_marker
        table = apply_null_marker(table, null)
    batch = validate(src, table, src.sha256, schema=schema, d=d, time=time, types=types)
    del table
    budget.give_back(held)
    budget.take(batch.data.nbytes + 8 * batch.num_rows * (batch.d + 1), src.path)
    return batch


def _source(source, fmt: str | None, d: int | None, budget: limits.ReadBudget, types) -> Source:
    obj = source if isinstance(source, UpdateObject) else UpdateObject(os.fspath(source))
    fmt = choose_format(obj.url, fmt)
    if not obj.on_s3:
        problem = limits.regular_file_problem(obj.url)  # a FIFO would block the read forever
        if problem:
            raise UpdateFileError(obj.url, problem)
    if d is not None and (not isinstance(d, int) or d < 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    return _SOURCES[fmt](obj, budget, types)


def read_update_chunks(source: str | UpdateObject, take: Callable[[UpdateBatch, int], None], *,
                       memory: int, fmt: str | None = None, schema: pa.Schema | None = None,
                       d: int | None = None, time=None, null: str | None = None,
                       types: dict[str, pa.DataType] | None = None) -> str:
    """Read and validate one update file in chunks of about ``memory / 8`` read, handing
    each to ``take(batch, rows_before)`` as soon as it is validated; return the file's sha256.

    For an ingest bigger than its memory (storage/writes/spill.py): the first chunk's
    types (or ``schema``) are the file's, every later chunk must fit them. Errors are the
    ones :func:`read_update_file` gives, rows numbered in the file.
    """
    src = _source(source, fmt, d, limits.ReadBudget(limits.OUT_OF_CORE * memory), types)
    seen = {"schema": schema, "d": d, "rows": 0}

    def on_table(table: pa.Table) -> None:
        if src.fmt == "csv":
            from storage.files.nulls import apply_null_marker
            table = apply_null_marker(table, null)
        src.row_offset = seen["rows"]
        try:
            batch = validate(src, table, "", schema=seen["schema"], d=seen["d"], time=time, types=types)
        finally:
            src.row_offset = 0
        if seen["schema"] is None:
            seen["schema"], seen["d"] = batch.data.schema, batch.d
        take(batch, seen["rows"])
        seen["rows"] += table.num_rows

    src.on_chunk, src.chunk_bytes = (lambda parts: on_table(src.assemble(parts))), memory // 8
    rest = src.read()
    if rest.num_rows or not seen["rows"]:
        on_table(rest)
    return src.sha256
