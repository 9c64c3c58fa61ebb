"""``ddcli pipelines`` and ``ddcli drop``: the pipelines of a store, and giving one up.

Registered on the main app by ``ddcli/cli.py``; the work is done by ``storage/writes/lifecycle.py``
(no Spark).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app
from ddcli.options import DEFAULT_STORE, FormatOpt, JsonOpt, OutputOpt, StoreOpt, pipeline_arg, store_at

PIPELINE_COLUMNS = [("pipeline", "string"), ("file", "string"), ("file_hash", "string"), ("runs", "int64"),
                    ("frontier", "string"), ("inputs", "string"), ("holds", "string"), ("outputs", "string"),
                    ("state_traces", "int64"), ("state_rows", "int64"), ("state_bytes", "int64"),
                    ("lag_updates", "int64")]


@app.command("pipelines", epilog=EXIT_CODES_HELP)
def pipelines_(
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The pipelines that have run in the store.

    For each: its file and the hash of the version that ran, runs, frontier (its outputs
    are complete up to it), inputs and the holds it keeps on them (compaction stays behind
    a hold), outputs, the size of its state, and lag_updates: the sealed input updates its
    next run will process.

    Example:

        ddcli pipelines --json
    """
    out = render.choose_format(fmt, json_, output, store)
    import pyarrow as pa

    from storage.writes.lifecycle import pipeline_rows
    st = store_at(store)
    schema = pa.schema([(n, pa.type_for_alias(t)) for n, t in PIPELINE_COLUMNS])
    render.table(pa.Table.from_pylist(pipeline_rows(st.state()), schema=schema), out, output,
                 title=f"pipelines in {st.path}")


@app.command(epilog=EXIT_CODES_HELP)
def drop(
    pipeline: Annotated[str, pipeline_arg("The pipeline's name (see ddcli pipelines).")],
    keep_outputs: Annotated[bool, typer.Option(
        "--keep-outputs", help="Keep the output traces (they become ordinary traces).")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Drop a pipeline: release its holds on its inputs, remove its state and its outputs.

    One commit: the pipeline, its state and (unless --keep-outputs) its outputs disappear
    together, and its inputs may be compacted past where it held them. The files become
    garbage for `ddcli compact`. An output another pipeline reads is only removed once
    that pipeline is dropped.

    Examples:

        ddcli drop wordcount

        ddcli drop wordcount --keep-outputs
    """
    out = render.choose_format(fmt, json_, output, store)
    from storage.writes.lifecycle import drop_pipeline
    res = drop_pipeline(store_at(store), pipeline, keep_outputs=keep_outputs)
    gone = res["removed_outputs"] + res["removed_state"]
    msg = (f"pipeline {pipeline!r} dropped: released its holds on {', '.join(res['released_holds']) or 'nothing'}; "
           f"removed {', '.join(gone) or 'nothing'}"
           + (f"; kept {', '.join(res['kept_outputs'])}" if res["kept_outputs"] else ""))
    render.report({"command": "drop", **res}, msg, out, output)
