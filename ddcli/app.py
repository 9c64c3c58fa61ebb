"""The ``ddcli`` Typer app: its exit codes, and the one place errors become them.

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

Commands need no error handling: :class:`Group` maps what they raise to exit codes
(:data:`USER_ERRORS`, :data:`CONFLICT_ERRORS`, :data:`CORRUPTION_ERRORS`). This module is a
leaf of the command line: the commands (``ddcli/commands/``) import it, never the reverse.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback

import typer
from typer.core import TyperGroup

from ddcli import render

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
    "The store is --store PATH, or $DDCLI_STORE, or ddcli.toml's store, or ./ddstore (see ddcli config). "
    "Times are written 7 or (1,2); a frontier is one or more times, e.g. \"(0,3) (1,2)\"."
)


# ---------------------------------------------------------------- errors and exit codes


# (module, class) of the exceptions that are user errors (exit 2) and conflicts (exit 3).
# Named, not imported: an exception of a module can only be raised once the module is
# loaded, so handling an error never imports anything (and never pyspark).
USER_ERRORS = [("ddcli.render", "RenderError"), ("ddcli.outputs", "OutputError"),
               ("storage.errors", "StoreError"), ("storage.errors", "UpdateFileError"),
               ("storage.errors", "TimeSyntaxError"),
               ("ops.errors", "PipelineError"), ("ops.errors", "SparkSetupError"), ("ops.errors", "KeyTooLarge"),
               ("storage.errors", "StoreUnreachable"),
               # a pipeline's own expression failing on the data (1/0 under ANSI SQL, a cast
               # of 'abc' to a number, a bad date): the user's to fix, not a bug of ddcli
               ("pyspark.errors.exceptions.captured", "ArithmeticException"),
               ("pyspark.errors.exceptions.captured", "NumberFormatException"),
               ("pyspark.errors.exceptions.captured", "DateTimeException")]
CONFLICT_ERRORS = [("storage.errors", "Conflict")]
CORRUPTION_ERRORS = [("storage.errors", "CorruptionError")]


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
    if type(exc).__name__ == "PythonException":  # a Spark task's error: ddcli's own says its line
        from ops.spark.errors import raised_in_task
        exc = raised_in_task(exc) or exc
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


store_warnings: list[str] = []  # what a store said went wrong without stopping the command
# variables the configuration file set for this command (ddcli/config.py), with their values
# before it (None: unset); put back when the command ends
restore_env: dict[str, str | None] = {}


def _restore_env() -> None:
    for name, value in restore_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    restore_env.clear()


class Group(TyperGroup):
    """The top-level command group: every error becomes one line and an exit code.

    Overriding ``main`` (not ``__call__``) means ``typer.testing.CliRunner`` sees exactly
    what a user's shell sees.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        prog = prog_name or "ddcli"
        store_warnings.clear()
        try:
            rv = super().main(args=args, prog_name=prog, complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else EXIT_OK
            if code in (EXIT_OK, EXIT_NOOP):  # a failed command says it all in its error line
                for w in dict.fromkeys(store_warnings):
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
        finally:
            _restore_env()
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
    add_completion=True,
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
