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
are read, a file's text columns are given back once they are typed, and an input too big
to hold is refused in one line before anything is written. The bytes of a file are never
held whole, so a huge sparse file, a line without end or a gzip bomb is refused within
the first blocks.
"""

from __future__ import annotations

import os

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
    obj = source if isinstance(source, UpdateObject) else UpdateObject(os.fspath(source))
    fmt = choose_format(obj.url, fmt)
    if not obj.on_s3:
        problem = limits.regular_file_problem(obj.url)  # a FIFO would block the read forever
        if problem:
            raise UpdateFileError(obj.url, problem)
    if d is not None and (not isinstance(d, int) or d < 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    budget = budget or limits.ReadBudget()
    src = _SOURCES[fmt](obj, budget, types)
    table = src.read()
    held = table.nbytes
    if fmt == "csv":
        from storage.files.nulls import apply_null_marker
        table = apply_null_marker(table, null)
    batch = validate(src, table, src.sha256, schema=schema, d=d, time=time, types=types)
    del table
    budget.give_back(held)
    budget.take(batch.data.nbytes + 8 * batch.num_rows * (batch.d + 1), obj.url)
    return batch
