"""Ranges of a layer's first key column, cut from its files' row-group statistics.

Layer files are sorted by key and written in row groups of ``ROW_GROUP_ROWS`` rows with
key statistics (storage/layer.py), so the rows of a range of keys can be read without the
rest: a filter on the first key column skips the row groups it rules out, and a file whose
keys all lie outside the range is not opened at all (a reader of each range that opened
every file would pay files x ranges footers: quadratic in the data). Every row of one key
lands in one range, so work that consolidates or joins by key (a merge of large layers, a
join's tasks in ops/operators/join_direct.py) can take the ranges one at a time, or in
parallel, and hold only one range's rows.
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from storage.blobs.resolve import read_metadata


class FileKeys(NamedTuple):
    """One file's first key column: its row groups' least values and rows, its least and
    greatest value (None: only nulls), and whether it holds nulls."""

    groups: list[tuple[object, int]]
    least: object
    greatest: object
    nulls: bool


def file_keys(files: list[str], kind: pa.DataType, column: str) -> list[FileKeys] | None:
    """Each file's keys, from its footer; None when the column's type (an integer or a
    string) or a file's statistics do not allow ranges."""
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    out = []
    for path in files:
        meta = read_metadata(path)
        index = meta.schema.to_arrow_schema().get_field_index(column)
        if index < 0:
            return None
        groups, least, greatest, nulls = [], None, None, False
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            stats = group.column(index).statistics
            if stats is None or not stats.has_null_count:
                return None
            nulls = nulls or stats.null_count > 0
            if stats.null_count == group.num_rows:
                continue  # only nulls: the first range's
            if not stats.has_min_max:
                return None
            groups.append((stats.min, group.num_rows))
            least = stats.min if least is None else min(least, stats.min)
            greatest = stats.max if greatest is None else max(greatest, stats.max)
        out.append(FileKeys(groups, least, greatest, nulls))
    return out


def range_bounds(keys: list[FileKeys], parts: int) -> list:
    """Up to ``parts - 1`` increasing values that cut the rows of the files ``keys``
    describes into ranges of about equal rows, each row group counted at its least value."""
    groups = sorted((g for f in keys for g in f.groups), key=lambda g: g[0])
    total = sum(rows for _, rows in groups)
    bounds, seen = [], 0
    for least, rows in groups:
        if seen >= total * (len(bounds) + 1) / parts and least > (bounds[-1] if bounds else groups[0][0]):
            bounds.append(least)
            if len(bounds) == parts - 1:
                break
        seen += rows
    return bounds


def files_in_range(keys: list[FileKeys], bounds: list | tuple, i: int) -> list[int]:
    """The indices of the files that may hold rows of range ``i`` (see :func:`range_filter`)."""
    lo = bounds[i - 1] if i > 0 else None
    hi = bounds[i] if i < len(bounds) else None
    return [j for j, f in enumerate(keys)
            if (i == 0 and f.nulls) or (f.least is not None and (lo is None or f.greatest >= lo)
                                        and (hi is None or f.least < hi))]


def range_filter(column: str, bounds: list | tuple, i: int):
    """The rows of range ``i`` of ``bounds``: ``[bounds[i - 1], bounds[i])``, the first
    also every null, the last with no upper bound (a ``pyarrow.compute`` expression; None:
    every row)."""
    if not bounds:
        return None
    key = pc.field(column)
    lo = bounds[i - 1] if i > 0 else None
    hi = bounds[i] if i < len(bounds) else None
    where = None if lo is None else key >= lo
    if hi is not None:
        where = key < hi if where is None else where & (key < hi)
    return where | key.is_null() if i == 0 else where
