"""The ``ddcli`` command line: the Typer app, its exit codes and shared options.

The commands are thin and live by family: ``store_commands`` (ingest, advance, compact),
``read_commands`` (query, history, sql, status), ``lifecycle`` (pipelines, drop),
``check``, ``pipelines`` (run, verify and the Spark benchmarks). Each parses its
arguments, calls one library function and renders the result (``ddcli/render.py``);
everything a command does is callable from Python without it.

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
USER_ERRORS = [("ddcli.render", "RenderError"), ("storage.state.trace", "StoreError"),
               ("storage.files.read", "UpdateFileError"), ("storage.lattice", "TimeSyntaxError"),
               ("ops.dataflow.builder", "PipelineError"), ("ops.spark.session", "SparkSetupError"),
               ("storage.blobs.base", "StoreUnreachable"),
               # a pipeline's own expression failing on the data (1/0 under ANSI SQL, a cast
               # of 'abc' to a number, a bad date): the user's to fix, not a bug of ddcli
               ("pyspark.errors.exceptions.captured", "ArithmeticException"),
               ("pyspark.errors.exceptions.captured", "NumberFormatException"),
               ("pyspark.errors.exceptions.captured", "DateTimeException")]
CONFLICT_ERRORS = [("storage.log.commit", "Conflict")]
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

# ---------------------------------------------------------------- help


@help_app.command("operators", epilog=EXIT_CODES_HELP)
def help_operators() -> None:
    """Every pipeline operator with its arguments, from the docstrings of ops/dataflow/builder.py.

    Example:

        ddcli help operators | less
    """
    from ddcli.commands.help import render_text
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
    from ddcli.bench import storage as bench
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


# the commands, in the order `ddcli --help` lists them
from ddcli.commands import store as store_commands  # noqa: E402,F401  (registers ingest, advance, compact)
from ddcli.commands import read as read_commands  # noqa: E402,F401  (registers query, history, sql, status)
from ddcli.commands import lifecycle  # noqa: E402,F401  (registers pipelines and drop)


def main() -> None:
    """The ``ddcli`` console script (and ``python -m ddcli``)."""
    import ddcli.commands.check  # noqa: F401  (registers check)
    import ddcli.commands.run  # noqa: F401  (registers run and verify)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
