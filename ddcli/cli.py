"""The ``ddcli`` command line: thin Typer commands over ``storage`` (and, later, ``ops``).

Each command parses its arguments, calls one library function and renders the result
(``ddcli/render.py``); everything a command does is callable from Python without it.

Exit codes (also in ``ddcli --help``), for schedulers:

* ``0`` success — including "nothing to do" (a file already ingested, nothing to compact),
  so ``ddcli ingest … && ddcli run …`` chains and quiet cron days stay green;
* ``1`` internal error (a bug): one line on stderr; ``DDCLI_DEBUG=1`` shows the traceback;
* ``2`` user error (bad file, bad time, unknown trace, time not beyond since, bad
  arguments): one line ``error: …`` on stderr naming file, row and value; nothing changed;
* ``3`` conflict: another command changed the store at the same time; nothing was
  written by this one and it is safe to run it again;
* ``4`` nothing to do, only with ``--strict-noop`` (or ``DDCLI_STRICT_NOOP=1``): for a
  scheduler that wants to skip downstream work, e.g. Airflow's
  ``BashOperator(..., skip_on_exit_code=4)``;
* ``5`` the store is damaged (a layer file missing or not what the log recorded, an
  unreadable metadata version): retrying cannot help; ``ddcli check`` lists the damage.

Importing this module imports neither pyspark nor pyarrow nor duckdb: commands import
what they use, so ``ddcli status`` and ``ddcli --help`` start fast. A command added later
(``run``, ``verify``) follows the same shape: ``@app.command(epilog=EXIT_CODES_HELP)``,
options from the ``*Opt`` aliases below, ``out = render.choose_format(fmt, json_, output)``
first, heavy imports inside the body, results through ``render.report``/``render.table``,
"nothing to do" through :func:`_done`. Errors need no handling in the command: the group
maps them to exit codes (:data:`USER_ERRORS`, :data:`CONFLICT_ERRORS`).
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from enum import Enum
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from ddcli import render
from ddcli.render import OutputFormat

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USER = 2
EXIT_CONFLICT = 3
EXIT_NOOP = 4
EXIT_CORRUPT = 5

EXIT_CODES_HELP = (
    "Exit codes: 0 success (also when there is nothing to do); "
    "1 internal error (DDCLI_DEBUG=1 shows the traceback); "
    "2 user error (one line on stderr, nothing changed); "
    "3 conflict with a concurrent command (nothing written, safe to retry); "
    "4 nothing to do, only with --strict-noop or DDCLI_STRICT_NOOP=1; "
    "5 the store is damaged (a layer file missing or not what the log recorded, or an unreadable "
    "metadata version): retrying will not help, run ddcli check."
    "\n\n"
    "The store is --store PATH, or $DDCLI_STORE, or ./ddstore. "
    "Times are written 7 or (1,2); a frontier is one or more times, e.g. \"(0,3) (1,2)\"."
)


# ---------------------------------------------------------------- errors and exit codes


# (module, class) of the exceptions that are user errors (exit 2) and conflicts (exit 3).
# Named, not imported: an exception of a module can only be raised once the module is
# loaded, so handling an error never imports anything (and never pyspark).
USER_ERRORS = [("ddcli.render", "RenderError"), ("storage.trace", "StoreError"),
               ("storage.files", "UpdateFileError"), ("storage.lattice", "TimeSyntaxError"),
               ("ops.pipeline", "PipelineError"), ("ops.session", "SparkSetupError"),
               ("storage.blob", "StoreUnreachable"),
               # a pipeline's own expression failing on the data (1/0 under ANSI SQL, a cast
               # of 'abc' to a number, a bad date): the user's to fix, not a bug of ddcli
               ("pyspark.errors.exceptions.captured", "ArithmeticException"),
               ("pyspark.errors.exceptions.captured", "NumberFormatException"),
               ("pyspark.errors.exceptions.captured", "DateTimeException")]
CONFLICT_ERRORS = [("storage.log", "Conflict")]
CORRUPTION_ERRORS = [("storage.integrity", "CorruptionError")]


def _loaded(names: list[tuple[str, str]]) -> tuple[type, ...]:
    found = []
    for mod, name in names:
        cls = getattr(sys.modules.get(mod), name, None)
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


def exit_code_for(exc: BaseException) -> int:
    """The exit code a scheduler sees for an exception raised by a command."""
    if isinstance(exc, _loaded(CORRUPTION_ERRORS)):
        return EXIT_CORRUPT
    if isinstance(exc, _loaded(CONFLICT_ERRORS)):
        return EXIT_CONFLICT
    if isinstance(exc, _loaded(USER_ERRORS)):
        return EXIT_USER
    return EXIT_INTERNAL


def _debug() -> bool:
    return os.environ.get("DDCLI_DEBUG", "") not in ("", "0")


def _handle(exc: BaseException, cmd: str) -> int:
    """Print the one-line error for ``exc`` and return the exit code."""
    from typer._click import exceptions as cx  # Typer's own copy of click

    if isinstance(exc, cx.NoArgsIsHelpError) and exc.ctx is not None:
        # `ddcli` or `ddcli bench` alone: the help (Rich has printed it already when
        # the error was made), and the code of a usage error
        text = exc.format_message()
        if text and text.strip() and text.strip() != "None":
            sys.stdout.write(text.rstrip("\n") + "\n")
        return EXIT_USER
    if isinstance(exc, cx.UsageError):
        where = exc.ctx.command_path if exc.ctx is not None else cmd
        render.error(f"{exc.format_message()} (see '{where} --help')")
        return EXIT_USER
    if isinstance(exc, cx.ClickException):
        render.error(exc.format_message())
        return exc.exit_code
    if isinstance(exc, typer.Abort):
        render.error("aborted")
        return EXIT_INTERNAL
    if _debug():
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        render.error(f"{exc.strerror}{' writing ' + str(exc.filename) if exc.filename else ''}: nothing this "
                     f"command had not committed was left behind; free some space and run it again")
        return EXIT_INTERNAL
    code = exit_code_for(exc)
    if code == EXIT_CONFLICT:
        render.error(f"{exc} (conflict with a concurrent command; nothing was written, safe to retry)")
    elif code in (EXIT_USER, EXIT_CORRUPT):
        render.error(str(exc))
    else:
        hint = "" if _debug() else "; set DDCLI_DEBUG=1 to see the traceback"
        render.error(f"internal error: {type(exc).__name__}: {exc}{hint}")
    return code


class Group(TyperGroup):
    """The top-level command group: every error becomes one line and an exit code.

    Overriding ``main`` (not ``__call__``) means ``typer.testing.CliRunner`` sees exactly
    what a user's shell sees.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        prog = prog_name or "ddcli"
        _warnings.clear()
        try:
            rv = super().main(args=args, prog_name=prog, complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else EXIT_OK
            if code in (EXIT_OK, EXIT_NOOP):  # a failed command says it all in its error line
                for w in dict.fromkeys(_warnings):
                    render.warning(w)
        except BrokenPipeError:
            # the reader went away (`ddcli query t | head`): stop quietly
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            code = EXIT_INTERNAL
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (EXIT_OK if e.code is None else EXIT_INTERNAL)
        except KeyboardInterrupt:
            render.error("interrupted")
            code = 130
        except Exception as e:  # noqa: BLE001 - the one place every error is turned into a code
            code = _handle(e, prog)
        if not standalone_mode:
            return code
        sys.exit(code)


app = typer.Typer(
    cls=Group,
    name="ddcli",
    help="Differential dataflow as a batch command-line tool: traces on disk, pipelines on "
         "Spark, SQL over any past state.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)
bench_app = typer.Typer(help="Benchmarks: figures as a table, as JSON (--out) and as PNG plots (--plot).\n\n"
                             "Example:\n\n    ddcli bench storage --updates 100000 --keys 10000 --out bench.json --plot bench.png",
                        no_args_is_help=True,
                        epilog=EXIT_CODES_HELP, rich_markup_mode="markdown")
app.add_typer(bench_app, name="bench")
help_app = typer.Typer(help="Reference pages: `ddcli help operators` lists every pipeline operator.\n\n"
                            "Example:\n\n    ddcli help operators",
                       no_args_is_help=True, epilog=EXIT_CODES_HELP, rich_markup_mode="markdown")
app.add_typer(help_app, name="help")


# ---------------------------------------------------------------- shared options

StoreOpt = Annotated[str, typer.Option(
    "--store", envvar="DDCLI_STORE", metavar="PATH", show_default=True,
    help="The store directory (holds the traces).")]
FormatOpt = Annotated[Optional[OutputFormat], typer.Option(
    "--format", "-f", case_sensitive=False, show_default=False,
    help="Output format: table (default), csv, jsonl or parquet.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Shorthand for --format jsonl.")]
OutputOpt = Annotated[Optional[str], typer.Option(
    "--output", "-o", metavar="FILE",
    help="Write the output to FILE (its extension picks the format unless --format is given).")]
StrictNoopOpt = Annotated[bool, typer.Option(
    "--strict-noop", envvar="DDCLI_STRICT_NOOP",
    help="Exit with code 4 (not 0) when there is nothing to do.")]
WhereOpt = Annotated[Optional[str], typer.Option(
    "--where", "-w", metavar="EXPR",
    help="A DuckDB SQL condition on the data columns, e.g. \"word LIKE 'a%'\".")]
DEFAULT_STORE = "./ddstore"


class InputFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"
    parquet = "parquet"


_warnings: list[str] = []  # what a store said went wrong without stopping the command


def _store(path: str):
    from storage.store import Store
    return Store(path, on_warning=_warnings.append)


def _done(noop: bool, strict: bool) -> None:
    """Finish a command: "nothing to do" is exit 0, or 4 with --strict-noop."""
    if noop and strict:
        raise typer.Exit(EXIT_NOOP)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# ---------------------------------------------------------------- ingest


@app.command(epilog=EXIT_CODES_HELP)
def ingest(
    trace: Annotated[str, typer.Argument(metavar="TRACE", help="The trace to append to (created by its first ingest).")],
    files: Annotated[list[str], typer.Argument(metavar="FILE...", help="Update files: CSV, JSON Lines or Parquet.")],
    key: Annotated[Optional[str], typer.Option(
        "--key", "-k", metavar="COLS",
        help="Key columns, comma-separated (first ingest only; default: the first data column).")] = None,
    time: Annotated[Optional[str], typer.Option(
        "--time", "-t", metavar="T", help="The time of every update, for files without a time column.")] = None,
    upper: Annotated[Optional[str], typer.Option(
        "--upper", "-u", metavar="F",
        help="Seal the trace up to frontier F (default for d = 1: just past the largest time ingested).")] = None,
    file_format: Annotated[Optional[InputFormat], typer.Option(
        "--file-format", "--input-format", case_sensitive=False,
        help="Format of the update files (default: from the extension).")] = None,
    null: Annotated[Optional[str], typer.Option(
        "--null", metavar="STR",
        help="CSV: the text that means null in every column [default: \\N, and an empty field "
             "in columns that are not text].")] = None,
    upsert: Annotated[Optional[str], typer.Option(
        "--upsert", metavar="KEYCOLS",
        help="Each row replaces the live rows with the same key (comma-separated columns) at the "
             "row's time; ddcli retracts the old rows.")] = None,
    delete: Annotated[Optional[str], typer.Option(
        "--delete", metavar="KEYCOLS",
        help="Each row (these key columns and a time) removes the live rows with that key at its time.")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse the ingest (exit 2, nothing written) when a retraction matches "
                         "no live row, instead of warning.")] = False,
    strict_noop: StrictNoopOpt = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Append update files to a trace.

    Columns: the data columns, `time` (or `time_0`, `time_1`, ... for d >= 2) and an
    optional `diff` (default 1). Every row of every file is validated before anything is
    written; a bad file changes nothing. Re-ingesting a file already ingested is a no-op.

    Examples:

        ddcli ingest words sample_data/words_1.csv

        ddcli ingest strings sample_data/strings_1.csv --upper "(1,0)"

        ddcli ingest clicks events.jsonl --time 42 --key user

        ddcli ingest airports airports_fix.csv --time 9 --upsert faa
    """
    out = render.choose_format(fmt, json_, output)
    from storage.lattice import format_frontier, parse_time
    st = _store(store)
    t = parse_time(time) if time is not None else None
    keys = [k.strip() for k in key.split(",") if k.strip()] if key is not None else None
    from storage.retractions import checker
    negative: list = []
    prepare = checker(st, strict=strict, found=negative)
    by_key = _by_key_step(st, upsert, delete)
    if by_key is not None:
        prepare = _then(by_key[0], prepare)
    with render.progress(len(files), f"ingest {trace}") as step:
        res = st.ingest(trace, list(files), key=keys, time=t, upper=upper,
                        fmt=file_format.value if file_format else None, progress=step, null=null,
                        columns=by_key[2] if by_key else None, prepare=prepare)
    tr = st.trace(trace)
    unmatched = negative[0] if negative and negative[0].rows else None
    if unmatched is not None:
        render.warning(f"trace {trace!r}: {unmatched.describe()}; restate retracted rows exactly "
                       f"(CSV nulls are written {null if null is not None else chr(92) + 'N'})")
    noop = not res.files
    pending = sum(l.rows for l in tr.pending)
    record = {"command": "ingest", "trace": trace, "noop": noop, "created": res.created,
              "updates": res.rows, "files": res.files, "skipped": res.skipped,
              "upper": format_frontier(tr.upper), "since": format_frontier(tr.since),
              "layers": len(tr.layers), "pending": pending, "warnings": st.warnings,
              "unmatched_retractions": unmatched.rows if unmatched else 0}
    if by_key is not None:
        record.update({"upserted" if upsert else "deleted": by_key[1].rows, "retracted": by_key[1].retracted})
    if noop:
        msg = (f"nothing to do: trace {trace!r} already holds "
               f"{'this file' if len(res.skipped) == 1 else 'these files'} "
               f"({', '.join(res.skipped)}); re-ingesting a file is a no-op")
    else:
        msg = (f"{'created trace' if res.created else 'trace'} {trace!r}: ingested "
               f"{_plural(res.rows, 'update')} from {_plural(len(res.files), 'file')}; "
               f"upper is {format_frontier(tr.upper)}")
        if by_key is not None:
            msg += (f" ({_plural(by_key[1].rows, 'row')} {'upserted' if upsert else 'deleted'} by key, "
                    f"{_plural(by_key[1].retracted, 'live row')} retracted)")
        if res.skipped:
            msg += f" (skipped, already ingested: {', '.join(res.skipped)})"
        if pending:
            msg += (f"; {_plural(pending, 'update')} beyond the upper wait to be sealed "
                    f"(ddcli advance {trace} --upper F)")
    render.report(record, msg, out, output)
    _done(noop, strict_noop)


def _by_key_step(st, upsert: str | None, delete: str | None):
    """``(prepare step, stats, file columns)`` for --upsert/--delete KEYCOLS, or None."""
    if upsert is None and delete is None:
        return None
    if upsert is not None and delete is not None:
        raise typer.BadParameter("give --upsert or --delete, not both", param_hint="--delete")
    from storage.upsert import UpsertStats, upsert_step
    key = [k.strip() for k in (upsert or delete).split(",") if k.strip()]
    if not key:
        raise typer.BadParameter("give the key columns, comma-separated", param_hint="--upsert/--delete")
    stats = UpsertStats()
    return upsert_step(st, key, delete=delete is not None, stats=stats), stats, key if delete else None


def _then(first, second):
    """Two ``prepare`` steps of an ingest, one after the other."""
    return lambda existing, table: second(existing, first(existing, table))


# ---------------------------------------------------------------- advance


@app.command(epilog=EXIT_CODES_HELP)
def advance(
    trace: Annotated[str, typer.Argument(metavar="TRACE", help="The trace whose frontiers move.")],
    upper: Annotated[Optional[str], typer.Option(
        "--upper", "-u", metavar="F", help="Seal every time not beyond F (no more updates there).")] = None,
    since: Annotated[Optional[str], typer.Option(
        "--since", "-s", metavar="F", help="Allow compaction: times not beyond F may be merged.")] = None,
    seal: Annotated[bool, typer.Option(
        "--seal", help="Seal every time (upper = the empty frontier): a dimension table that never "
                       "holds a pipeline back and takes no more updates.")] = False,
    strict_noop: StrictNoopOpt = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Seal times (move the upper) and/or allow compaction (move the since), then compact.

    Frontiers only move forward. After --since F the collection is exact only at times
    beyond F.

    Examples:

        ddcli advance words --since 3

        ddcli advance strings --upper "(2,0)" --since "(1,0)"

        ddcli advance airlines --seal
    """
    out = render.choose_format(fmt, json_, output)
    from storage.lattice import format_frontier
    st = _store(store)
    before = st.trace(trace)
    if seal:
        from storage.seal import sealed_frontier
        if upper is not None:
            raise typer.BadParameter("give --seal or --upper, not both", param_hint="--seal")
        upper = sealed_frontier(before)
    after = st.advance(trace, upper=upper, since=since)
    noop = (after.upper, after.since) == (before.upper, before.since)
    record = {"command": "advance", "trace": trace, "noop": noop,
              "upper": format_frontier(after.upper), "since": format_frontier(after.since),
              "upper_before": format_frontier(before.upper), "since_before": format_frontier(before.since),
              "layers": len(after.layers), "rows": after.rows()}
    if noop:
        msg = (f"nothing to do: trace {trace!r} already has upper {format_frontier(after.upper)} "
               f"and since {format_frontier(after.since)}")
    else:
        moves = []
        if after.upper != before.upper:
            to = "{} (sealed for all times)" if after.upper.is_empty() else format_frontier(after.upper)
            moves.append(f"upper {format_frontier(before.upper)} -> {to}")
        if after.since != before.since:
            moves.append(f"since {format_frontier(before.since)} -> {format_frontier(after.since)}")
        msg = (f"trace {trace!r}: {', '.join(moves)}; "
               f"{_plural(len(after.layers), 'layer')}, {_plural(after.rows(), 'update')}")
    render.report(record, msg, out, output)
    _done(noop, strict_noop)


# ---------------------------------------------------------------- compact


@app.command(epilog=EXIT_CODES_HELP)
def compact(
    trace: Annotated[Optional[str], typer.Argument(metavar="TRACE", help="One trace (default: every trace).")] = None,
    full: Annotated[bool, typer.Option("--full", help="Merge all layers into one (per reader hold).")] = False,
    grace: Annotated[float, typer.Option(
        "--grace", metavar="SECONDS", min=0,
        help="Remove unreferenced files only once older than this.")] = 3600.0,
    strict_noop: StrictNoopOpt = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Merge layers, advance times to the since, consolidate, and collect garbage.

    Examples:

        ddcli compact

        ddcli compact words --full --grace 0
    """
    out = render.choose_format(fmt, json_, output)
    st = _store(store)
    n = 1 if trace else len(st.state().traces)
    with render.progress(max(n, 1), "compact") as step:
        res = st.compact(trace, full=full, grace_seconds=grace, progress=step)
    noop = not res.get("merges") and not res.get("removed_files")
    record = {"command": "compact", "trace": trace, "noop": noop, **res}
    scope = f"trace {trace!r}" if trace else _plural(res.get("traces", 0), "trace")
    if noop:
        msg = f"nothing to do: {scope} already compact, no garbage older than {grace:g}s"
    else:
        msg = (f"compacted {scope}: {_plural(res.get('merges', 0), 'merge')}, "
               f"removed {_plural(res.get('removed_files', 0), 'unreferenced file')}")
    render.report(record, msg, out, output)
    _done(noop, strict_noop)


# ---------------------------------------------------------------- reading


@app.command(epilog=EXIT_CODES_HELP)
def query(
    trace: Annotated[str, typer.Argument(metavar="TRACE", help="The trace to read.")],
    as_of: Annotated[Optional[str], typer.Option(
        "--as-of", "-a", metavar="T",
        help="The time (default: the latest complete time; for d >= 2 every update present).")] = None,
    where: WhereOpt = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse (exit 2) a time that is not complete yet (beyond the upper) "
                         "instead of warning.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The collection at a time: the data columns plus `count` (the multiplicity).

    A time not beyond the trace's since was compacted away and is refused, naming the
    earliest time that works. A time beyond the upper is not complete yet: the answer
    comes with a warning on stderr (an error with --strict).

    Examples:

        ddcli query words

        ddcli query words --as-of 3 --where "word LIKE 'a%'" --format csv
    """
    out = render.choose_format(fmt, json_, output)
    from storage.lattice import format_time, parse_time
    from storage.query import as_of as as_of_
    from storage.query import default_time
    st = _store(store)
    if as_of is not None:
        from storage.complete import incomplete
        from storage.trace import StoreError
        tr = st.trace(trace)
        why = incomplete(tr, parse_time(as_of, tr.d))
        if why and strict:
            raise StoreError(f"{why} (--strict)")
    tbl = as_of_(st, trace, as_of, where)
    if as_of is not None:
        if why:
            render.warning(why)
        title = f"{trace} as of {as_of}"
    else:
        t = default_time(st.trace(trace))
        title = f"{trace} as of {format_time(t)}" if t is not None else f"{trace} (every update)"
    render.table(tbl, out, output, title=title)


@app.command(epilog=EXIT_CODES_HELP)
def history(
    trace: Annotated[str, typer.Argument(metavar="TRACE", help="The trace to read.")],
    where: WhereOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The consolidated updates (data, time, diff), ordered by data then time.

    Times are shown advanced to the trace's since.

    Example:

        ddcli history words --where "word = 'apple'"
    """
    out = render.choose_format(fmt, json_, output)
    from storage.query import history as history_
    tbl = history_(_store(store), trace, where)
    render.table(tbl, out, output, title=f"{trace} history")


@app.command(epilog=EXIT_CODES_HELP)
def sql(
    query_text: Annotated[str, typer.Argument(metavar="QUERY", help="A DuckDB query.")],
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """DuckDB SQL with every trace a view of its updates (data, time or time_0.., diff).

    The collection at time t is the sum of the diffs of the updates at times <= t. For
    d = 2 write the product order: WHERE time_0 <= 1 AND time_1 <= 2. Pipeline state
    (traces named pipeline.operator) is reachable only quoted: SELECT * FROM "wc.count".

    Examples:

        ddcli sql "SELECT word, SUM(diff) AS count FROM words WHERE time <= 5 GROUP BY ALL HAVING SUM(diff) <> 0"

        ddcli sql "SELECT time, SUM(diff) AS change FROM words GROUP BY time ORDER BY time" --format csv
    """
    out = render.choose_format(fmt, json_, output)
    from storage.query import sql as sql_
    tbl = sql_(_store(store), query_text)
    render.table(tbl, out, output)


@app.command(epilog=EXIT_CODES_HELP)
def status(
    trace: Annotated[Optional[str], typer.Argument(metavar="TRACE", help="One trace (default: all, and the pipelines).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Also list pipeline state (internal traces).")] = False,
    pipelines: Annotated[bool, typer.Option(
        "--pipelines", help="For csv/parquet output: the pipelines table instead of the traces table.")] = False,
    lag: Annotated[bool, typer.Option(
        "--lag", help="For csv/parquet output: the lag table (one row per pipeline input) instead of the traces table.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Traces, pipelines and how far each pipeline lags behind its inputs.

    Traces: schema, key, d, since, upper, layers, rows, bytes, reader holds. Pipelines:
    runs, frontier, inputs and outputs. Lag, one row per pipeline input: the input's
    upper when the pipeline last ran (`consumed`) against its upper now, and the sealed
    layers and updates the next `ddcli run` will process (`behind` is true when there
    are any); `pending` counts updates ingested beyond the upper, not yet sealed.

    With --format jsonl every record has a "kind" field: "trace", "pipeline" or "lag".
    With TRACE: that trace, and the lag of every pipeline reading it.

    Examples:

        ddcli status

        ddcli status words --json

        ddcli status --lag --format csv
    """
    out = render.choose_format(fmt, json_, output)
    from storage.query import status as status_
    st = _store(store)
    state = st.state()
    traces, pipes = status_(st, trace, internal=all_)
    if out == "table":  # a wide schema on one line; --json keeps every column
        from storage.status_rows import short_columns
        i = traces.schema.get_field_index("columns")
        traces = traces.set_column(i, "columns", [[short_columns(c) for c in traces.column(i).to_pylist()]])
    lags = lag_table(state, trace)
    parts = [("trace", traces, f"traces in {st.path}")]
    if pipes.num_rows or pipelines:
        parts.append(("pipeline", pipes, "pipelines"))
    if lags.num_rows or lag:
        parts.append(("lag", lags, "pipeline inputs: lag"))
    if out in ("csv", "parquet") and (pipelines or lag):
        parts = [p for p in parts if p[0] == ("lag" if lag else "pipeline")]
    if out == "table" and output is None:  # where the store lives, e.g. an object store's endpoint
        render.report({}, f"store: {st.path} ({st.blobs.where()})", out)
    render.tables(parts, out, output)


LAG_COLUMNS = [("pipeline", "string"), ("input", "string"), ("behind", "bool"), ("consumed", "string"),
               ("upper", "string"), ("layers", "int64"), ("updates", "int64"), ("pending", "int64"),
               ("consumed_seq", "int64"), ("input_seq", "int64"), ("frontier", "string"),
               ("holds_back", "bool"), ("behind_by", "int64")]


def lag_rows(state, trace: str | None = None) -> list[dict]:
    """How far each pipeline is behind each of its inputs, from one store state.

    For every pipeline that has run and every input it reads: ``consumed`` is the input's
    upper when the pipeline last ran, ``upper`` the input's upper now; ``layers`` and
    ``updates`` are what the next run would read (the input's layers sealed after the
    position the pipeline holds it at), ``pending`` the updates ingested beyond the upper
    (a run cannot read them until ``advance --upper`` seals them); ``consumed_seq`` and
    ``input_seq`` are the positions in the input's sequence of seals. ``frontier`` is
    the pipeline's own frontier: its outputs are complete up to it. ``holds_back`` is true
    for an input whose upper is behind another input's (the pipeline waits for it; a
    dimension table that is complete for good is sealed with ``advance --seal``), and
    ``behind_by`` says by how much (one-dimensional times).
    """
    from storage.lattice import Frontier, format_frontier
    from storage.seal import hold_back
    rows = []
    for name, rec in sorted(state.pipelines.items()):
        if not isinstance(rec, dict):
            continue
        d = rec.get("d", 1)
        frontier = format_frontier(Frontier.from_json(rec["frontier"], d)) if "frontier" in rec else None
        waits = hold_back({inp: state.traces[inp].upper for inp in (rec.get("inputs") or {})
                           if inp in state.traces})
        for inp, pos in sorted((rec.get("inputs") or {}).items()):
            if trace is not None and trace not in (inp, name):
                continue
            t = state.traces.get(inp)
            if t is None:
                continue
            hold = t.holds.get(name)
            seq = hold.seq if hold is not None else int(pos.get("seq", 0))
            new = [l for l in t.layers if l.seq_lo >= seq]
            consumed = Frontier.from_json(pos["upper"], t.d) if "upper" in pos else None
            rows.append({
                "pipeline": name, "input": inp,
                "behind": bool(new) or (consumed is not None and consumed != t.upper),
                "consumed": format_frontier(consumed) if consumed is not None else None,
                "upper": format_frontier(t.upper),
                "layers": len(new), "updates": sum(l.rows for l in new),
                "pending": sum(l.rows for l in t.pending),
                "consumed_seq": seq, "input_seq": t.next_seq, "frontier": frontier,
                "holds_back": waits[inp][0], "behind_by": waits[inp][1],
            })
    return rows


def lag_table(state, trace: str | None = None):
    """:func:`lag_rows` as an Arrow table (an empty one has the same columns)."""
    import pyarrow as pa
    schema = pa.schema([(n, pa.type_for_alias(t)) for n, t in LAG_COLUMNS])
    return pa.Table.from_pylist(lag_rows(state, trace), schema=schema)


# ---------------------------------------------------------------- help


@help_app.command("operators", epilog=EXIT_CODES_HELP)
def help_operators() -> None:
    """Every pipeline operator with its arguments, from the docstrings of ops/pipeline.py.

    Example:

        ddcli help operators | less
    """
    from ddcli.help_operators import render_text
    sys.stdout.write(render_text() + "\n")


# ---------------------------------------------------------------- bench


@bench_app.command("storage", epilog=EXIT_CODES_HELP)
def bench_storage(
    updates: Annotated[int, typer.Option(min=1, help="Updates in the big ingest.")] = 10_000_000,
    keys: Annotated[int, typer.Option(min=1, help="Distinct keys.")] = 1_000_000,
    small_ingests: Annotated[int, typer.Option(min=0, help="Number of small ingests after the big one.")] = 1000,
    small_size: Annotated[int, typer.Option(min=1, help="Updates per small ingest.")] = 1000,
    repeat: Annotated[int, typer.Option(min=1, help="Timed repetitions of each query (median reported).")] = 5,
    meta_ingests: Annotated[int, typer.Option(
        min=0, help="One-row ingests of the metadata-log benchmark (log size and commit latency "
                    "after 10^2 of them against after all; 0 skips it).")] = 10_000,
    log_retention: Annotated[float, typer.Option(
        min=0, help="Seconds the metadata benchmark keeps old log versions.")] = 30.0,
    workdir: Annotated[Optional[str], typer.Option(
        "--dir", metavar="DIR", help="Where to put the generated files and the store (default: a temp dir, removed).")] = None,
    s3: Annotated[bool, typer.Option(
        "--s3", help="Put the store on a local S3-compatible server (moto, started for the benchmark) "
                     "and count the requests per commit.")] = False,
    out_json: Annotated[Optional[str], typer.Option("--out", metavar="FILE.json", help="Write the figures as JSON.")] = None,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", metavar="FILE.png",
        help="Draw the figures as a PNG: latency CDF of the small ingests, layers after each (needs matplotlib).")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Ingest, merge and query throughput of the trace store.

    Ingests UPDATES updates (KEYS keys, d = 1) from Parquet, then SMALL-INGESTS ingests of
    SMALL-SIZE updates; reports updates/s, layers, bytes on disk against one consolidated
    Parquet file, and query --as-of against DuckDB over that file. Then META-INGESTS
    one-row ingests into a fresh store: the metadata log's size and commit latency after
    10^2 of them against after all.

    Example:

        ddcli bench storage --updates 100000 --keys 10000 --small-ingests 50 --out bench.json --plot bench.png
    """
    out = render.choose_format(fmt, json_, output)
    render.check_output(out_json, "--out")
    render.check_output(plot, "--plot")
    from ddcli import bench
    if plot:
        bench.require_matplotlib()
    res = bench.bench_storage(updates=updates, keys=keys, small_ingests=small_ingests,
                              small_size=small_size, repeat=repeat, workdir=workdir,
                              meta_ingests=meta_ingests, log_retention=log_retention, s3=s3,
                              log=None if out != "table" else bench.console_log())
    if out_json:
        bench.write_json(res, out_json)
    if plot:
        bench.write_plot(res, plot)
    if out == "table":
        bench.print_table(res, output)
    else:
        render.report(res, "", out, output)


from ddcli import lifecycle  # noqa: E402,F401  (registers pipelines and drop)


def main() -> None:
    """The ``ddcli`` console script (and ``python -m ddcli``)."""
    import ddcli.check  # noqa: F401  (registers check)
    import ddcli.pipelines  # noqa: F401  (registers run and verify)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
