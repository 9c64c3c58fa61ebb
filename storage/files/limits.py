"""What an update file and a trace can hold: limits with numbers, checked before the work.

Hostile or broken files must end in one line within seconds, never in a hang, an
"internal error" or a wrong answer:

* only regular files are read (a FIFO would block ``ingest`` forever);
* at most :data:`MAX_COLUMNS` columns (a 100,000-column CSV took minutes to parse);
* data columns are flat: numbers, text, binary, booleans, dates, times (nested JSON,
  Parquet structs, lists and maps cannot be sorted, compared or summed as rows), and
  not ``float16`` (pyarrow cannot sort it);
* diffs summed by consolidation stay within int64: refused rather than wrapped around.
"""

from __future__ import annotations

import os
import stat

import pyarrow as pa

from storage.errors import DiffOverflow

MAX_COLUMNS = 1_000
MAX_HEADER_BYTES = 16 << 20  # how much of a file is looked at to count its columns
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def regular_file_problem(path: str) -> str | None:
    """Why ``path`` cannot be read as an update file (None if it is a regular file)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # the reader reports a missing or unreadable file itself
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None  # a directory is reported by the reader ("cannot read the file")
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")
    return f"is {kind}; update files must be regular files"


def too_many_columns(count: int) -> str | None:
    if count > MAX_COLUMNS:
        return f"has {count:,} columns; at most {MAX_COLUMNS:,} are allowed"
    return None


def type_problem(t: pa.DataType) -> str | None:
    """Why a data column of type ``t`` cannot be held by a trace (None if it can)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_nested(t):
        return (f"has the nested type {t}; data columns must be flat (numbers, text, booleans, dates, "
                f"times): flatten it into columns or write it as text")
    if pa.types.is_float16(t):
        return "has type float16 (half float), which cannot be sorted; write it as float32 or float64"
    return None


def check_diff_sums(table: pa.Table, group: list[str]) -> None:
    """Raise :class:`DiffOverflow` if the diffs of equal ``group`` values sum beyond int64.

    No sum of ``n`` diffs each at most ``m`` in size can leave int64 when ``n * m`` fits,
    so the exact sums (in decimal128) are only computed when that bound is passed.
    """
    import pyarrow.compute as pc
    if table.num_rows == 0:
        return
    mm = pc.min_max(table.column("diff"))
    biggest = max(abs(mm["min"].as_py()), abs(mm["max"].as_py()))
    if biggest * table.num_rows <= INT64_MAX:
        return
    exact = table.select(group).append_column("diff", pc.cast(table.column("diff"), pa.decimal128(38, 0)))
    sums = exact.group_by(group, use_threads=False).aggregate([("diff", "sum")])
    col = sums.column("diff_sum")
    out = pc.or_(pc.greater(col, pa.scalar(INT64_MAX).cast(col.type)),
                 pc.less(col, pa.scalar(INT64_MIN).cast(col.type)))
    if not pc.any(out).as_py():
        return
    i = pc.index(out, True).as_py()
    row = {c: sums.column(c)[i].as_py() for c in group}
    raise DiffOverflow(f"the diffs of the update {row} sum to {col[i].as_py()}, beyond the int64 range of a "
                       f"diff (±{INT64_MAX:,}); refused rather than wrapped around")
