"""The options every command shares, and the small steps every command takes.

A command follows one shape: ``@app.command(epilog=EXIT_CODES_HELP)``, options from the
``*Opt`` aliases below, ``out = render.choose_format(fmt, json_, output, store)`` first, heavy
imports inside the body (``ddcli status`` and ``ddcli --help`` start without pyarrow,
DuckDB or pyspark), results through ``render.report``/``render.table``, "nothing to do"
through :func:`finish`.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from ddcli.app import EXIT_NOOP, store_warnings
from ddcli.completion import complete_ingested, complete_pipelines, complete_traces
from ddcli.render import OutputFormat
from storage.settings import BY_KEY

StoreOpt = Annotated[str, typer.Option(
    "--store", envvar="DDCLI_STORE", metavar="PATH", show_default=True,
    help="The store directory (holds the traces).")]
FormatOpt = Annotated[Optional[OutputFormat], typer.Option(
    "--format", "-f", case_sensitive=False, show_default=False,
    help="Output format: table (default), csv, jsonl or parquet.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Shorthand for --format jsonl.")]
OutputOpt = Annotated[Optional[str], typer.Option(
    "--output", "-o", metavar="FILE",
    help="Write the output to FILE or s3://bucket/key, replaced whole (its extension picks the format "
         "unless --format is given).")]
CsvNullOpt = Annotated[Optional[str], typer.Option(
    "--null", metavar="STR",
    help="CSV output: the text written for null [default: \\N, what ingest reads as null; a text "
         "value equal to it is refused]. Give ingest the same --null to read it back.")]
StrictNoopOpt = Annotated[bool, typer.Option(
    "--strict-noop", envvar="DDCLI_STRICT_NOOP",
    help="Exit with code 4 (not 0) when there is nothing to do.")]
TimeFromOpt = Annotated[Optional[str], typer.Option(
    "--time-from", metavar="version|timestamp",
    help="Lake tables: each version's time is its number (version, Iceberg sequence number) "
         "or its commit time in microseconds since 1970 [default: version].")]
MaxVersionsOpt = Annotated[Optional[int], typer.Option(
    "--max-versions", metavar="N", help="Lake tables: take at most N versions (snapshots) now.")]
WhereOpt = Annotated[Optional[str], typer.Option(
    "--where", "-w", metavar="EXPR",
    help="A DuckDB SQL condition on the data columns, e.g. \"word LIKE 'a%'\".")]
HistoryWhereOpt = Annotated[Optional[str], typer.Option(
    "--where", "-w", metavar="EXPR",
    help="A DuckDB SQL condition on the data columns, time (or time_0, ...) and diff of the "
         "consolidated updates, e.g. \"time >= 6 AND diff < 0\".")]
DEFAULT_STORE = BY_KEY["store"].default


def trace_arg(help: str, *, ingested: bool = False):
    """A trace name argument; the shell completes it from the store (``ingested``: only
    the traces no pipeline writes)."""
    return typer.Argument(metavar="TRACE", help=help,
                          autocompletion=complete_ingested if ingested else complete_traces)


def pipeline_arg(help: str):
    """A pipeline name argument; the shell completes it from the store."""
    return typer.Argument(metavar="PIPELINE", help=help, autocompletion=complete_pipelines)


class InputFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"
    parquet = "parquet"


def store_at(path: str):
    """The store at ``path``; what it warns about is printed after the command succeeds."""
    from storage.store import Store
    return Store(path, on_warning=store_warnings.append)


def finish(noop: bool, strict: bool) -> None:
    """Finish a command: "nothing to do" is exit 0, or 4 with --strict-noop."""
    if noop and strict:
        raise typer.Exit(EXIT_NOOP)


def plural(n: int, word: str) -> str:
    """``1 trace``, ``2 traces``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"
