"""Rendering results: a Rich table for people, CSV / JSON Lines / Parquet for programs.

Every command that prints a collection, a history, a SQL result or a report goes through
:func:`table` or :func:`report`; the output format is ``--format table|csv|jsonl|parquet``
(``--json`` is ``--format jsonl``), written to stdout or to ``--output FILE`` (whose
extension picks the format when ``--format`` is not given), a local path or an
``s3://bucket/key``, replaced whole or left as it was (ddcli/outputs.py). CSV writes null as
``\\N``, what ``ingest`` reads as null (:func:`csv_null`). CSV and JSON Lines keep every
value exactly: a decimal as its exact digits (text, a string in JSON, so that no reader
rounds it to a double), binary always as lower-case hex, which ``ingest`` decodes back into
a trace's binary column.

Progress bars (:func:`progress`) go to stderr and only when stderr is a terminal: a
command run from a scheduler or a pipe prints nothing there but its one-line errors.

Heavy modules (pyarrow) are imported inside functions so ``ddcli --help`` starts fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from enum import Enum
from typing import Callable, Iterator

TABLE_ROWS = 1000  # a terminal table shows at most this many rows, then says how many more


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    jsonl = "jsonl"
    parquet = "parquet"


class RenderError(Exception):
    """A user error in the output options (reported as one line, exit code 2)."""


_EXTENSIONS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
               ".parquet": "parquet", ".pq": "parquet", ".txt": "table"}


def choose_format(fmt: "OutputFormat | str | None", json_flag: bool = False, output: str | None = None,
                  store: str | None = None) -> str:
    """The output format: ``--json``, else ``--format``, else ``--output``'s extension, else table.

    ``output`` is checked first (ddcli/outputs.py), against ``store`` too, the command's
    store, so a target it must not write is refused before the command does any work."""
    f = fmt.value if isinstance(fmt, OutputFormat) else fmt
    check_output(output, store=store)
    if json_flag:
        if f not in (None, "jsonl"):
            raise RenderError(f"--json means --format jsonl; it cannot be combined with --format {f}")
        return "jsonl"
    if f:
        return f
    if output:
        ext = os.path.splitext(output)[1].lower()
        return _EXTENSIONS.get(ext, "table")
    return "table"


def check_output(output: str | None, option: str = "--output", store: str | None = None) -> None:
    """Refuse an output target that cannot be written before the command does any work."""
    from ddcli import outputs
    outputs.check(output, option, store)


# ---------------------------------------------------------------- writing


def _text_out(output: str | None):
    from ddcli import outputs
    return outputs.opened(output)


def _binary_out(output: str | None):
    from ddcli import outputs
    if output is None and sys.stdout.isatty():
        raise RenderError("--format parquet writes binary data: give --output FILE.parquet or redirect stdout")
    return outputs.opened(output, binary=True)


def _json_default(v):
    import decimal
    if isinstance(v, decimal.Decimal):
        return format(v, "f")  # every digit, never an exponent
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def _jsonl(rows, fh) -> None:
    for r in rows:
        fh.write(json.dumps(r, ensure_ascii=False, default=_json_default, separators=(",", ":")))
        fh.write("\n")


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _console(fh):
    from rich.console import Console
    if fh is sys.stdout and sys.stdout.isatty():
        return Console(file=fh, highlight=False)
    # not a terminal: no colours, no wrapping at 80 columns
    return Console(file=fh, width=10_000, no_color=True, highlight=False, color_system=None,
                   force_terminal=False)


def _rich_table(tbl, title: str | None, limit: int | None):
    from rich import box
    from rich.table import Table
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold",
              min_width=len(title or "") + 2)
    import pyarrow as pa
    for f in tbl.schema:
        numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
        t.add_column(f.name, justify="right" if numeric else "left", overflow="fold")
    shown = tbl if limit is None else tbl.slice(0, limit)
    for batch in shown.to_batches():
        cols = [c.to_pylist() for c in batch.columns]
        for row in zip(*cols):
            t.add_row(*[_escape(_cell(v)) for v in row])
    more = tbl.num_rows - shown.num_rows
    n = tbl.num_rows
    caption = f"{n} row{'s' if n != 1 else ''}"
    if more:
        caption += f"; {more} not shown (use --format csv|jsonl|parquet or --output FILE)"
    t.caption = caption
    t.caption_justify = "left"
    return t


def _escape(s: str) -> str:
    from rich.markup import escape
    return escape(s)


def table(tbl, fmt: str, output: str | None = None, *, title: str | None = None,
          kind: str | None = None, every_row: bool = False, null: str | None = None) -> None:
    """Write an Arrow table in ``fmt`` to stdout or ``output`` (a path or an ``s3://`` URL).

    ``kind`` adds a leading ``"kind"`` field to JSON Lines records (used when one stream
    carries several kinds of record, like ``status``). ``every_row``: a terminal table
    shows every row, not the first :data:`TABLE_ROWS` (rows a reader acknowledges).
    ``null`` is the text CSV writes for null (see :func:`csv_null`).
    """
    if fmt != "parquet":
        tbl = _in_python_years(tbl)
    if fmt == "table":
        with _text_out(output) as fh:
            limit = TABLE_ROWS if output is None and not every_row else None
            _console(fh).print(_rich_table(tbl, title, limit))
    elif fmt == "csv":
        import csv
        null = csv_null(tbl, null)
        with _text_out(output) as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(tbl.column_names)
            for batch in tbl.to_batches(max_chunksize=65_536):
                cols = [c.to_pylist() for c in batch.columns]
                w.writerows([null if v is None else _csv_cell(v) for v in row] for row in zip(*cols))
    elif fmt == "jsonl":
        with _text_out(output) as fh:
            for batch in tbl.to_batches(max_chunksize=65_536):
                rows = batch.to_pylist()
                if kind is not None:
                    rows = [{"kind": kind, **r} for r in rows]
                _jsonl(rows, fh)
    elif fmt == "parquet":
        import pyarrow.parquet as pq
        with _binary_out(output) as fh:
            pq.write_table(tbl, fh)
    else:  # pragma: no cover - the option parser only lets the four through
        raise RenderError(f"unknown output format {fmt!r}")


def _in_python_years(tbl):
    """``tbl`` with every timestamp column whose local time in its zone could leave Python's
    years 1 to 9999 (an instant within a day of either end) shown in UTC: the same
    instants, which text output would otherwise fail to print."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, f in enumerate(tbl.schema):
        if not pa.types.is_timestamp(f.type) or f.type.tz in (None, "UTC") or tbl.num_rows == 0:
            continue
        per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[f.type.unit]
        lo, hi = pc.min_max(tbl.column(i).cast(pa.int64())).values()
        if lo.is_valid and (lo.as_py() < _FIRST_SAFE * per_second or hi.as_py() > _LAST_SAFE * per_second):
            utc = pa.timestamp(f.type.unit, "UTC")
            tbl = tbl.set_column(i, pa.field(f.name, utc, f.nullable), tbl.column(i).cast(utc))
    return tbl


_FIRST_SAFE = -62135596800 + 86400  # 0001-01-02T00:00:00Z in seconds since the epoch
_LAST_SAFE = 253402300799 - 86400  # 9999-12-30T23:59:59Z


def csv_null(tbl, null: str | None = None) -> str:
    """The text CSV output writes for null: ``null``, by default ``\\N``, what ``ingest``
    reads as null (storage/files/nulls.py), so ddcli's CSV ingests back with its nulls
    and its empty strings apart. A text value equal to it could not be told from a null:
    refused, naming the column and the way out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from storage.files.nulls import DEFAULT_NULL
    null = DEFAULT_NULL if null is None else null
    for name, col in zip(tbl.column_names, tbl.columns):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            clash = pc.any(pc.equal(col, pa.scalar(null, col.type))).as_py()
        elif pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            clash = _is_hex(null) and pc.any(pc.equal(col, pa.scalar(bytes.fromhex(null), col.type))).as_py()
        else:
            continue
        if clash:
            raise RenderError(f"column {name!r} holds the text {null!r}, which CSV output writes for null; "
                              f"give another null marker with --null STR (and the same to ingest)")
    return null


def _is_hex(text: str) -> bool:
    """``text`` is what CSV output writes for some binary value (lower-case hex)."""
    return len(text) % 2 == 0 and all(c in "0123456789abcdef" for c in text)


def _csv_cell(v):
    """A value as CSV text readers agree on: true/false, ISO dates, exact decimals, hex
    binary, JSON for nested values (null is the caller's: :func:`csv_null`)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=_json_default, ensure_ascii=False)
    return _json_default(v)


def tables(parts: list[tuple[str, object, str]], fmt: str, output: str | None = None) -> None:
    """Several tables in one output: ``(kind, table, title)``.

    A terminal shows one Rich table after another, JSON Lines tags each record with its
    kind; CSV and Parquet hold one table, so they take the first non-empty one.
    """
    if fmt == "table":
        with _text_out(output) as fh:
            con = _console(fh)
            for _, tbl, title in parts:
                con.print(_rich_table(tbl, title, TABLE_ROWS if output is None else None))
    elif fmt == "jsonl":
        with _text_out(output) as fh:
            for kind, tbl, _ in parts:
                rows = [{"kind": kind, **r} for r in tbl.to_pylist()]
                _jsonl(rows, fh)
    else:
        table(parts[0][1], fmt, output)


def report(record: dict, message: str, fmt: str, output: str | None = None) -> None:
    """The result of a command that changes the store: a sentence for people, a record for programs."""
    if fmt == "table":
        text(message, output)
    elif fmt == "jsonl":
        with _text_out(output) as fh:
            _jsonl([record], fh)
    else:
        import pyarrow as pa
        flat = {k: (json.dumps(v, default=_json_default) if isinstance(v, (list, dict)) else v)
                for k, v in record.items()}
        table(pa.Table.from_pylist([flat]), fmt, output)


def text(message: str, output: str | None = None) -> None:
    """Plain lines for people (a sentence, a query plan), ending with one newline."""
    with _text_out(output) as fh:
        fh.write(message.rstrip("\n") + "\n")


def records(rows: list[dict], output: str | None = None) -> None:
    """JSON Lines of records whose values may nest (lists, objects), one record a line."""
    with _text_out(output) as fh:
        _jsonl(rows, fh)


def renderables(items: list, output: str | None = None) -> None:
    """Rich renderables (trees, tables, groups) for people, one after another."""
    with _text_out(output) as fh:
        con = _console(fh)
        for i, item in enumerate(items):
            if i:
                con.print()
            con.print(item)


def error(message: str) -> None:
    """One line on stderr: ``error: ...``."""
    text = " ".join(str(message).split())
    sys.stderr.write(f"error: {text}\n")
    sys.stderr.flush()


def warning(message: str) -> None:
    """One line on stderr: ``warning: ...`` (the command still succeeded)."""
    text = " ".join(str(message).split())
    sys.stderr.write(f"warning: {text}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------- progress


@contextlib.contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[str], None]]:
    """A progress bar on stderr (only on a terminal); yields ``step(label)``.

    The library calls ``step`` when it starts on the next item (a file, a trace), so each
    call first completes the previous item.
    """
    if not sys.stderr.isatty() or os.environ.get("DDCLI_NO_PROGRESS"):
        yield lambda label: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    started = [0]
    with bar:
        task = bar.add_task(what, total=total)

        def step(label: str) -> None:
            if started[0]:
                bar.advance(task)
            started[0] += 1
            bar.update(task, description=f"{what} {os.path.basename(str(label))}")

        yield step
