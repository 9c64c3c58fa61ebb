"""An update file's table to validated columns: names, types (inferred, or those of an
existing trace), the time columns and ``diff``, as an ``UpdateBatch``.

Everything is checked before anything is written. The success path is columnar
(``pyarrow.compute``); Python loops over rows only run after a vectorised check has
already found a problem, to say where it is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.errors import TimeSyntaxError
from storage.files import limits
from storage.files.column_types import type_text
from storage.files.messages import first_failure, first_index, show
from storage.files.sources import JsonSource, Source
from storage.lake.types import lake_type
from storage.lattice import INT64_MAX, format_time, parse_time, time_columns

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TIME_NAME = re.compile(r"time_(\d+)\Z", re.IGNORECASE)
_INT_TEXT = re.compile(r"\s*[+-]?\d+\s*\Z")
_FLOAT_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|nan|inf|infinity)\s*\Z", re.I)


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


def validate(src: Source, table: pa.Table, digest: str, *, schema, d, time, types=None) -> UpdateBatch:
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
            raise src.fail(f"column {show(n)}: names must be identifiers ([A-Za-z_][A-Za-z0-9_]*)")
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

    types = _requested_types(src, types, data_names)

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
            cols.append(_convert_to(src, table, f.name, f.type))
            fields.append(pa.field(f.name, f.type))
    else:
        for n in data_names:
            col = _convert_to(src, table, n, types[n]) if n in types else _infer(src, table, n)
            if lake_type(col.type) != col.type:  # a type a Delta Lake table holds (storage/lake/types.py)
                col = _convert_to(src, table, n, lake_type(col.type))
            cols.append(col)
            fields.append(pa.field(n, col.type))
    for f, col in zip(fields, cols):
        problem = limits.type_problem(f.type)
        if problem:
            raise src.fail(problem, column=f.name)
    data = pa.Table.from_arrays(cols, schema=pa.schema(fields))
    return UpdateBatch(path=src.path, data=data, times=times, diff=diff, d=fd, sha256=digest)


def _requested_types(src: Source, types: dict | None, data_names: list[str]) -> dict:
    """The column types asked for (``--type``), each naming a column of the file."""
    for c in types or {}:
        if c not in data_names:
            raise src.fail(f"--type names column {c!r}, which the file does not have (columns: {', '.join(data_names)})")
    return dict(types or {})


def _check_time_option(src: Source, time, d) -> tuple[int, ...]:
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


def _int64_column(src: Source, table: pa.Table, name: str, *, what: str, nonneg: bool) -> np.ndarray:
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
        i = first_index(pc.is_null(prepared))
        if i is not None:
            raise src.fail(f"empty value; every row needs a {what}", row=i + 1, column=name)
        try:
            out = pc.cast(prepared, pa.int64())
        except pa.ArrowException:
            i = first_failure(prepared, lambda c: pc.cast(c, pa.int64()))
            v = col[i].as_py() if i is not None else None
            if i is None:
                raise src.fail("values are not integers", column=name) from None
            if _INT_TEXT.match(v):
                raise src.fail(f"{show(v)} does not fit in int64", row=i + 1, column=name) from None
            raise src.fail(f"{show(v)} is not an integer; {noun} must be integers", row=i + 1, column=name) from None
    elif pa.types.is_null(t):
        raise src.fail(f"is empty (null) in every row; every row needs a {what}", column=name)
    elif pa.types.is_integer(t):
        i = first_index(pc.is_null(col))
        if i is not None:
            raise src.fail(f"empty value (null); every row needs a {what}", row=i + 1, column=name)
        if t == pa.uint64():
            i = first_index(pc.greater(col, pa.scalar(INT64_MAX, pa.uint64())))
            if i is not None:
                raise src.fail(f"{col[i].as_py()} does not fit in int64", row=i + 1, column=name)
        out = col.cast(pa.int64())
    elif _is_float(t):
        i = first_index(pc.is_null(col))
        if i is not None:
            raise src.fail(f"empty value (null); every row needs a {what}", row=i + 1, column=name)
        f = col.cast(pa.float64())
        bad = pc.or_(pc.is_nan(f), pc.not_equal(pc.floor(f), f))
        i = first_index(bad)
        if i is None:
            big = pc.greater_equal(pc.abs(f), pa.scalar(2.0**63))
            i = first_index(big)
            if i is not None:
                v = src.raw(table, name, i)
                if isinstance(v, str) and _INT_TEXT.match(v):
                    raise src.fail(f"{show(v)} does not fit in int64", row=i + 1, column=name)
        if i is None and src.fmt == "jsonl":
            i = _json_first_float_literal(src, table, name)
        if i is None:
            raise src.fail(f"has type {t}; {noun} must be integers", column=name)
        v = src.raw(table, name, i)
        raise src.fail(f"{show(v)} is not an integer; {noun} must be integers", row=i + 1, column=name)
    else:
        raise src.fail(f"has type {t}; {noun} must be integers", column=name)

    if nonneg:
        i = first_index(pc.less(out, 0))
        if i is not None:
            raise src.fail(f"{out[i].as_py()} is negative; times must be >= 0", row=i + 1, column=name)
    return np.asarray(out.to_numpy(), dtype=np.int64)


def _json_first_float_literal(src: "JsonSource", table: pa.Table, name: str) -> int | None:
    """A double column whose values are all integral: find the row written like 2.0 (error path)."""
    for i in range(table.num_rows):
        v = src.raw(table, name, i)
        if isinstance(v, str) and not _INT_TEXT.match(v):
            return i
    return None


# ---- data columns


_INFER_ORDER = (pa.int64(), pa.float64(), pa.bool_(), pa.date32(), pa.timestamp("us"))


def _infer(src: Source, table: pa.Table, name: str):
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
                        i = first_failure(p, lambda c: pc.cast(c, pa.int64()))
                        raise src.fail(
                            f"{show(col[i].as_py())} does not fit in int64", row=i + 1, column=name
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
                    raise src.fail(f"{show(v)} does not fit in int64", row=i + 1, column=name)
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


def _convert_to(src: Source, table: pa.Table, name: str, target: pa.DataType):
    """Cast a column to the trace's type, naming the first row that does not fit."""
    col = _normalise_type(table.column(name))
    t = col.type
    if t == target:
        return col
    if pa.types.is_null(t):
        return col.cast(target)
    if pa.types.is_string(t) and _family(target) == "binary" and src.fmt in ("csv", "jsonl"):
        # text files hold binary as hex, as ddcli's CSV and JSON Lines output writes it
        prepared = pc.utf8_trim_whitespace(col)
        fn = lambda c: pc.cast(_from_hex(c), target)  # noqa: E731
    elif pa.types.is_string(t) and _family(target) not in ("string", "binary"):
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
        i = first_failure(prepared, fn)
        if i is None:
            raise src.fail(f"values do not convert to {target}", column=name) from None
        v = src.raw(table, name, i)
        why = ""
        if _family(target) == "binary":
            why = " (text files hold binary as hex)"
        if pa.types.is_timestamp(target) and pa.types.is_timestamp(t) and t.unit == "ns":
            why = " (a trace keeps timestamps to the microsecond, as Spark does)"
        if pa.types.is_integer(target):
            if isinstance(v, str) and _INT_TEXT.match(v) or isinstance(v, int):
                why = " (out of range)"
            elif isinstance(v, float) and not math.isnan(v) and v == math.floor(v):
                why = " (out of range)"
        if pa.types.is_decimal(target):
            raise src.fail(f"{show(v)} is not a valid {type_text(target)}", row=i + 1, column=name) from None
        raise src.fail(f"{show(v)} is not a valid {target}{why}", row=i + 1, column=name) from None


_HEX_DIGITS = np.full(256, 255, np.uint8)  # a byte's value as a hex digit, 255: none
_HEX_DIGITS[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16)
_HEX_DIGITS[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)


def _from_hex(col):
    """Hex text decoded into bytes (nulls stay null); ValueError for anything else."""
    if isinstance(col, pa.ChunkedArray):
        return pa.chunked_array([_from_hex(c) for c in col.chunks], pa.binary())
    valid = pc.is_valid(col)
    col = pc.if_else(valid, col.cast(pa.large_string()), "")  # a null's slot holds no bytes
    offsets = np.frombuffer(col.buffers()[1], np.int64)[col.offset:col.offset + len(col) + 1]
    data = np.frombuffer(col.buffers()[2], np.uint8)[offsets[0]:offsets[-1]] if len(col) else np.zeros(0, np.uint8)
    if np.any(np.diff(offsets) % 2):
        raise ValueError("hex text of odd length")
    high, low = _HEX_DIGITS[data[0::2]], _HEX_DIGITS[data[1::2]]
    if np.any(high == 255) or np.any(low == 255):
        raise ValueError("not hex")
    out = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(col),
                                           [None, pa.py_buffer((offsets - offsets[0]) // 2),
                                            pa.py_buffer((high * 16 + low).astype(np.uint8).tobytes())])
    return pc.if_else(valid, out, pa.scalar(None, pa.large_binary())).cast(pa.binary())


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
