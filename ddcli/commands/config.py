"""``ddcli config``: the settings a command would run with, and where each came from.

The settings are the registry of storage/settings.py; ddcli/config.py has put the
configuration file's into the environment before this command runs.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from typer._click.core import ParameterSource

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app
from ddcli.options import DEFAULT_STORE, FormatOpt, JsonOpt, OutputOpt, StoreOpt


@app.command("config", epilog=EXIT_CODES_HELP)
def config_(
    ctx: typer.Context,
    store: StoreOpt = DEFAULT_STORE,
    master: Annotated[Optional[str], typer.Option(
        "--master", metavar="URL", help="A Spark master URL, as `ddcli run --master` would take it.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The effective settings: value, and where it came from (option, env, file, default).

    Every setting has a key in the configuration file and an environment variable: an
    option given on the command line beats the environment, which beats the file
    (`--config PATH`, else `$DDCLI_CONFIG`, else `ddcli.toml` in the working folder), which
    beats the default. Relative paths in the file are taken from the file's folder. An
    unknown key or a bad value is one error line naming the file, key and value (exit 2).

    A `ddcli.toml`:

        store = "/data/ddstore"
        spark_master = "spark://spark-master:7077"
        spark_memory = "6g"
        reduce_memory = "2g"
        strict_noop = true

    Examples:

        ddcli config

        ddcli --config /etc/ddcli.toml config --json
    """
    from ddcli.config import effective, loaded

    out = render.choose_format(fmt, json_, output, store)
    options = {"DDCLI_SPARK_MASTER": master}
    if ctx.get_parameter_source("store") == ParameterSource.COMMANDLINE:
        options["DDCLI_STORE"] = store
    rows = effective(options)
    import pyarrow as pa
    cols = ["key", "value", "source", "env", "help"] + (["file"] if out != "table" else [])
    tbl = pa.Table.from_pylist([{c: r[c] for c in cols} for r in rows],
                               schema=pa.schema([(c, pa.string()) for c in cols]))
    title = f"settings (configuration file: {loaded.path})" if loaded.path else \
        "settings (no configuration file: no --config, no $DDCLI_CONFIG, no ddcli.toml here)"
    render.table(tbl, out, output, title=title)
