"""``ddcli check``: is every file of the store what the log recorded? (storage/integrity.py)

Registered on the main app by ``ddcli/cli.py``'s ``main`` (like ``run`` and ``verify``).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, EXIT_CORRUPT, app
from ddcli.options import DEFAULT_STORE, FormatOpt, JsonOpt, OutputOpt, StoreOpt, plural, store_at, trace_arg


@app.command(epilog=EXIT_CODES_HELP)
def check(
    trace: Annotated[Optional[str], trace_arg("One trace (default: every trace).")] = None,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Check every layer file against the log: size, SHA-256, Parquet page checksums, rows.

    Also reads the metadata log (a damaged newest version is reported). Reads every byte
    of the store, so it takes as long as reading the store once. Exit code 5 when
    anything is damaged, with one line per damaged file on stdout.

    Example:

        ddcli check
    """
    out = render.choose_format(fmt, json_, output, store)
    import pyarrow as pa

    from storage.integrity import check_store
    st = store_at(store)
    res = check_store(st, trace)
    problems = res["problems"]
    scope = f"trace {trace!r}" if trace else f"store {st.path}"
    checked = f"{plural(res['files'], 'layer file')} of {plural(res['traces'], 'trace')} ({res['bytes']:,} bytes)"
    if not problems:
        record = {"command": "check", "ok": True, **{k: res[k] for k in ("traces", "files", "bytes")}}
        render.report(record, f"{scope}: {checked} checked, no damage found", out, output)
        return
    schema = pa.schema([("trace", pa.string()), ("file", pa.string()), ("problem", pa.string())])
    render.table(pa.Table.from_pylist(problems, schema=schema), out, output, title=f"damage in {scope}")
    render.error(f"{scope} is damaged: {plural(len(problems), 'problem')} in {checked}")
    raise typer.Exit(EXIT_CORRUPT)
