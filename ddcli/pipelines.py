"""``ddcli run`` and ``ddcli verify``: the commands that start Spark.

Registered on the main app by ``ddcli/cli.py``; kept apart so the store commands never
import anything of Spark.
"""

from __future__ import annotations

import json
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


def _quiet_pyspark_logging() -> None:
    """PySpark logs every SQL error it raises as a JSON record on stderr; the command reports
    the same error as its one ``error:`` line, so those loggers are silenced (configuring
    logging is the application's choice, made here, not in the library)."""
    import logging

    from pyspark.logger import PySparkLogger
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


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
    batch_times: Annotated[Optional[int], typer.Option(
        "--batch-times", min=1, metavar="N",
        help="Pipelines with loops (one-dimensional times): take the new updates in batches of at "
             "most N distinct times [default: 50000], compacting state in between, so that the cost "
             "of a big run grows linearly.")] = None,
    rebuild: Annotated[bool, typer.Option(
        "--rebuild", help="Recompute the pipeline from its inputs' since (after editing its file): "
                          "its state and outputs are replaced in the run's one commit.")] = False,
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

        ddcli run sample_data/pipelines/wordcount.py --rebuild
    """
    out = render.choose_format(fmt, json_, output)
    _quiet_pyspark_logging()
    from ops.run import run_pipeline
    from storage.lattice import format_frontier
    st = _store(store)
    res = run_pipeline(st, pipeline, name=name, master=master, batch_times=batch_times, rebuild=rebuild,
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
        "--at", metavar="T", help="A time to check (repeatable; default: every time the inputs and outputs distinguish).")] = None,
    max_times: Annotated[Optional[int], typer.Option(
        min=1, help="At most this many times (an even sample) when --at is not given [default: every time].")] = None,
    name: NameOpt = None,
    master: MasterOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Recompute a pipeline from scratch at each time and compare with its outputs.

    For every checked time t the inputs are accumulated at t and the pipeline's graph is
    evaluated on them by an independent oracle (plain Spark joins, group-bys and a driver
    loop for fixed points, no operator code shared with `run`); every output trace
    accumulated at t must hold the same rows with the same counts. Every time the inputs
    and outputs tell apart is checked, and the count is reported. Reports the first
    differences; exit code 1 if there is one.

    Examples:

        ddcli verify sample_data/pipelines/wordcount.py

        ddcli verify sample_data/pipelines/length_count.py --at "(1,1)"
    """
    out = render.choose_format(fmt, json_, output)
    _quiet_pyspark_logging()
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


# ---------------------------------------------------------------- pipeline benchmarks

from ddcli.cli import bench_app  # noqa: E402


def _check_bench_outputs(out_json: str | None, plot: str | None) -> None:
    """Refuse unwritable --out/--plot (and --plot without matplotlib) before any work."""
    render.check_output(out_json, "--out")
    render.check_output(plot, "--plot")
    if plot:
        from ddcli.bench import require_matplotlib
        require_matplotlib()


def _bench_log():
    from ddcli.bench import console_log
    return console_log()


@bench_app.command("incremental", epilog=EXIT_CODES_HELP)
def bench_incremental(
    updates: Annotated[int, typer.Option(min=1, help="Updates already processed.")] = 10_000_000,
    keys: Annotated[int, typer.Option(min=1, help="Distinct keys among them.")] = 1_000_000,
    new_updates: Annotated[int, typer.Option(min=1, help="New updates (each at its own time) in the timed run.")] = 1000,
    scale: Annotated[int, typer.Option(min=1, help="How many times more prior state (keys) for the second store.")] = 10,
    repeat: Annotated[int, typer.Option(min=1, help="Timed incremental runs per store (figures use the median).")] = 10,
    workdir: Annotated[Optional[str], typer.Option("--dir", metavar="DIR", help="Work directory (default: a temp dir, removed).")] = None,
    out_json: Annotated[Optional[str], typer.Option("--out", metavar="FILE.json", help="Write the figures as JSON.")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the run-time CDFs as PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Incremental run against from-scratch evaluation, and against 10x more prior state.

    Example:

        ddcli bench incremental --updates 100000 --keys 10000 --new-updates 100 --out incr.json --plot incr.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    from ddcli import bench_pipelines as bp
    res = bp.bench_incremental(updates=updates, keys=keys, new_updates=new_updates, scale=scale,
                               repeat=repeat, workdir=workdir, log=_bench_log())
    if out_json:
        with open(out_json, "w") as fh:
            json.dump(res, fh, indent=2)
    if plot:
        bp.plot_incremental(res, plot)
    f = res["figures"]
    msg = (f"incremental run of {new_updates:,} updates (median of {repeat}): {f['base']['incremental_s']:.2f} s; from scratch "
           f"(verify at the last time): {f['base']['from_scratch_s']:.2f} s; ratio {res['speedup_vs_from_scratch']:.1f}x\n"
           f"with {scale}x more prior state: {f['scaled']['incremental_s']:.2f} s "
           f"({res['scaled_over_base']:.2f}x the base run)")
    render.report(res, msg, out, output)


@bench_app.command("reach", epilog=EXIT_CODES_HELP)
def bench_reach(
    nodes: Annotated[int, typer.Option(min=2)] = 1000,
    edges: Annotated[int, typer.Option(min=1)] = 2000,
    roots: Annotated[int, typer.Option(min=1)] = 10,
    batch: Annotated[int, typer.Option(min=2, help="Updates in each timed run.")] = 10_000,
    points: Annotated[str, typer.Option(help="Updates processed before each latency measurement, comma-separated.")] = "1000,10000,100000,1000000",
    repeat: Annotated[int, typer.Option(min=1, help="Timed runs per point.")] = 3,
    filler: Annotated[int, typer.Option(min=2, help="Largest run used to reach the next point.")] = 100_000,
    throughput: Annotated[str, typer.Option(help="Run sizes for the throughput figures, comma-separated.")] = "10000,100000",
    workdir: Annotated[Optional[str], typer.Option("--dir", metavar="DIR", help="Work directory (default: a temp dir, removed).")] = None,
    out_json: Annotated[Optional[str], typer.Option("--out", metavar="FILE.json", help="Write the figures as JSON.")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the latency plot as PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Reachability with a sliding window: sustained latency, store size, throughput and scaling.

    Example:

        ddcli bench reach --nodes 200 --edges 400 --batch 1000 --points 1000,10000 --throughput 1000 --plot reach.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    from ddcli import bench_pipelines as bp

    def save(res: dict) -> None:  # after every figure: a long benchmark stopped early keeps its figures
        if out_json:
            with open(out_json, "w") as fh:
                json.dump(res, fh, indent=2)
        if plot and res["latency"]:
            bp.plot_reach(res, plot)

    res = bp.bench_reach(nodes=nodes, edges=edges, roots=roots, batch=batch,
                         points=[int(x) for x in points.split(",")], repeat=repeat, filler=filler,
                         throughput_batches=[int(x) for x in throughput.split(",")], workdir=workdir,
                         log=_bench_log(), progress=save)
    save(res)
    lines = [f"after {p['processed']:,} updates: a run of {batch:,} took {min(p['run_seconds']):.2f}-"
             f"{max(p['run_seconds']):.2f} s, store {p['store_bytes'] / 1e6:.1f} MB" for p in res["latency"]]
    lines.append(f"last point / first point: {res['latency_last_over_first']:.2f}x; store growth {res['store_growth']:.2f}x")
    for row in res["throughput"]:
        tp = ", ".join(f"{m}: {row[m]['updates_per_second']:,.0f} updates/s" for m in row if m.startswith("local"))
        lines.append(f"{row['batch']:,} updates per run: {tp}" + (f"; scaling {row['scaling']:.2f}x" if "scaling" in row else ""))
    render.report(res, "\n".join(lines), out, output)
