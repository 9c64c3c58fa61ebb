"""Ranges of a layer's first key column, cut from its files' row-group statistics.

Layer files are sorted by key and written in row groups of ``ROW_GROUP_ROWS`` rows with
key statistics (storage/layer.py), so the rows of a range of keys can be read without the
rest: a filter on the first key column skips the row groups it rules out. Every row of
one key lands in one range, so work that consolidates or joins by key (a merge of large
layers, a join's tasks in ops/operators/join_direct.py) can take the ranges one at a
time, or in parallel, and hold only one range's rows.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from storage.blobs.resolve import read_metadata


def range_bounds(files: list[str], kind: pa.DataType, column: str, parts: int) -> list | None:
    """Up to ``parts - 1`` increasing values of ``column`` that cut the rows of ``files``
    into ranges of about equal rows, each row group counted at its least value; None when
    the column's type (an integer or a string) or a file's statistics do not allow ranges."""
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    groups = []  # (least value, rows) of every row group with a value
    for path in files:
        meta = read_metadata(path)
        index = meta.schema.to_arrow_schema().get_field_index(column)
        if index < 0:
            return None
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            stats = group.column(index).statistics
            if stats is None or not stats.has_null_count:
                return None
            if stats.null_count == group.num_rows:
                continue  # only nulls: the first range's
            if not stats.has_min_max:
                return None
            groups.append((stats.min, group.num_rows))
    groups.sort(key=lambda g: g[0])
    total = sum(rows for _, rows in groups)
    bounds, seen = [], 0
    for least, rows in groups:
        if seen >= total * (len(bounds) + 1) / parts and least > (bounds[-1] if bounds else groups[0][0]):
            bounds.append(least)
            if len(bounds) == parts - 1:
                break
        seen += rows
    return bounds


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
