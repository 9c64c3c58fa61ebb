"""``ddcli run`` and ``ddcli verify``: the commands that start Spark.

Registered on the main app by ``ddcli/cli.py``; kept apart so the store commands never
import anything of Spark.
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.cli import (DEFAULT_STORE, EXIT_CODES_HELP, FormatOpt, JsonOpt, OutputOpt, StoreOpt,
                       StrictNoopOpt, _done, _store, app)

MasterOpt = Annotated[Optional[str], typer.Option(
    "--master", envvar="DDCLI_SPARK_MASTER", metavar="URL",
    help="Spark master URL (default: local[*], an embedded engine; a cluster needs the store on a shared filesystem).")]
NameOpt = Annotated[Optional[str], typer.Option(
    "--name", "-n", metavar="N", help="The pipeline's name (default: the file name); it names its state and holds.")]


def _progress_printer(enabled: bool):
    if not enabled:
        return None
    from rich.console import Console
    con = Console(stderr=True)
    return lambda msg: con.print(f"[dim]· {msg}[/dim]")


@app.command(epilog=EXIT_CODES_HELP)
def run(
    pipeline: Annotated[str, typer.Argument(metavar="PIPELINE.py", help="A pipeline file defining pipeline(p).")],
    name: NameOpt = None,
    master: MasterOpt = None,
    strict_noop: StrictNoopOpt = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Run a pipeline over every input update not yet processed, on Spark.

    Each input's updates since the pipeline's last run — however many distinct times —
    go through the pipeline in one run; output traces get every change at its exact time.
    Outputs, operator state and consumed positions are committed together: a run killed
    anywhere leaves the store as it was, and the next run does the same work. A run with
    no new input does nothing.

    Examples:

        ddcli run sample_data/pipelines/wordcount.py

        ddcli run my_pipeline.py --name nightly --master spark://host:7077
    """
    out = render.choose_format(fmt, json_, output)
    from ops.run import run_pipeline
    from storage.lattice import format_frontier
    st = _store(store)
    res = run_pipeline(st, pipeline, name=name, master=master,
                       progress=_progress_printer(out == "table" and sys.stderr.isatty()))
    record = {"command": "run", "pipeline": res.pipeline, "noop": res.nothing_to_do,
              "frontier": format_frontier(res.frontier) if res.frontier else None,
              "outputs": res.outputs, "inputs": res.inputs}
    if res.nothing_to_do:
        msg = f"nothing to do: pipeline {res.pipeline!r} has processed every input update"
    else:
        outs = ", ".join(f"{o} (+{n:,} updates)" for o, n in res.outputs.items())
        msg = f"pipeline {res.pipeline!r} ran: {outs}; complete up to {format_frontier(res.frontier)}"
    render.report(record, msg, out, output)
    _done(res.nothing_to_do, strict_noop)


@app.command(epilog=EXIT_CODES_HELP)
def verify(
    pipeline: Annotated[str, typer.Argument(metavar="PIPELINE.py", help="A pipeline file that has run.")],
    at: Annotated[Optional[list[str]], typer.Option(
        "--at", metavar="T", help="A time to check (repeatable; default: every time the inputs distinguish, up to --max-times).")] = None,
    max_times: Annotated[int, typer.Option(min=1, help="At most this many times when --at is not given.")] = 200,
    name: NameOpt = None,
    master: MasterOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Recompute a pipeline from scratch at each time and compare with its outputs.

    For every checked time t the inputs are accumulated at t and the pipeline is evaluated
    on them with no state (plain DataFrame work); every output trace accumulated at t must
    hold the same rows with the same counts. Reports the first differences; exit code 1 if
    there is one.

    Examples:

        ddcli verify sample_data/pipelines/wordcount.py

        ddcli verify sample_data/pipelines/length_count.py --at "(1,1)"
    """
    out = render.choose_format(fmt, json_, output)
    from ops.verify import verify_pipeline
    from storage.lattice import format_time, parse_time
    st = _store(store)
    times = [parse_time(t) for t in at] if at else None
    res = verify_pipeline(st, pipeline, name=name, at=times, master=master, max_times=max_times)
    record = {"command": "verify", "pipeline": res.pipeline, "ok": res.ok,
              "times": [format_time(t) for t in res.times],
              "differences": [d.describe() for d in res.differences]}
    if res.ok:
        msg = (f"pipeline {res.pipeline!r} verified at {len(res.times)} time(s): every output equals "
               f"the from-scratch evaluation")
    else:
        msg = f"pipeline {res.pipeline!r} differs from the from-scratch evaluation: " + res.differences[0].describe()
    render.report(record, msg, out, output)
    if not res.ok:
        raise typer.Exit(1)
