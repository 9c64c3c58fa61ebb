"""The three readers of update files (CSV, JSON Lines, Parquet): a file's bytes, streamed
(storage/files/streams.py), to an Arrow table of its own columns, with every parse problem
said as one ``UpdateFileError``.

Files are read in blocks, never whole: a line (or a Parquet text value) longer than
``DDCLI_MAX_LINE_BYTES`` is refused where it is met, and every block read is charged to
the ingest's :class:`storage.files.limits.ReadBudget`. CSV arrives as text columns (types are
decided by ``storage/files/validate.py``). JSON Lines and Parquet keep their own types;
the blocks of a JSON Lines file are typed one by one and then unified (an integer column
with a decimal further on becomes double, as in one read). Each source can also say what
a row held as the user wrote it (``raw``) and where bytes are not UTF-8, reading the file
again: those are error paths.
"""

from __future__ import annotations

import json
import os
import re
import traceback
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from storage.errors import UpdateFileError, one_line
from storage.files import limits
from storage.files.column_types import type_text
from storage.files.locations import UpdateObject
from storage.files.messages import first_index, show
from storage.files.streams import ByteStream, local_parquet, open_stream, without_compression

FORMATS = ("csv", "jsonl", "parquet")
_EXTENSIONS = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_MAX_OPENINGS = 1_000  # brackets a JSON line may hold before its nesting is checked
_PANDAS_INDEX = re.compile(r"__index_level_\d+__\Z")
_UTF8_PIECE = 1 << 20


def choose_format(path: str, fmt: str | None) -> str:
    """``fmt`` if given, else the format the extension says (``a.csv.gz`` is CSV)."""
    if fmt is not None:
        f = fmt.lower()
        if f in ("json", "ndjson"):
            f = "jsonl"
        if f == "pq":
            f = "parquet"
        if f not in FORMATS:
            raise UpdateFileError(path, f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        return f
    ext = os.path.splitext(without_compression(path))[1].lower()
    if ext in _EXTENSIONS:
        return _EXTENSIONS[ext]
    raise UpdateFileError(
        path,
        f"cannot tell the format from the extension {ext or '(none)'!r}; "
        "use .csv, .jsonl/.ndjson/.json or .parquet/.pq (optionally compressed: .gz, .zst), "
        "or give --format csv|jsonl|parquet",
    )


class Source:
    fmt = ""
    text = False  # every column arrives as text (CSV)
    rows_read = 0  # data rows read so far: where a line too long starts

    def __init__(self, obj: UpdateObject, budget: limits.ReadBudget, types: dict | None = None):
        self.obj = obj
        self.path = obj.url
        self.budget = budget
        self.types = dict(types or {})  # column -> the type asked for (storage/files/column_types.py)
        self.line_limit = limits.max_line_bytes()
        self.sha256 = ""  # of the file's stored bytes, once read
        # out of core (storage/files/read.py, read_update_chunks): every ``chunk_bytes`` read
        # are handed to ``on_chunk`` instead of held; ``row_offset`` numbers a chunk's rows in the file
        self.on_chunk = None
        self.chunk_bytes = 0
        self.row_offset = 0

    def hold(self, held: list, part) -> None:
        """Keep a block (record batch or table) read, charged to the budget; out of core,
        hand the blocks on once they make a chunk."""
        self.budget.take(part.nbytes, self.path)
        held.append(part)
        if self.on_chunk is not None and sum(p.nbytes for p in held) >= self.chunk_bytes:
            self.on_chunk(list(held))
            self.budget.give_back(sum(p.nbytes for p in held))
            held.clear()

    def fail(self, detail: str, *, row: int | None = None, column: str | None = None) -> UpdateFileError:
        return UpdateFileError(self.path, detail, row=None if row is None else row + self.row_offset, column=column)

    def read(self) -> pa.Table:
        raise NotImplementedError

    def assemble(self, parts: list) -> pa.Table:
        """The blocks of a chunk as one table."""
        return pa.Table.from_batches(parts)

    def raw(self, table: pa.Table, name: str, i: int):
        """The value of row ``i`` (0-based) of column ``name`` as the user wrote it."""
        return table.column(name)[i].as_py()

    def utf8_error(self) -> UpdateFileError | None:
        """Where the first invalid UTF-8 byte is (error path only: the file is read again)."""
        offset, line, carry = 0, 1, b""
        with open_stream(self.obj) as stream:
            for piece in stream.pieces(_UTF8_PIECE):
                data, carry = carry + piece, b""
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError as e:
                    if e.reason != "unexpected end of data":
                        return self._bad_utf8(data, e.start, offset, line)
                    data, carry = data[:e.start], data[e.start:]  # a character cut by the piece
                line += data.count(b"\n")
                offset += len(data)
        return self._bad_utf8(carry, 0, offset, line) if carry else None

    def _bad_utf8(self, data: bytes, start: int, offset: int, line: int) -> UpdateFileError:
        line += data.count(b"\n", 0, start)
        bad = data[start:start + 4]
        return self.fail(f"line {line} (byte offset {offset + start}): invalid UTF-8 bytes {bad!r}; "
                         f"save the file as UTF-8")


class CsvSource(Source):
    fmt = "csv"
    text = True
    # a quote may hide a newline inside a value: pyarrow's quote-aware chunking, always
    # (measured: under 1.3x the plain read)
    _PARSE = pacsv.ParseOptions(newlines_in_values=True)

    def read(self) -> pa.Table:
        with open_stream(self.obj) as stream:
            head = stream.head(self.line_limit + 1)
            if not head:
                raise self.fail("empty file (0 bytes, no rows)")
            problem = limits.too_many_columns(head.split(b"\n", 1)[0].count(b",") + 1)
            if problem:
                raise self.fail(problem)
            failure = None
            try:
                reader = self._reader(stream, self._header(head))
                batches = self._batches(reader)
            except pa.ArrowInvalid as e:
                failure = self._explain(str(e), stream)
            except UnicodeDecodeError:
                failure = self.utf8_error() or self.fail("invalid UTF-8")
            except BaseException as e:  # a refusal of ours (a line too long, the memory budget), an interrupt
                traceback.clear_frames(e.__traceback__)  # (their variables hold the failed reader)
                failure = e
            finally:
                stream.stop()  # pyarrow's read-ahead thread must be out of the stream before we go on
            if failure is not None:  # and must have let go of it: else it may do so as the process exits
                reader = None
                stream.wait_released()
                raise failure
            self.sha256 = stream.finish()
            quotes = stream.quotes
            schema, reader = reader.schema, None
            # read to the end, pyarrow lets go of the stream; until it has, its read-ahead
            # thread may still call into Python, and a process exiting then (an ingest
            # with nothing new exits at once) aborts
            stream.wait_released(tail=0)
        table = pa.Table.from_batches(batches, schema=schema)
        if quotes % 2:
            raise self._unbalanced(table)
        return table

    def _header(self, head: bytes) -> list[str]:
        first = head.find(b"\n") + 1
        if not first and len(head) > self.line_limit:
            raise self.fail(limits.too_long("the header line", self.line_limit))
        # whole lines only (a cut line would look like a short row); a quote in the first
        # line may hide a newline, so then every whole line of the head
        end = head.rfind(b"\n") + 1 if b'"' in head[:first] else first
        head = head[:end] or head
        reader = pacsv.open_csv(pa.BufferReader(head), parse_options=self._PARSE,
                                read_options=pacsv.ReadOptions(block_size=len(head) + 1, use_threads=False))
        names = list(reader.schema.names)
        check_unique(self, names)
        return names

    def _reader(self, stream: ByteStream, names: list[str]):
        """pyarrow's streaming reader without parsing threads (its read-ahead thread still
        calls the stream: :meth:`ByteStream.stop`): rows are numbered in its errors, and
        text columns cost nothing to convert (measured: as fast as with threads)."""
        conv = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, null_values=[],
                                    strings_can_be_null=False, quoted_strings_can_be_null=False)
        return pacsv.open_csv(stream.python_file(), parse_options=self._PARSE, convert_options=conv,
                              read_options=pacsv.ReadOptions(block_size=self.line_limit, use_threads=False))

    def _batches(self, reader) -> list[pa.RecordBatch]:
        out = []
        for batch in reader:
            self._check_lines(batch, self.rows_read)
            self.rows_read += batch.num_rows
            self.hold(out, batch)
        return out

    def _check_lines(self, batch: pa.RecordBatch, rows: int) -> None:
        """A line longer than the limit that still fit pyarrow's two blocks: refused too."""
        if batch.nbytes <= self.line_limit or not batch.num_columns:
            return
        length = pc.binary_length(batch.column(0))
        for col in batch.columns[1:]:
            length = pc.add(length, pc.binary_length(col))
        i = first_index(pc.greater(length, self.line_limit - batch.num_columns + 1))
        if i is not None:
            raise self.fail(limits.too_long("the line", self.line_limit), row=rows + i + 1)

    def _explain(self, msg: str, stream: ByteStream) -> UpdateFileError:
        if "Empty CSV" in msg:
            return self.fail("empty file (no header, no rows)")
        if "UTF8" in msg or "UTF-8" in msg:
            return self.utf8_error() or self.fail(msg)
        if "straddl" in msg:
            row = self.rows_read + 1
            if stream.quotes % 2:
                return self.fail(f"a quoted value opened here is not closed within "
                                 f"{limits.show_size(self.line_limit)} (DDCLI_MAX_LINE_BYTES); check the quoting",
                                 row=row)
            return self.fail(limits.too_long("the line", self.line_limit), row=row)
        if "CSV parse error" in msg:
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

    def __init__(self, obj: UpdateObject, budget: limits.ReadBudget, types: dict | None = None):
        super().__init__(obj, budget, types)
        self._lines: list[tuple[int, bytes]] | None = None

    def read(self) -> pa.Table:
        tables = []
        with open_stream(self.obj) as stream:
            head = stream.head(self.line_limit + 1)
            if not head:
                raise self.fail("empty file (0 bytes, no rows)")
            self._check_width(head)
            for line, piece in self._pieces(stream):
                self._check_nesting(piece, line)
                table = self._parse(piece, self.rows_read)
                if table is not None:
                    self.rows_read += table.num_rows
                    self.hold(tables, table)
            self.sha256 = stream.finish()
        if not tables and not self.rows_read:
            raise self.fail("empty file (no rows)")
        return self.assemble(tables) if tables else pa.table({})

    def assemble(self, tables: list) -> pa.Table:
        try:
            table = pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise (self._locate() or self.fail(f"not valid JSON Lines: {one_line(str(e))}")) from None
        try:
            table.validate(full=True)  # pyarrow's JSON reader does not check UTF-8 itself
        except pa.ArrowInvalid as e:
            raise (self.utf8_error() or self.fail(f"invalid data: {e}")) from None
        check_unique(self, table.column_names)
        return table

    def _pieces(self, stream: ByteStream) -> Iterator[tuple[int, bytes]]:
        """The file as pieces of whole lines, each at most twice the line limit, with the
        number of its first line; a line longer than the limit is refused as soon as it
        passes it."""
        limit, carry, lines = self.line_limit, b"", 0
        for data in stream.pieces(limit):
            first = data.find(b"\n")
            if first < 0 or len(carry) + first > limit:
                carry += data
                if len(carry) > limit:
                    raise self.fail(f"line {lines + 1}: " + limits.too_long("the line", limit))
                continue
            last = data.rfind(b"\n")
            piece, carry = carry + data[:last + 1], data[last + 1:]
            yield lines + 1, piece
            lines += piece.count(b"\n")
        if carry.strip():
            yield lines + 1, carry

    def _check_nesting(self, piece: bytes, first_line: int) -> None:
        """pyarrow's JSON parser recurses once per level of nesting and crashes the process
        some thousands of levels deep: a line with many brackets is parsed by Python's
        json first (which stops at its recursion limit, about 1,000 levels)."""
        data = np.frombuffer(piece, dtype=np.uint8)
        opening = np.flatnonzero((data == ord("[")) | (data == ord("{")))
        if len(opening) <= _MAX_OPENINGS:
            return
        ends = np.flatnonzero(data == ord("\n"))
        per_line = np.bincount(np.searchsorted(ends, opening))
        for i in np.flatnonzero(per_line > _MAX_OPENINGS):
            start = int(ends[i - 1]) + 1 if i else 0
            end = int(ends[i]) if i < len(ends) else len(piece)
            try:
                json.loads(piece[start:end])
            except RecursionError:
                raise self._too_deep(first_line + int(i)) from None
            except ValueError:
                pass  # the parser names it

    def _too_deep(self, lineno: int) -> UpdateFileError:
        return self.fail(f"line {lineno}: values nested too deeply to read; data columns must be flat "
                         f"(numbers, text, booleans, dates, times)")

    def _parse(self, piece: bytes, rows_before: int) -> pa.Table | None:
        block = 1 << 22
        # decimals asked for are parsed from the numbers' text, never through a double
        decimals = pa.schema([(c, t) for c, t in self.types.items() if pa.types.is_decimal(t)])
        parse = pajson.ParseOptions(explicit_schema=decimals) if len(decimals) else None
        while True:
            try:
                table = pajson.read_json(pa.py_buffer(piece), read_options=pajson.ReadOptions(block_size=block),
                                         parse_options=parse)
                return table if parse is None else self._in_file_order(table, piece)
            except pa.ArrowInvalid as e:
                msg = str(e)
                if parse is not None and "straddl" not in msg:
                    bad = self._bad_decimal(piece, decimals, rows_before)
                    if bad is not None:
                        raise bad from None
                if "straddl" in msg and block < len(piece) + 1:
                    block *= 4  # a line longer than a block: retry with bigger blocks
                    continue
                if "Empty JSON" in msg:
                    return None  # blank lines only
                raise (self._locate() or self.fail(f"not valid JSON Lines: {msg}")) from None
            except UnicodeDecodeError:
                raise (self.utf8_error() or self.fail("invalid UTF-8")) from None

    @staticmethod
    def _in_file_order(table: pa.Table, piece: bytes) -> pa.Table:
        """The columns in the order the first record writes them (an explicit schema puts
        its columns first; the first column is the default key)."""
        first = next((line for line in piece.split(b"\n") if line.strip()), b"{}")
        try:
            keys = list(json.loads(first, parse_float=str, parse_int=str))
        except (ValueError, RecursionError, TypeError):
            return table
        order = [k for k in keys if k in table.column_names]
        return table.select(order + [c for c in table.column_names if c not in order])

    def _bad_decimal(self, piece: bytes, decimals: pa.Schema, rows_before: int) -> UpdateFileError | None:
        """The first value of a decimal column asked for that does not fit it (error path)."""
        row = rows_before
        for line in piece.split(b"\n"):
            if not line.strip():
                continue
            row += 1
            try:
                obj = json.loads(line, parse_int=_RawNumber, parse_float=_RawNumber, parse_constant=_RawNumber)
            except (ValueError, RecursionError):
                return None  # not JSON: the parser's own message says so
            for f in decimals:
                v = obj.get(f.name) if isinstance(obj, dict) else None
                if v is None:
                    continue
                try:
                    pc.cast(pa.array([str(v)]), f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    return self.fail(f"{show(v)} is not a valid {type_text(f.type)}", row=row, column=f.name)
        return None

    def _check_width(self, head: bytes) -> None:
        """Count the keys of the first record before pyarrow parses them all."""
        try:
            first = json.loads(head.lstrip().split(b"\n", 1)[0])
        except (ValueError, RecursionError):
            return  # the parser names the bad line
        if isinstance(first, dict):
            problem = limits.too_many_columns(len(first))
            if problem:
                raise self.fail(problem)

    def records(self) -> Iterator[tuple[int, bytes]]:
        """(line number, text) of each non-blank line, read again from the file."""
        with open_stream(self.obj) as stream:
            lineno = 0
            for _, piece in self._pieces(stream):
                parts = piece.split(b"\n")
                if piece.endswith(b"\n"):
                    parts.pop()
                for text in parts:
                    lineno += 1
                    if text.strip():
                        yield lineno, text

    def lines(self) -> list[tuple[int, bytes]]:
        """Every record (error path only, once the whole file was read within the budget)."""
        if self._lines is None:
            self._lines = list(self.records())
        return self._lines

    def _locate(self) -> UpdateFileError | None:
        """Find the line pyarrow choked on; its row numbers are per block, so re-scan here."""
        bad = self.utf8_error()
        if bad is not None:
            return bad
        kinds: dict[str, str] = {}
        for row, (lineno, text) in enumerate(self.records(), 1):
            if row == 1 and text.lstrip()[:1] == b"[":
                return self.fail("is a JSON array; write JSON Lines instead (one object per line), or name it .csv/.parquet")
            try:
                obj = json.loads(text, object_pairs_hook=_pairs_no_dup)
            except _DuplicateKey as e:
                return self.fail(f"line {lineno}: key {e.args[0]!r} appears twice in one object")
            except ValueError as e:
                return self.fail(f"line {lineno}: invalid JSON ({e.msg} at character {e.pos + 1}): {show(text.decode())}")
            except RecursionError:
                return self._too_deep(lineno)
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
        i += self.row_offset
        if i < len(lines):
            try:
                obj = json.loads(lines[i][1], parse_int=_RawNumber, parse_float=_RawNumber, parse_constant=_RawNumber)
                r = obj.get(name) if isinstance(obj, dict) else None
                if isinstance(r, _RawNumber):
                    return r
            except (ValueError, RecursionError):
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
        with local_parquet(self.obj, self.budget.room(), self._too_big) as (path, self.sha256):
            if os.path.getsize(path) == 0:
                raise self.fail("empty file (0 bytes, no rows)")
            try:
                pf = pq.ParquetFile(path)
            except (pa.ArrowException, OSError) as e:
                raise self.fail(f"not a readable Parquet file ({one_line(str(e))[:200]})") from None
            with pf:
                return self._read_batches(pf)

    def _too_big(self, size: int) -> UpdateFileError:
        """A Parquet file is read whole: one bigger than the memory left is refused unread
        (a plain local one is then read out of core, up to :data:`limits.OUT_OF_CORE` times
        the budget)."""
        if self.on_chunk is not None:
            return self.fail(f"the Parquet file is at least {limits.show_size(size)}, more than the "
                             f"{limits.show_size(self.budget.limit)} ({limits.OUT_OF_CORE} x DDCLI_INGEST_MEMORY) an "
                             f"ingest reads out of core; ingest it in smaller parts, or raise DDCLI_INGEST_MEMORY")
        plain = not self.obj.on_s3 and without_compression(self.path) == self.path
        return (limits.OverBudget if plain else UpdateFileError)(
            self.path, f"the Parquet file is at least {limits.show_size(size)}, more than the "
                       f"{limits.show_size(self.budget.room())} of DDCLI_INGEST_MEMORY left for the updates of "
                       f"this ingest; ingest it in smaller parts, or raise DDCLI_INGEST_MEMORY")

    def _read_batches(self, pf: pq.ParquetFile) -> pa.Table:
        problem = limits.too_many_columns(pf.metadata.num_columns)
        if problem:
            raise self.fail(problem)
        names = list(pf.schema_arrow.names)
        check_unique(self, names)
        keep = [n for n in names if not _PANDAS_INDEX.match(n)]
        meta = pf.metadata
        # a few compressed bytes may decode to gigabytes: refuse before decoding them
        size, batch_rows = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)), 65_536
        if self.on_chunk is None:
            self.budget.check(size, self.path)
        elif meta.num_rows:  # batches of a few per chunk
            batch_rows = int(min(batch_rows, max(1_024, self.chunk_bytes * meta.num_rows // max(size, 1) // 4)))
        batches, rows = [], 0
        try:
            for batch in pf.iter_batches(batch_size=batch_rows, columns=keep, use_threads=True):
                self._check_values(batch, rows)
                rows += batch.num_rows
                self.hold(batches, batch)
            schema = pa.schema([pf.schema_arrow.field(n) for n in keep])
            return pa.Table.from_batches(batches, schema=batches[0].schema if batches else schema)
        except (pa.ArrowException, OSError) as e:
            raise self.fail(f"cannot read Parquet data ({one_line(str(e))[:200]})") from None

    def _check_values(self, batch: pa.RecordBatch, rows: int) -> None:
        """Text and binary values are held whole: refuse one longer than the line limit."""
        if batch.nbytes <= self.line_limit:
            return
        for name, col in zip(batch.schema.names, batch.columns):
            t = col.type
            if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                    or pa.types.is_large_binary(t)):
                continue
            i = first_index(pc.greater(pc.binary_length(col), self.line_limit))
            if i is not None:
                raise self.fail(limits.too_long("the value", self.line_limit), row=rows + i + 1, column=name)


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
