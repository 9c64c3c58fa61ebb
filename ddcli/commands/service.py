"""``ddcli service status|stop``: the user's warm engines (ddcli/service/).

A service starts by itself with the first ``ddcli run`` or ``ddcli verify`` and stops after
``DDCLI_SERVICE_IDLE`` seconds without a command; these commands show and stop them. They
never start one, and they take no store.
"""

from __future__ import annotations

import os

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app
from ddcli.options import FormatOpt, JsonOpt, OutputOpt, plural

service_app = typer.Typer(
    help="The warm engine: a per-user process that keeps Spark running between `ddcli run` and `ddcli verify` "
         "commands (on by default; DDCLI_SERVICE=0 turns it off, DDCLI_SERVICE_IDLE sets the seconds it waits "
         "for the next command, default 300).\n\nExample:\n\n    ddcli service status",
    no_args_is_help=True, epilog=EXIT_CODES_HELP, rich_markup_mode="markdown")
app.add_typer(service_app, name="service")

_COLUMNS = [("pid", "int64"), ("state", "string"), ("started", "string"), ("commands", "int64"),
            ("stops_in_seconds", "float64"), ("master", "string"), ("python", "string"), ("pyspark", "string"),
            ("spark", "bool_"), ("key", "string"), ("log", "string")]


@service_app.command("status", epilog=EXIT_CODES_HELP)
def status(fmt: FormatOpt = None, json_: JsonOpt = False, output: OutputOpt = None) -> None:
    """The user's running services: pid, busy or idle, commands served, when it stops if
    idle, its Spark master and versions, its log file.

    Example:

        ddcli service status --json
    """
    out = render.choose_format(fmt, json_, output)
    import pyarrow as pa

    from ddcli.service import client
    from ddcli.service import folder as place
    from ddcli.service.identity import service_dir
    where = service_dir()
    rows = []
    for key in place.keys(where):
        if place.holder(where, key) is None:
            continue
        answer = client.ask(where, key, "status")
        if answer is None:  # alive but not answering (starting, or stuck)
            answer = {"key": key, "pid": place.holder(where, key), "state": "not answering",
                      "log": place.log_path(where, key)}
        rows.append({name: answer.get(name) for name, _ in _COLUMNS})
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in _COLUMNS])
    if not rows and out == "table":
        render.report({}, f"no ddcli service is running (services live in {where})", out, output)
        return
    render.table(pa.Table.from_pylist(rows, schema=schema), out, output, title=f"ddcli services in {where}")


@service_app.command("stop", epilog=EXIT_CODES_HELP)
def stop(all_: bool = typer.Option(False, "--all", help="Stop every service in the folder, those of your other "
                                                          "checkouts, environments and settings too."),
         fmt: FormatOpt = None, json_: JsonOpt = False, output: OutputOpt = None) -> None:
    """Stop the service `ddcli run` would use here (the same ddcli, Python, Spark settings and
    configuration file), and wait until it is gone; `--all` stops every service of the
    user's folder. A command a service is running is interrupted (its client exits 130,
    nothing of it is written).

    Example:

        ddcli service stop --all
    """
    out = render.choose_format(fmt, json_, output)
    from ddcli.service import client
    from ddcli.service import folder as place
    from ddcli.service.identity import service_dir
    where = service_dir()
    if all_:
        chosen = place.keys(where)
    else:
        from ddcli.config import loaded
        own = client.own_key(where, _environment_as_given(), loaded.path)
        chosen = [own] if own is not None else []
    stopped = [key for key in chosen if client.stop(where, key)]
    render.report({"command": "service stop", "stopped": stopped},
                  f"stopped {plural(len(stopped), 'service')}" if stopped else "no ddcli service was running",
                  out, output)


def _environment_as_given() -> dict[str, str]:
    """The environment as the command found it, before its configuration file's settings
    went in (ddcli/config.py): what a ``ddcli run`` client names its service by."""
    from ddcli.app import restore_env
    env = dict(os.environ)
    for name, before in restore_env.items():
        if before is None:
            env.pop(name, None)
        else:
            env[name] = before
    return env
