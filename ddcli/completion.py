"""Shell completion of trace and pipeline names, from the store's metadata (no JVM).

Typer calls these while the shell completes a word (``ddcli --install-completion`` sets it
up); the command's own callbacks do not run then, so the store is found here as the
command would find it: the command's ``--store`` on the line so far, else ``ddcli``'s own
(before the command), else ``$DDCLI_STORE``, else the configuration file's ``store``, else
``./ddstore``. Completion never fails: a store that cannot be read completes nothing.
"""

from __future__ import annotations

import os

import typer


def _store_path(ctx: typer.Context) -> str:
    from typer._click.core import ParameterSource

    from storage.settings import BY_KEY, config_path, read_config
    given = ctx.params.get("store")
    if given and ctx.get_parameter_source("store") == ParameterSource.COMMANDLINE:
        return given
    before = ctx.find_root().params.get("store")  # ddcli --store PATH CMD
    if before:
        return before
    if os.environ.get("DDCLI_STORE"):
        return os.environ["DDCLI_STORE"]
    path = config_path(ctx.find_root().params.get("config"))
    return (read_config(path) if path else {}).get("DDCLI_STORE") or BY_KEY["store"].default


def _state(ctx: typer.Context):
    from storage.store import Store
    path = _store_path(ctx)
    if "://" not in path and not os.path.isdir(path):
        return None  # no store there (opening one that is not there would say so on stderr)
    return Store(path).state()


def complete_traces(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Trace names starting with ``incomplete``, each with who writes it; a pipeline's
    state traces (``pipeline.node``) once the word has a dot."""
    return _traces(ctx, incomplete, ingested_only=False)


def complete_ingested(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """The traces ``ingest`` can append to: those no pipeline writes."""
    return _traces(ctx, incomplete, ingested_only=True)


def _traces(ctx: typer.Context, incomplete: str, *, ingested_only: bool) -> list[tuple[str, str]]:
    try:
        state = _state(ctx)
    except Exception:  # noqa: BLE001 - completion offers what it can, never an error
        return []
    if state is None:
        return []
    out = []
    for name in sorted(state.traces):
        if name.startswith(incomplete) and ("." not in name or "." in incomplete):
            owner = state.traces[name].owner
            if ingested_only and owner:
                continue
            out.append((name, f"written by pipeline {owner}" if owner else "ingested"))
    return out


def complete_pipelines(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Names of the pipelines that have run in the store, with their files."""
    try:
        state = _state(ctx)
    except Exception:  # noqa: BLE001 - completion offers what it can, never an error
        return []
    if state is None:
        return []
    return [(name, str(rec.get("file") or "")) for name, rec in sorted(state.pipelines.items())
            if name.startswith(incomplete)]
