"""The three readers of update files (CSV, JSON Lines, Parquet): bytes to an Arrow table
of the file's own columns, with every parse problem said as one ``UpdateFileError``.

CSV arrives as text columns (types are decided by ``storage/files/validate.py``); JSON
Lines and Parquet keep their own types. Each source can also say what a row held as the
user wrote it (``raw``), for messages.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from storage.errors import UpdateFileError, one_line
from storage.files import limits
from storage.files.messages import first_index, show

FORMATS = ("csv", "jsonl", "parquet")
_EXTENSIONS = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_PANDAS_INDEX = re.compile(r"__index_level_\d+__\Z")


def choose_format(path: str, fmt: str | None) -> str:
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


def read_bytes(path: str) -> pa.Buffer:
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


class Source:
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


class CsvSource(Source):
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
        check_unique(self, names)
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
                    f"expected {m.group(2)} fields like the header, got {m.group(3)}: {show(text)}{hint}", row=row
                )
            m = re.search(r"Expected (\d+) columns, got (\d+): ?(.*)", msg, re.S)
            if m:
                return self.fail(f"expected {m.group(1)} fields like the header, got {m.group(2)}: {show(m.group(3))}")
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
                        f"a quoted value is never closed (it swallows the rest of the file): {show(v)}",
                        row=n,
                        column=name,
                    )
            for name in table.column_names:
                i = first_index(pc.match_substring(table.column(name), '"'))
                if i is not None:
                    return self.fail(
                        f"stray quote character in {show(table.column(name)[i].as_py())}; "
                        'quote the whole value and double inner quotes ("")',
                        row=i + 1,
                        column=name,
                    )
        return self.fail('unbalanced quote characters (") in the file; check the quoting')


class JsonSource(Source):
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
        check_unique(self, table.column_names)
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
                return self.fail(f"line {lineno}: invalid JSON ({e.msg} at character {e.pos + 1}): {show(text.decode())}")
            if not isinstance(obj, dict):
                return self.fail(f"line {lineno}: expected one JSON object per line, got {show(text.decode())}")
            for k, v in obj.items():
                kind = _json_kind(v)
                if kind is None:
                    continue
                prev = kinds.setdefault(k, kind)
                if prev != kind:
                    return self.fail(
                        f"{show(v)} is a {kind} but earlier rows have a {prev} (line {lineno})",
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


class ParquetSource(Source):
    fmt = "parquet"

    def read(self) -> pa.Table:
        try:
            pf = pq.ParquetFile(pa.BufferReader(self.buf))
            problem = limits.too_many_columns(pf.metadata.num_columns)
            if problem:
                raise self.fail(problem)
            names = list(pf.schema_arrow.names)
        except (pa.ArrowException, OSError) as e:
            raise self.fail(f"not a readable Parquet file ({one_line(str(e))[:200]})") from None
        check_unique(self, names)
        keep = [n for n in names if not _PANDAS_INDEX.match(n)]
        try:
            table = pf.read(columns=keep if len(keep) != len(names) else None, use_threads=True)
        except (pa.ArrowException, OSError) as e:
            raise self.fail(f"cannot read Parquet data ({one_line(str(e))[:200]})") from None
        return table


def check_unique(src: Source, names: list[str]) -> None:
    """Spark and DuckDB match column names case-insensitively, so 'a' and 'A' collide."""
    seen: dict[str, str] = {}
    for n in names:
        key = n.lower()
        if key in seen:
            same = "" if seen[key] == n else f" (as {seen[key]!r}; names are case-insensitive)"
            where = " in the header" if src.fmt == "csv" else ""
            raise src.fail(f"column {n!r} appears twice{where}{same}")
        seen[key] = n
