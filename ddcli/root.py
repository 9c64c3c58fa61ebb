"""The options of ``ddcli`` itself, before any command: ``--config``, ``--store``,
``--version`` (and Typer's ``--install-completion`` / ``--show-completion``).

Every command starts here: the configuration file's settings go into the environment
(ddcli/config.py) before the command's own options are read, so an option's ``envvar``
sees them too. ``ddcli --store PATH CMD`` goes there the same way, as ``$DDCLI_STORE`` over
the environment's and the file's: every command that takes ``--store`` reads it, and the
command's own ``--store``, later on the line and more specific, wins (as in git).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ddcli.app import app


def _print_version(value: bool) -> None:
    if value:
        from ddcli.versions import version_lines
        typer.echo("\n".join(version_lines()))
        raise typer.Exit(0)


@app.callback()
def root(
    config: Annotated[Optional[str], typer.Option(
        "--config", metavar="PATH",
        help="The configuration file (default: $DDCLI_CONFIG, else ddcli.toml in the working folder). "
             "It holds settings by name, e.g. store = \"/data/store\"; `ddcli config` lists them. "
             "An option beats the environment, which beats the file.")] = None,
    store: Annotated[Optional[str], typer.Option(
        "--store", metavar="PATH",
        help="The store of the command that follows (as its own --store, which wins when both are given).")] = None,
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print the versions of ddcli, Python, pyspark, duckdb, pyarrow and Java, and exit.")] = False,
) -> None:
    from ddcli import config as settings
    settings.apply(config, {"store": store} if store is not None else None)
