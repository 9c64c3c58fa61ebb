"""What an update file and a trace can hold: limits with numbers, checked before the work.

Hostile or broken files must end in one line within seconds, never in a hang, an
"internal error" or a wrong answer:

* only regular files are read (a FIFO would block ``ingest`` forever);
* at most :data:`MAX_COLUMNS` columns (a 100,000-column CSV took minutes to parse);
* files are read in blocks, never whole: a line (a CSV row, a JSON record) or a Parquet
  text value longer than ``DDCLI_MAX_LINE_BYTES`` (default 16 MiB) is refused as soon as
  it is met, and the updates one ingest holds in memory are capped by
  ``DDCLI_INGEST_MEMORY`` (default 1 GiB, :class:`ReadBudget`): past it an ingest goes
  out of core (storage/writes/spill.py), holding a chunk at a time, and a 20 GB sparse file
  or a gzip bomb still ends in one line within seconds rather than exhausting the machine;
* data columns are flat: numbers, text, binary, booleans, dates, times (nested JSON,
  Parquet structs, lists and maps cannot be sorted, compared or summed as rows), and
  not ``float16`` (pyarrow cannot sort it);
* diffs summed by consolidation stay within int64: refused rather than wrapped around.
"""

from __future__ import annotations

import os
import re
import stat

import pyarrow as pa

from storage.errors import DiffOverflow, StoreError, UpdateFileError

MAX_COLUMNS = 1_000
DEFAULT_MAX_LINE_BYTES = 16 << 20
DEFAULT_INGEST_MEMORY = 1 << 30  # an ingest peaks at about 7x what it read (typing, sorting, the layer)
OUT_OF_CORE = 16  # the largest Parquet file an ingest reads out of core, in DDCLI_INGEST_MEMORY
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


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


def size_setting(name: str, default: int) -> int:
    """A size in bytes from the environment variable ``name``: ``16m``, ``2g``, ``65536``."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    m = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?", raw)
    value = int(float(m.group(1)) * _SIZE_UNITS.get(m.group(2), 1)) if m else 0
    if value < 1:
        raise StoreError(f"{name}={raw!r} is not a size such as 16m or 2g")
    return value


def max_line_bytes() -> int:
    """The longest line (CSV row, JSON record) or Parquet text value an update file may hold."""
    return size_setting("DDCLI_MAX_LINE_BYTES", DEFAULT_MAX_LINE_BYTES)


def show_size(n: int) -> str:
    """``n`` bytes for a message: 16 MiB, 2 GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def too_long(what: str, limit: int) -> str:
    """Why a line or value is refused: ``what`` is 'the line' or 'the value'."""
    return (f"{what} is longer than {show_size(limit)} (DDCLI_MAX_LINE_BYTES); lines and values must be "
            f"shorter, or raise DDCLI_MAX_LINE_BYTES")


class OverBudget(UpdateFileError):
    """The updates read take more than ``DDCLI_INGEST_MEMORY``: an ingest then reads its
    files again in chunks, out of core (storage/writes/spill.py), where it can."""


class ReadBudget:
    """The bytes of updates one ingest holds in memory while it reads its files.

    Every file is validated whole before anything is written, so what was read stays in
    memory until the layer is written; this caps it (``DDCLI_INGEST_MEMORY``): an input
    too big to hold raises :class:`OverBudget`, and the ingest goes out of core (or, an
    upsert, refuses in one line) instead of running the machine out of memory.
    """

    def __init__(self, limit: int | None = None):
        self.limit = size_setting("DDCLI_INGEST_MEMORY", DEFAULT_INGEST_MEMORY) if limit is None else limit
        self.used = 0

    def take(self, nbytes: int, path: str) -> None:
        self.check(nbytes, path)
        self.used += nbytes

    def check(self, nbytes: int, path: str) -> None:
        """Refuse before reading ``nbytes`` more that would not fit."""
        if self.used + nbytes > self.limit:
            raise OverBudget(path, f"the updates read so far take more than {show_size(self.limit)} "
                                        f"of memory (DDCLI_INGEST_MEMORY); ingest the files in smaller "
                                        f"parts, or raise DDCLI_INGEST_MEMORY")

    def room(self) -> int:
        """The bytes still free."""
        return max(self.limit - self.used, 0)

    def give_back(self, nbytes: int) -> None:
        self.used -= nbytes


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
