"""``ddcli explain``, ``ddcli runs`` and ``ddcli report``: looking at pipelines and the store
without running anything.

None of them starts Spark: ``explain`` reads the pipeline file and the store
(ops/explain/), ``runs`` the history each run committed with the store
(storage/state/history.py), ``report`` writes one self-contained HTML page of the store
(ddcli/report/).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app
from ddcli.options import DEFAULT_STORE, FormatOpt, JsonOpt, OutputOpt, StoreOpt, store_at

MasterOpt = Annotated[Optional[str], typer.Option(
    "--master", envvar="DDCLI_SPARK_MASTER", metavar="URL",
    help="The Spark master a run would use (default: local[*]); a loop's path depends on its task slots.")]


@app.command(epilog=EXIT_CODES_HELP)
def explain(
    pipelines: Annotated[list[str], typer.Argument(
        metavar="PIPELINE...", help="Pipeline files (a .py defining pipeline(p), or a .sql model of views).")],
    name: Annotated[Optional[str], typer.Option(
        "--name", "-n", metavar="N", help="The pipeline's name, as given to ddcli run (default: the file name).")] = None,
    master: MasterOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """What a pipeline will do, without starting Spark.

    Every operator with the line of the file that declares it and what it computes; the
    arrangements (collections whose old updates stateful operators read, kept as traces)
    and which operators share them; every loop with the path its batches will take (in
    tasks, partition-local or resident; in one task; or round by round, a Spark job a
    round) and why; the priorities; the inputs and outputs with their since and upper and
    how far behind each input the pipeline is; and the state traces with their rows and
    bytes when the pipeline ran before. --json prints one JSON object per pipeline.

    Examples:

        ddcli explain sample_data/pipelines/reach.py

        ddcli explain sample_data/pipelines/cc.py --json
    """
    out = render.choose_format(fmt, json_, output, store)
    if out not in ("table", "jsonl"):
        raise render.RenderError(f"explain prints sections or JSON Lines, not {out}: use --json or no --format")
    if name is not None and len(pipelines) > 1:
        raise typer.BadParameter("--name names one pipeline: give one PIPELINE with it", param_hint="--name")
    import dataclasses

    from ops.explain.explain import explain_pipeline
    st = store_at(store)
    found = [explain_pipeline(st, path, name=name, master=master) for path in pipelines]
    if out == "jsonl":
        render.records([{"command": "explain", **dataclasses.asdict(ex)} for ex in found], output)
        return
    from ddcli.explain_view import explanation
    render.renderables([explanation(ex) for ex in found], output)


@app.command(epilog=EXIT_CODES_HELP)
def runs(
    pipeline: Annotated[Optional[str], typer.Argument(
        metavar="PIPELINE", help="One pipeline (default: every pipeline).")] = None,
    last: Annotated[Optional[int], typer.Option(
        "--last", min=1, metavar="N", help="Only the newest N runs of each pipeline.")] = None,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The recent runs of the pipelines: when, seconds, input and output updates, Spark jobs.

    Each run that commits keeps its figures (those `ddcli run --json` reports: when it
    committed, its seconds up to the commit, the new input updates it read, the output
    updates it wrote, its Spark jobs and timed steps) in the store, in the same commit.
    The newest DDCLI_RUN_HISTORY runs of each pipeline are kept (default 30); a pipeline
    that is dropped takes its history with it. --json keeps every step of every run.

    Examples:

        ddcli runs

        ddcli runs wordcount --last 5 --json
    """
    out = render.choose_format(fmt, json_, output, store)
    from storage.state.history import history_rows
    st = store_at(store)
    rows = history_rows(st.state(), pipeline)
    if last is not None:
        kept: dict[str, list[dict]] = {}
        for r in rows:
            kept.setdefault(r["pipeline"], []).append(r)
        rows = [r for rs in kept.values() for r in rs[-last:]]
    if out == "jsonl":
        render.records([{"kind": "run", **r} for r in rows], output)
        return
    import json

    import pyarrow as pa
    if out == "table":
        shown = [{**r, "outputs": ", ".join(f"{o} +{n:,}" for o, n in (r["outputs"] or {}).items()),
                  "inputs": ", ".join(f"{i} ({n} layer{'s' if n != 1 else ''})" for i, n in (r["inputs"] or {}).items()),
                  "steps": len(r["steps"] or [])} for r in rows]
    else:
        shown = [{**r, **{k: json.dumps(r[k]) for k in ("outputs", "inputs", "steps")}} for r in rows]
    schema = pa.schema([("pipeline", pa.string()), ("run", pa.int64()), ("when", pa.string()),
                        ("seconds", pa.float64()), ("rows_in", pa.int64()), ("rows_out", pa.int64()),
                        ("spark_jobs", pa.int64()), ("frontier", pa.string()), ("outputs", pa.string()),
                        ("inputs", pa.string()), ("steps", pa.int64() if out == "table" else pa.string())])
    render.table(pa.Table.from_pylist(shown, schema=schema), out, output,
                 title=f"runs of {pipeline}" if pipeline else f"runs in {st.path}")


@app.command(epilog=EXIT_CODES_HELP)
def report(
    output: Annotated[str, typer.Option(
        "--output", "-o", metavar="FILE.html", help="The page to write (a new file or one to replace).")],
    commits: Annotated[int, typer.Option(
        "--commits", min=1, metavar="N", help="The newest N commits shown (and plotted for lag).")] = 30,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Write one self-contained HTML page of the store.

    The page shows the traces (rows, layers, bytes, since, upper), the pipelines and
    readers with a lineage graph (input traces -> pipelines -> outputs), each pipeline's
    runs (seconds and updates per run) and lag as plots, and the recent commits (when,
    what changed). It loads nothing from anywhere: styles and pictures (inline SVG) are
    in the file, so it opens offline, from a CI artefact or a mail.

    Example:

        ddcli report -o store.html
    """
    render.check_output(output, store=store)
    import os

    from ddcli.report.page import report_html
    st = store_at(store)
    html = report_html(st, commits=commits)
    render.text(html, output)  # replaced whole, a local file or an s3:// object (ddcli/outputs.py)
    where = output if output.startswith("s3://") else os.path.abspath(output)
    render.report({"command": "report", "output": where, "bytes": len(html.encode())},
                  f"wrote {output} ({len(html.encode()):,} bytes)", "table")
