"""Read one update file (CSV, JSON Lines, Parquet) into validated Arrow columns.

Everything a user can get wrong in a file is caught here, before anything is written, and
reported as one line naming the file, the row and the value (``UpdateFileError``).

Row numbers in messages are 1-based *data* rows: the header of a CSV file is not counted,
and for JSON Lines blank lines are not counted (``line N`` is used where the problem is
the text of a line itself, e.g. invalid JSON or invalid UTF-8).

The success path is columnar (pyarrow readers and ``pyarrow.compute``); Python loops over
rows only run after a vectorised check has already found a problem, to say where it is.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from storage import limits
from storage.lattice import INT64_MAX, TimeSyntaxError, format_time, parse_time, time_columns

__all__ = ["UpdateFileError", "UpdateBatch", "read_update_file", "FORMATS"]

FORMATS = ("csv", "jsonl", "parquet")
_EXTENSIONS = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TIME_NAME = re.compile(r"time_(\d+)\Z", re.IGNORECASE)
_PANDAS_INDEX = re.compile(r"__index_level_\d+__\Z")
_INT_TEXT = re.compile(r"\s*[+-]?\d+\s*\Z")
_FLOAT_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|nan|inf|infinity)\s*\Z", re.I)
_MAX_SHOWN = 60


class UpdateFileError(ValueError):
    """A user error in an update file: one line naming the file, the row and the value."""

    def __init__(self, path: str, detail: str, *, row: int | None = None, column: str | None = None):
        self.path = path
        self.row = row  # 1-based data row, when the problem is in one row
        self.column = column
        where = []
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column}")
        prefix = f"{path}: " + (", ".join(where) + ": " if where else "")
        super().__init__(_one_line(prefix + detail))


@dataclass
class UpdateBatch:
    path: str
    data: pa.Table  # only the data columns, in the order of `schema` if one was given
    times: list[np.ndarray]  # one int64 array per time coordinate (len d)
    diff: np.ndarray  # int64
    d: int
    sha256: str  # hex digest of the file's bytes

    @property
    def num_rows(self) -> int:
        return self.data.num_rows


# ---------------------------------------------------------------- entry point


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
    has no time column. ``null`` is the text a CSV file writes for null (see storage/nulls.py).
    """
    path = os.fspath(path)
    fmt = _choose_format(path, fmt)
    problem = limits.regular_file_problem(path)  # a FIFO would block the read forever
    if problem:
        raise UpdateFileError(path, problem)
    if d is not None and (not isinstance(d, int) or d < 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    buf = _read_bytes(path)
    digest = hashlib.sha256(memoryview(buf)).hexdigest()
    if buf.size == 0:
        raise UpdateFileError(path, "empty file (0 bytes, no rows)")

    if fmt == "csv":
        src: _Source = _CsvSource(path, buf)
    elif fmt == "jsonl":
        src = _JsonSource(path, buf)
    else:
        src = _ParquetSource(path, buf)
    table = src.read()
    if fmt == "csv":
        from storage.nulls import apply_null_marker
        table = apply_null_marker(table, null)
    return _validate(src, table, digest, schema=schema, d=d, time=time)


# ---------------------------------------------------------------- helpers


def _one_line(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= 400 else s[:397] + "..."


def _show(v) -> str:
    """A value as the user wrote it, quoted if text, cut short if long."""
    if isinstance(v, bytes):
        r = repr(v)
    elif isinstance(v, str):
        r = repr(v)
    elif isinstance(v, float):
        r = repr(v)
    else:
        r = str(v)
    if len(r) > _MAX_SHOWN:
        r = r[: _MAX_SHOWN - 4] + "...'" if r[:1] in "'\"" else r[: _MAX_SHOWN - 3] + "..."
    return r


def _choose_format(path: str, fmt: str | None) -> str:
    if fmt is not None:
        f = fmt.lower()
        if f in ("json", "ndjson"):
            f = "jsonl"
        if f == "pq":
            f = "parquet"
        if f not in FORMATS:
            raise UpdateFileError(path, f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        return f
    ext = os.path.splitext(path)[1].lower()
    if ext in _EXTENSIONS:
        return _EXTENSIONS[ext]
    raise UpdateFileError(
        path,
        f"cannot tell the format from the extension {ext or '(none)'!r}; "
        "use .csv, .jsonl/.ndjson/.json or .parquet/.pq, or give --format csv|jsonl|parquet",
    )


def _read_bytes(path: str) -> pa.Buffer:
    """The whole file, memory-mapped: hashed and parsed from the same bytes."""
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(21, "Is a directory")
        if os.path.getsize(path) == 0:
            with open(path, "rb"):
                pass  # still report unreadable files as such
            return pa.py_buffer(b"")
        return pa.memory_map(path, "r").read_buffer()
    except OSError as e:
        raise UpdateFileError(path, f"cannot read the file: {e.strerror or e}") from None
    except pa.ArrowException as e:
        raise UpdateFileError(path, f"cannot read the file: {e}") from None


def _first_index(mask) -> int | None:
    """Index of the first True in a boolean (chunked) array, nulls counting as False."""
    mask = pc.fill_null(mask, False)
    if not pc.any(mask).as_py():
        return None
    return pc.index(mask, True).as_py()


def _first_failure(col, fn) -> int | None:
    """The first row for which ``fn`` (a cast) fails: bisection, O(n) casts in total."""
    lo, hi = 0, len(col)
    try:
        fn(col)
        return None
    except (pa.ArrowException, ValueError, OverflowError):
        pass
    while hi - lo > 16:
        mid = (lo + hi) // 2
        try:
            fn(col.slice(lo, mid - lo))
            lo = mid
        except (pa.ArrowException, ValueError, OverflowError):
            hi = mid
    for i in range(lo, hi):
        try:
            fn(col.slice(i, 1))
        except (pa.ArrowException, ValueError, OverflowError):
            return i
    return None


def _is_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


def _is_stringlike(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t)


def _normalise_type(col):
    """Large/dictionary/view variants become the plain type, so traces compare schemas simply."""
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = col.type
    if _is_stringlike(t) and not pa.types.is_string(t):
        col = col.cast(pa.string())
    elif pa.types.is_large_binary(t):
        col = col.cast(pa.binary())
    return col


def _text_int_prepare(col):
    """Strip blanks and a leading '+' so '+3' and ' 3' parse as integers; '' becomes null."""
    s = pc.utf8_trim_whitespace(col)
    s = pc.replace_substring_regex(s, pattern=r"^\+", replacement="")
    return pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)


def _text_prepare(col, target: pa.DataType):
    s = pc.utf8_trim_whitespace(col)
    if pa.types.is_integer(target):
        s = pc.replace_substring_regex(s, pattern=r"^\+", replacement="")
    return pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)


# ---------------------------------------------------------------- sources


class _Source:
    fmt = ""
    text = False  # every column arrives as text (CSV)

    def __init__(self, path: str, buf: pa.Buffer):
        self.path = path
        self.buf = buf

    def fail(self, detail: str, *, row: int | None = None, column: str | None = None) -> UpdateFileError:
        return UpdateFileError(self.path, detail, row=row, column=column)

    def read(self) -> pa.Table:
        raise NotImplementedError

    def raw(self, table: pa.Table, name: str, i: int):
        """The value of row ``i`` (0-based) of column ``name`` as the user wrote it."""
        return table.column(name)[i].as_py()

    def utf8_error(self) -> UpdateFileError | None:
        """Where the first invalid UTF-8 byte is (error path only)."""
        data = self.buf.to_pybytes()
        try:
            data.decode("utf-8")
            return None
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1
            bad = data[e.start : e.start + 4]
            return self.fail(f"line {line} (byte offset {e.start}): invalid UTF-8 bytes {bad!r}; save the file as UTF-8")


class _CsvSource(_Source):
    fmt = "csv"
    text = True

    def read(self) -> pa.Table:
        # A quote inside a value may hide a newline; only then pay for quote-aware chunking.
        arr = np.frombuffer(self.buf, dtype=np.uint8)
        quotes = int(np.count_nonzero(arr == 34))
        parse = pacsv.ParseOptions(newlines_in_values=quotes > 0)
        first = self.buf.slice(0, min(self.buf.size, limits.MAX_HEADER_BYTES)).to_pybytes().split(b"\n", 1)[0]
        problem = limits.too_many_columns(first.count(b",") + 1)
        if problem:
            raise self.fail(problem)
        block = 1 << 22
        while True:
            try:
                names = self._header(block, parse)
                types = {n: pa.string() for n in names}
                conv = pacsv.ConvertOptions(
                    column_types=types, null_values=[], strings_can_be_null=False, quoted_strings_can_be_null=False
                )
                table = pacsv.read_csv(
                    pa.BufferReader(self.buf),
                    read_options=pacsv.ReadOptions(block_size=block),
                    parse_options=parse,
                    convert_options=conv,
                )
                break
            except pa.ArrowInvalid as e:
                msg = str(e)
                if "straddl" in msg and block < self.buf.size + 1:
                    block *= 4  # a line longer than a block: retry with bigger blocks
                    continue
                raise self._explain(msg, block, parse) from None
            except UnicodeDecodeError:
                raise (self.utf8_error() or self.fail("invalid UTF-8")) from None
        if quotes % 2:
            raise self._unbalanced(table)
        return table

    def _header(self, block, parse) -> list[str]:
        reader = pacsv.open_csv(
            pa.BufferReader(self.buf), read_options=pacsv.ReadOptions(block_size=block, use_threads=False), parse_options=parse
        )
        names = list(reader.schema.names)
        _check_unique(self, names)
        return names

    def _explain(self, msg: str, block: int, parse) -> UpdateFileError:
        if "Empty CSV" in msg:
            return self.fail("empty file (no header, no rows)")
        if "UTF8" in msg or "UTF-8" in msg:
            return self.utf8_error() or self.fail(msg)
        if "CSV parse error" in msg:
            # Threaded parsing does not know line numbers; a serial re-read does.
            try:
                pacsv.read_csv(
                    pa.BufferReader(self.buf),
                    read_options=pacsv.ReadOptions(block_size=block, use_threads=False),
                    parse_options=parse,
                    convert_options=pacsv.ConvertOptions(null_values=[], strings_can_be_null=False),
                )
            except pa.ArrowInvalid as e2:
                msg = str(e2)
            m = re.search(r"Row #(\d+): Expected (\d+) columns, got (\d+): ?(.*)", msg, re.S)
            if m:
                row = int(m.group(1)) - 1
                text = m.group(4)
                hint = " (check the quoting)" if '"' in text else ""
                return self.fail(
                    f"expected {m.group(2)} fields like the header, got {m.group(3)}: {_show(text)}{hint}", row=row
                )
            m = re.search(r"Expected (\d+) columns, got (\d+): ?(.*)", msg, re.S)
            if m:
                return self.fail(f"expected {m.group(1)} fields like the header, got {m.group(2)}: {_show(m.group(3))}")
            return self.fail(f"not valid CSV: {msg}")
        return self.fail(f"cannot parse CSV: {msg}")

    def _unbalanced(self, table: pa.Table) -> UpdateFileError:
        """An odd number of quote characters: a quoted value that never closes, or a stray quote."""
        n = table.num_rows
        if n:
            for name in table.column_names:
                v = table.column(name)[n - 1].as_py()
                if isinstance(v, str) and ("\n" in v or "\r" in v):
                    return self.fail(
                        f"a quoted value is never closed (it swallows the rest of the file): {_show(v)}",
                        row=n,
                        column=name,
                    )
            for name in table.column_names:
                i = _first_index(pc.match_substring(table.column(name), '"'))
                if i is not None:
                    return self.fail(
                        f"stray quote character in {_show(table.column(name)[i].as_py())}; "
                        'quote the whole value and double inner quotes ("")',
                        row=i + 1,
                        column=name,
                    )
        return self.fail('unbalanced quote characters (") in the file; check the quoting')


class _JsonSource(_Source):
    fmt = "jsonl"

    def __init__(self, path, buf):
        super().__init__(path, buf)
        self._lines: list[tuple[int, bytes]] | None = None

    def read(self) -> pa.Table:
        self._check_width()
        block = 1 << 22
        while True:
            try:
                table = pajson.read_json(pa.BufferReader(self.buf), read_options=pajson.ReadOptions(block_size=block))
                break
            except pa.ArrowInvalid as e:
                msg = str(e)
                if "straddl" in msg and block < self.buf.size + 1:
                    block *= 4
                    continue
                if "Empty JSON" in msg:
                    raise self.fail("empty file (no rows)") from None
                raise (self._locate() or self.fail(f"not valid JSON Lines: {msg}")) from None
            except UnicodeDecodeError:
                raise (self.utf8_error() or self.fail("invalid UTF-8")) from None
        try:
            table.validate(full=True)  # pyarrow's JSON reader does not check UTF-8 itself
        except pa.ArrowInvalid as e:
            raise (self.utf8_error() or self.fail(f"invalid data: {e}")) from None
        _check_unique(self, table.column_names)
        return table

    def _check_width(self) -> None:
        """Count the keys of the first record before pyarrow parses them all."""
        head = self.buf.slice(0, min(self.buf.size, limits.MAX_HEADER_BYTES)).to_pybytes().lstrip().split(b"\n", 1)[0]
        try:
            first = json.loads(head)
        except ValueError:
            return  # the parser names the bad line
        if isinstance(first, dict):
            problem = limits.too_many_columns(len(first))
            if problem:
                raise self.fail(problem)

    def lines(self) -> list[tuple[int, bytes]]:
        """(line number, text) of each non-blank line: the records, in order (error path only)."""
        if self._lines is None:
            data = self.buf.to_pybytes()
            self._lines = [(k, ln) for k, ln in enumerate(data.split(b"\n"), 1) if ln.strip()]
        return self._lines

    def _locate(self) -> UpdateFileError | None:
        """Find the line pyarrow choked on; its row numbers are per block, so re-scan here."""
        bad = self.utf8_error()
        if bad is not None:
            return bad
        first = self.buf.to_pybytes().lstrip()[:1]
        if first == b"[":
            return self.fail("is a JSON array; write JSON Lines instead (one object per line), or name it .csv/.parquet")
        kinds: dict[str, str] = {}
        for row, (lineno, text) in enumerate(self.lines(), 1):
            try:
                obj = json.loads(text, object_pairs_hook=_pairs_no_dup)
            except _DuplicateKey as e:
                return self.fail(f"line {lineno}: key {e.args[0]!r} appears twice in one object")
            except ValueError as e:
                return self.fail(f"line {lineno}: invalid JSON ({e.msg} at character {e.pos + 1}): {_show(text.decode())}")
            if not isinstance(obj, dict):
                return self.fail(f"line {lineno}: expected one JSON object per line, got {_show(text.decode())}")
            for k, v in obj.items():
                kind = _json_kind(v)
                if kind is None:
                    continue
                prev = kinds.setdefault(k, kind)
                if prev != kind:
                    return self.fail(
                        f"{_show(v)} is a {kind} but earlier rows have a {prev} (line {lineno})",
                        row=row,
                        column=k,
                    )
        return None

    def raw(self, table: pa.Table, name: str, i: int):
        """Numbers as written: pyarrow has turned big integers into doubles."""
        v = table.column(name)[i].as_py()
        if not isinstance(v, float):
            return v
        lines = self.lines()
        if i < len(lines):
            try:
                obj = json.loads(lines[i][1], parse_int=_RawNumber, parse_float=_RawNumber, parse_constant=_RawNumber)
                r = obj.get(name) if isinstance(obj, dict) else None
                if isinstance(r, _RawNumber):
                    return r
            except ValueError:
                pass
        return v


class _RawNumber(str):
    """A JSON number kept as its text; shown without quotes."""

    def __repr__(self) -> str:
        return str(self)


class _DuplicateKey(ValueError):
    pass


def _pairs_no_dup(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _json_kind(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "object"
    return "array"


class _ParquetSource(_Source):
    fmt = "parquet"

    def read(self) -> pa.Table:
        try:
            pf = pq.ParquetFile(pa.BufferReader(self.buf))
            problem = limits.too_many_columns(pf.metadata.num_columns)
            if problem:
                raise self.fail(problem)
            names = list(pf.schema_arrow.names)
        except (pa.ArrowException, OSError) as e:
            raise self.fail(f"not a readable Parquet file ({_one_line(str(e))[:200]})") from None
        _check_unique(self, names)
        keep = [n for n in names if not _PANDAS_INDEX.match(n)]
        try:
            table = pf.read(columns=keep if len(keep) != len(names) else None, use_threads=True)
        except (pa.ArrowException, OSError) as e:
            raise self.fail(f"cannot read Parquet data ({_one_line(str(e))[:200]})") from None
        return table


def _check_unique(src: _Source, names: list[str]) -> None:
    """Spark and DuckDB match column names case-insensitively, so 'a' and 'A' collide."""
    seen: dict[str, str] = {}
    for n in names:
        key = n.lower()
        if key in seen:
            same = "" if seen[key] == n else f" (as {seen[key]!r}; names are case-insensitive)"
            where = " in the header" if src.fmt == "csv" else ""
            raise src.fail(f"column {n!r} appears twice{where}{same}")
        seen[key] = n


# ---------------------------------------------------------------- validation


def _validate(src: _Source, table: pa.Table, digest: str, *, schema, d, time) -> UpdateBatch:
    names = table.column_names
    if not names:
        raise src.fail("empty file (no rows)")
    if any("\ufffd" in n for n in names):
        bad = src.utf8_error()
        if bad is not None:
            raise bad
    tcols: dict[int, str] = {}
    plain_time = None
    diff_name = None
    data_names: list[str] = []
    for n in names:
        low = n.lower()
        m = _TIME_NAME.match(n)
        if low == "time":
            if n != "time":
                raise src.fail(f"column {n!r}: write the time column as 'time' (lower case)")
            plain_time = n
        elif m:
            if n != f"time_{int(m.group(1))}":
                raise src.fail(f"column {n!r}: time columns are named time_0, time_1, ... (lower case, no leading zeros)")
            tcols[int(m.group(1))] = n
        elif low == "diff":
            if n != "diff":
                raise src.fail(f"column {n!r}: write the diff column as 'diff' (lower case)")
            diff_name = n
        elif low == "count":
            raise src.fail(f"column {n!r}: the name is reserved (query results use it for multiplicities); rename it")
        elif not _IDENT.match(n):
            raise src.fail(f"column {_show(n)}: names must be identifiers ([A-Za-z_][A-Za-z0-9_]*)")
        else:
            data_names.append(n)

    # ---- time columns and dimension
    if plain_time is not None and tcols:
        raise src.fail("has both 'time' and 'time_N' columns; use 'time' for one coordinate or time_0..time_{d-1}")
    if tcols:
        k = len(tcols)
        missing = [f"time_{i}" for i in range(k) if i not in tcols]
        if missing:
            have = ", ".join(tcols[i] for i in sorted(tcols))
            raise src.fail(f"time columns {have} have a gap: {missing[0]} is missing (use time_0..time_{{d-1}})")
        if k == 1:
            raise src.fail("a single time coordinate is named 'time', not 'time_0'")
        file_time_names = [tcols[i] for i in range(k)]
    elif plain_time is not None:
        file_time_names = [plain_time]
    else:
        file_time_names = []

    if file_time_names and time is not None:
        raise src.fail(f"has time column(s) ({', '.join(file_time_names)}) and --time was given too; use one")
    if not file_time_names and time is None:
        raise src.fail("no time column (time or time_0..); give --time")
    if time is not None:
        time = _check_time_option(src, time, d)
        fd = len(time)
    else:
        fd = len(file_time_names)
    if d is not None and fd != d:
        have = ", ".join(file_time_names) if file_time_names else f"--time {format_time(tuple(time))}"
        want = ", ".join(time_columns(d))
        raise src.fail(
            f"times have {fd} coordinate(s) ({have}) but the trace's times have {d} ({want})"
        )

    if not data_names:
        raise src.fail("no data columns; an update needs at least one column besides time and diff")

    # ---- data columns against the trace's schema
    if schema is not None:
        want = list(schema.names)
        have_lower = {n.lower(): n for n in data_names}
        for w in want:
            if w not in data_names:
                other = have_lower.get(w.lower())
                hint = f" (found {other!r}; names are case-sensitive)" if other else ""
                raise src.fail(f"missing column {w!r}; the trace has columns {', '.join(want)}{hint}")
        for n in data_names:
            if n not in want:
                raise src.fail(f"unexpected column {n!r}; the trace has columns {', '.join(want)}")

    n_rows = table.num_rows
    if n_rows == 0:
        raise src.fail("no rows" + (" (header only)" if src.fmt == "csv" else ""))

    # ---- times and diff
    if time is not None:
        times = [np.full(n_rows, c, dtype=np.int64) for c in time]
    else:
        times = [_int64_column(src, table, name, what="time", nonneg=True) for name in file_time_names]
    if diff_name is not None:
        diff = _int64_column(src, table, diff_name, what="diff", nonneg=False)
    else:
        diff = np.ones(n_rows, dtype=np.int64)

    # ---- data values
    cols = []
    fields = []
    if schema is not None:
        for f in schema:
            col = _convert_to(src, table, f.name, f.type)
            cols.append(col)
            fields.append(pa.field(f.name, f.type))
    else:
        for n in data_names:
            col = _infer(src, table, n)
            cols.append(col)
            fields.append(pa.field(n, col.type))
    for f, col in zip(fields, cols):
        problem = limits.type_problem(f.type)
        if problem:
            raise src.fail(problem, column=f.name)
        _check_nan(src, table, f.name, col)
    data = pa.Table.from_arrays(cols, schema=pa.schema(fields))
    return UpdateBatch(path=src.path, data=data, times=times, diff=diff, d=fd, sha256=digest)


def _check_time_option(src: _Source, time, d) -> tuple[int, ...]:
    if isinstance(time, str):
        try:
            time = parse_time(time, d)
        except TimeSyntaxError as e:
            raise src.fail(f"--time: {e}") from None
    try:
        t = tuple(time)
    except TypeError:
        t = (time,)
    for c in t:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise src.fail(f"--time {t!r}: coordinates must be integers")
        if c < 0:
            raise src.fail(f"--time {format_time(tuple(int(x) for x in t))}: times must be >= 0")
        if c > INT64_MAX:
            raise src.fail(f"--time: coordinate {c} does not fit in int64")
    if not t:
        raise src.fail("--time has no coordinates")
    return tuple(int(c) for c in t)


def _int64_column(src: _Source, table: pa.Table, name: str, *, what: str, nonneg: bool) -> np.ndarray:
    """A time or diff column as int64: integers only, in range (times >= 0).

    A blank/null/absent diff means 1, like a file without the column; a time cannot be blank.
    """
    col = _normalise_type(table.column(name))
    t = col.type
    if what == "diff":
        if pa.types.is_null(t):
            return np.ones(len(col), dtype=np.int64)
        if pa.types.is_string(t) and src.text:
            col = pc.if_else(pc.equal(pc.utf8_trim_whitespace(col), ""), pa.scalar("1"), col)
        if col.null_count and (pa.types.is_integer(t) or _is_float(t) or pa.types.is_string(t)):
            col = pc.fill_null(col, pa.scalar("1" if pa.types.is_string(t) else 1, t))
    noun = "times" if what == "time" else "diffs"
    if pa.types.is_string(t):
        if not src.text:
            raise src.fail(f"has type string; {noun} must be integers", column=name)
        prepared = _text_int_prepare(col)
        i = _first_index(pc.is_null(prepared))
        if i is not None:
            raise src.fail(f"empty value; every row needs a {what}", row=i + 1, column=name)
        try:
            out = pc.cast(prepared, pa.int64())
        except pa.ArrowException:
            i = _first_failure(prepared, lambda c: pc.cast(c, pa.int64()))
            v = col[i].as_py() if i is not None else None
            if i is None:
                raise src.fail(f"values are not integers", column=name) from None
            if _INT_TEXT.match(v):
                raise src.fail(f"{_show(v)} does not fit in int64", row=i + 1, column=name) from None
            raise src.fail(f"{_show(v)} is not an integer; {noun} must be integers", row=i + 1, column=name) from None
    elif pa.types.is_null(t):
        raise src.fail(f"is empty (null) in every row; every row needs a {what}", column=name)
    elif pa.types.is_integer(t):
        i = _first_index(pc.is_null(col))
        if i is not None:
            raise src.fail(f"empty value (null); every row needs a {what}", row=i + 1, column=name)
        if t == pa.uint64():
            i = _first_index(pc.greater(col, pa.scalar(INT64_MAX, pa.uint64())))
            if i is not None:
                raise src.fail(f"{col[i].as_py()} does not fit in int64", row=i + 1, column=name)
        out = col.cast(pa.int64())
    elif _is_float(t):
        i = _first_index(pc.is_null(col))
        if i is not None:
            raise src.fail(f"empty value (null); every row needs a {what}", row=i + 1, column=name)
        f = col.cast(pa.float64())
        bad = pc.or_(pc.is_nan(f), pc.not_equal(pc.floor(f), f))
        i = _first_index(bad)
        if i is None:
            big = pc.greater_equal(pc.abs(f), pa.scalar(2.0**63))
            i = _first_index(big)
            if i is not None:
                v = src.raw(table, name, i)
                if isinstance(v, str) and _INT_TEXT.match(v):
                    raise src.fail(f"{_show(v)} does not fit in int64", row=i + 1, column=name)
        if i is None and src.fmt == "jsonl":
            i = _json_first_float_literal(src, table, name)
        if i is None:
            raise src.fail(f"has type {t}; {noun} must be integers", column=name)
        v = src.raw(table, name, i)
        raise src.fail(f"{_show(v)} is not an integer; {noun} must be integers", row=i + 1, column=name)
    else:
        raise src.fail(f"has type {t}; {noun} must be integers", column=name)

    if nonneg:
        i = _first_index(pc.less(out, 0))
        if i is not None:
            raise src.fail(f"{out[i].as_py()} is negative; times must be >= 0", row=i + 1, column=name)
    return np.asarray(out.to_numpy(), dtype=np.int64)


def _json_first_float_literal(src: "_JsonSource", table: pa.Table, name: str) -> int | None:
    """A double column whose values are all integral: find the row written like 2.0 (error path)."""
    for i in range(table.num_rows):
        v = src.raw(table, name, i)
        if isinstance(v, str) and not _INT_TEXT.match(v):
            return i
    return None


# ---- data columns


_INFER_ORDER = (pa.int64(), pa.float64(), pa.bool_(), pa.date32(), pa.timestamp("us"))


def _infer(src: _Source, table: pa.Table, name: str):
    """First ingest: text columns get the narrowest type all values parse as; others keep theirs."""
    col = _normalise_type(table.column(name))
    t = col.type
    if src.text and pa.types.is_string(t):
        prepared = pc.utf8_trim_whitespace(col)
        prepared = pc.if_else(pc.equal(prepared, ""), pa.scalar(None, pa.string()), prepared)
        if prepared.null_count == len(prepared):
            return col  # nothing but blanks: keep as text
        for target in _INFER_ORDER:
            p = _text_int_prepare(col) if pa.types.is_integer(target) else prepared
            try:
                return pc.cast(p, target)
            except pa.ArrowException:
                if target == pa.int64():
                    is_int = pc.match_substring_regex(p, r"^-?[0-9]+$")
                    if pc.all(pc.fill_null(is_int, True)).as_py():
                        i = _first_failure(p, lambda c: pc.cast(c, pa.int64()))
                        raise src.fail(
                            f"{_show(col[i].as_py())} does not fit in int64", row=i + 1, column=name
                        ) from None
        return col
    if pa.types.is_null(t):
        return col.cast(pa.string())  # a column with no values yet: text is the safe guess
    if _is_float(t) and src.fmt == "jsonl":
        # pyarrow reads integers too big for int64 as doubles; refuse rather than round
        f = col.cast(pa.float64())
        cand = pc.and_(pc.greater_equal(pc.abs(f), pa.scalar(2.0**63)), pc.equal(pc.floor(f), f))
        if pc.any(pc.fill_null(cand, False)).as_py():
            idx = pc.indices_nonzero(pc.fill_null(cand, False)).to_pylist()[:1000]
            for i in idx:
                v = src.raw(table, name, i)
                if isinstance(v, str) and _INT_TEXT.match(v):
                    raise src.fail(f"{_show(v)} does not fit in int64", row=i + 1, column=name)
    return col


def _family(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if _is_float(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if _is_stringlike(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "datetime"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_duration(t):
        return "duration"
    return str(t)


_ALLOWED = {
    ("int", "int"),
    ("int", "float"),
    ("int", "decimal"),
    ("float", "float"),
    ("float", "int"),  # safe cast: 2.0 converts, 1.5 is named as the bad row
    ("decimal", "decimal"),
    ("decimal", "float"),
    ("string", "string"),
    ("binary", "binary"),
    ("string", "binary"),
    ("bool", "bool"),
    ("datetime", "datetime"),
    ("time", "time"),
    ("duration", "duration"),
}


def _convert_to(src: _Source, table: pa.Table, name: str, target: pa.DataType):
    """Cast a column to the trace's type, naming the first row that does not fit."""
    col = _normalise_type(table.column(name))
    t = col.type
    if t == target:
        return col
    if pa.types.is_null(t):
        return col.cast(target)
    if pa.types.is_string(t) and _family(target) not in ("string", "binary"):
        # text (CSV, or JSON strings such as dates): parse it
        prepared = _text_prepare(col, target)
        fn = lambda c: pc.cast(c, target)  # noqa: E731
    elif (_family(t), _family(target)) in _ALLOWED or t.equals(target):
        prepared = col
        fn = lambda c: pc.cast(c, target, safe=True)  # noqa: E731
    else:
        raise src.fail(f"has type {t} but the trace's column has type {target}", column=name)
    try:
        return fn(prepared)
    except pa.ArrowNotImplementedError:
        raise src.fail(f"has type {t} but the trace's column has type {target}", column=name) from None
    except (pa.ArrowException, ValueError, OverflowError):
        i = _first_failure(prepared, fn)
        if i is None:
            raise src.fail(f"values do not convert to {target}", column=name) from None
        v = src.raw(table, name, i)
        why = ""
        if pa.types.is_integer(target):
            if isinstance(v, str) and _INT_TEXT.match(v) or isinstance(v, int):
                why = " (out of range)"
            elif isinstance(v, float) and not math.isnan(v) and v == math.floor(v):
                why = " (out of range)"
        raise src.fail(f"{_show(v)} is not a valid {target}{why}", row=i + 1, column=name) from None


def _check_nan(src: _Source, table: pa.Table, name: str, col) -> None:
    """NaN != NaN, so rows holding it would never consolidate away: refuse them."""
    if not _is_float(col.type):
        return
    i = _first_index(pc.is_nan(col))
    if i is not None:
        v = table.column(name)[i].as_py()
        raise src.fail(f"{_show(v)} is not a number (NaN); NaN values cannot be consolidated", row=i + 1, column=name)
