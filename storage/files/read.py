"""Read one update file (CSV, JSON Lines, Parquet) into validated Arrow columns.

Everything a user can get wrong in a file is caught before anything is written, and
reported as one line naming the file, the row and the value (``UpdateFileError``,
``storage/files/messages.py``). The file's bytes are read once, memory-mapped, hashed and
parsed by its source (``storage/files/sources.py``); its columns are then checked and
typed (``storage/files/validate.py``).
"""

from __future__ import annotations

import hashlib
import os

import pyarrow as pa

from storage.errors import UpdateFileError
from storage.files import limits
from storage.files.sources import FORMATS, CsvSource, JsonSource, ParquetSource, Source, choose_format, read_bytes
from storage.files.validate import UpdateBatch, validate

__all__ = ["UpdateFileError", "UpdateBatch", "read_update_file", "FORMATS"]


def read_update_file(
    path: str,
    *,
    fmt: str | None = None,
    schema: pa.Schema | None = None,
    d: int | None = None,
    time: tuple[int, ...] | str | None = None,
    null: str | None = None,
) -> UpdateBatch:
    """Read and validate one update file; raise ``UpdateFileError`` on any problem.

    ``schema`` and ``d`` describe an existing trace (the file must fit them); without them
    the types and the time dimension are inferred. ``time`` stamps every row of a file that
    has no time column. ``null`` is the text a CSV file writes for null (see storage/files/nulls.py).
    """
    path = os.fspath(path)
    fmt = choose_format(path, fmt)
    problem = limits.regular_file_problem(path)  # a FIFO would block the read forever
    if problem:
        raise UpdateFileError(path, problem)
    if d is not None and (not isinstance(d, int) or d < 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    buf = read_bytes(path)
    digest = hashlib.sha256(memoryview(buf)).hexdigest()
    if buf.size == 0:
        raise UpdateFileError(path, "empty file (0 bytes, no rows)")

    if fmt == "csv":
        src: Source = CsvSource(path, buf)
    elif fmt == "jsonl":
        src = JsonSource(path, buf)
    else:
        src = ParquetSource(path, buf)
    table = src.read()
    if fmt == "csv":
        from storage.files.nulls import apply_null_marker
        table = apply_null_marker(table, null)
    return validate(src, table, digest, schema=schema, d=d, time=time)
