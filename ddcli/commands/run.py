"""``ddcli run`` and ``ddcli verify``: the commands that start Spark.

Registered on the main app by ``ddcli/cli.py``; kept apart so the store commands never
import anything of Spark.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.cli import (DEFAULT_STORE, EXIT_CODES_HELP, FormatOpt, JsonOpt, OutputOpt, StoreOpt,
                       StrictNoopOpt, _done, _store, app)

MasterOpt = Annotated[Optional[str], typer.Option(
    "--master", envvar="DDCLI_SPARK_MASTER", metavar="URL",
    help="Spark master URL (default: local[*], an embedded engine). A cluster (spark://HOST:PORT) needs the store "
         "on a shared filesystem and a Python with pyarrow, numpy and pandas on the workers "
         "(DDCLI_SPARK_EXECUTOR_PYTHON); ddcli ships its own code. See DDCLI_SPARK_DRIVER_HOST and "
         "DDCLI_SPARK_BIND_ADDRESS for the driver's address.")]
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
    """Progress lines on stderr: on a terminal, or anywhere with DDCLI_PROGRESS=1."""
    import os
    enabled = enabled or os.environ.get("DDCLI_PROGRESS", "") not in ("", "0")
    if not enabled:
        return None
    from rich.console import Console
    con = Console(stderr=True)
    return lambda msg: con.print(f"[dim]· {msg}[/dim]", soft_wrap=True, highlight=False)  # one line each


@contextlib.contextmanager
def stopping_spark_on_interrupt(committed: list[str]):
    """Ctrl-C during a run: stop Spark and exit 130 with one line, whatever error the
    cancelled Spark job surfaced as. A run commits nothing after Ctrl-C (see ops/run/run.py);
    ``committed`` names the pipelines of this command that committed before it."""
    from ops.spark import session
    try:
        yield
    except BaseException as e:
        if not (session.interrupted() or isinstance(e, KeyboardInterrupt)):
            raise
        try:
            session.stop_spark()
        except BaseException:  # noqa: BLE001 - stopping is best effort; the JVM dies with us
            pass
        before = f" (committed before it: {', '.join(committed)})" if committed else ""
        render.error(f"interrupted; nothing was written{before}")
        raise typer.Exit(EXIT_INTERRUPTED) from None


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


def _leased(store_path: str, name: str):
    """The run lease of pipeline ``name`` (storage/writes/lease.py); none for a name that
    loading the pipeline will refuse anyway."""
    from ops.dataflow.load import NAME_RE
    from storage.writes.lease import lease
    return lease(store_path, name) if NAME_RE.match(name) else contextlib.nullcontext()


def _run_record(res, seconds: float) -> tuple[dict, str]:
    from storage.lattice import format_frontier
    record = {"command": "run", "pipeline": res.pipeline, "noop": res.nothing_to_do,
              "frontier": format_frontier(res.frontier) if res.frontier else None,
              "outputs": res.outputs, "inputs": res.inputs, "seconds": round(seconds, 3),
              "rows_in": res.rows_in, "rows_out": sum(res.outputs.values()),
              "spark_jobs": res.spark_jobs, "steps": res.steps}
    if res.nothing_to_do:
        msg = f"nothing to do: pipeline {res.pipeline!r} has processed every input update"
    else:
        outs = ", ".join(f"{o} (+{n:,} updates)" for o, n in res.outputs.items())
        msg = (f"pipeline {res.pipeline!r} ran in {seconds:.1f} s: {res.rows_in:,} new input updates -> {outs}; "
               f"complete up to {format_frontier(res.frontier)}")
    return record, msg


def _report_all(records: list[dict], messages: list[str], out: str, output: str | None) -> None:
    if len(records) == 1 or out == "table":
        if out == "table":
            render.report({}, "\n".join(messages), out, output)
        else:
            render.report(records[0], messages[0], out, output)
        return
    import pyarrow as pa
    if out == "jsonl" and output is None:
        for r in records:
            render.report(r, "", out, None)
        return
    flat = [{k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in r.items()} for r in records]
    render.table(pa.Table.from_pylist(flat), out, output)


@app.command(epilog=EXIT_CODES_HELP)
def run(
    pipelines: Annotated[list[str], typer.Argument(
        metavar="PIPELINE.py...", help="Pipeline files defining pipeline(p), run in this order.")],
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
    """Run pipelines over every input update not yet processed, on Spark.

    Each input's updates since the pipeline's last run — however many distinct times —
    go through the pipeline in one run; output traces get every change at its exact time.
    Outputs, operator state and consumed positions are committed together: a run killed
    anywhere leaves the store as it was, and the next run does the same work. A run with
    no new input does nothing.

    Several files run one after the other in one Spark session, each its own commit: a
    pipeline that fails commits nothing and is named; the others still run. A run of a
    pipeline another process is running exits 3 at its start (a lease in the store).

    Examples:

        ddcli run sample_data/pipelines/wordcount.py

        ddcli run counts.py joins.py --json

        ddcli run my_pipeline.py --name nightly --master spark://host:7077

        ddcli run sample_data/pipelines/wordcount.py --rebuild
    """
    import time

    out = render.choose_format(fmt, json_, output)
    if name is not None and len(pipelines) > 1:
        raise typer.BadParameter("--name names one pipeline: give one PIPELINE.py with it", param_hint="--name")
    _quiet_pyspark_logging()
    from ddcli.cli import exit_code_for
    from ops.dataflow.load import default_name
    from ops.run.run import run_pipeline
    st = _store(store)
    progress = _progress_printer(out == "table" and sys.stderr.isatty())
    records, messages, failures, committed = [], [], [], []
    with stopping_spark_on_interrupt(committed):
        for path in pipelines:
            started = time.monotonic()
            try:
                with _leased(st.path, name or default_name(path)):
                    res = run_pipeline(st, path, name=name, master=master, batch_times=batch_times,
                                       rebuild=rebuild, progress=progress)
            except Exception as e:  # noqa: BLE001 - named below, with its own exit code
                if len(pipelines) == 1:
                    raise
                failures.append((path, e))
                continue
            if not res.nothing_to_do:
                committed.append(res.pipeline)
            record, msg = _run_record(res, time.monotonic() - started)
            records.append(record)
            messages.append(msg)
    if records:
        _report_all(records, messages, out, output)
    if failures:
        path, e = failures[0]
        others = f"; also failed: {', '.join(p for p, _ in failures[1:])}" if failures[1:] else ""
        ran = "; the other pipelines ran" if records else ""
        render.error(f"pipeline {path} failed, nothing of it was committed: {e}{others}{ran}")
        raise typer.Exit(exit_code_for(e))
    _done(all(r["noop"] for r in records), strict_noop)


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
    from ops.verify.verify import verify_pipeline
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
        from ddcli.bench.storage import require_matplotlib
        require_matplotlib()


def _bench_log():
    from ddcli.bench.storage import console_log
    return console_log()


@bench_app.command("incremental", epilog=EXIT_CODES_HELP)
def bench_incremental(
    updates: Annotated[int, typer.Option(min=1, help="Updates already processed.")] = 10_000_000,
    keys: Annotated[int, typer.Option(min=1, help="Distinct keys among them.")] = 1_000_000,
    new_updates: Annotated[int, typer.Option(min=1, help="New updates (each at its own time) in the timed run.")] = 1000,
    scale: Annotated[int, typer.Option(min=1, help="How many times more prior state (keys) for the second store.")] = 10,
    repeat: Annotated[int, typer.Option(min=1, help="Timed incremental runs per store (figures use the median).")] = 10,
    workdir: Annotated[Optional[str], typer.Option("--dir", metavar="DIR", help="Work directory (default: a temp dir, removed).")] = None,
    s3: Annotated[bool, typer.Option(
        "--s3", help="Put the stores on a local S3-compatible server (moto, started for the benchmark) "
                     "and count the requests per commit.")] = False,
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
    from ddcli.bench import reach as bp
    res = bp.bench_incremental(updates=updates, keys=keys, new_updates=new_updates, scale=scale,
                               repeat=repeat, workdir=workdir, log=_bench_log(), s3=s3)
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
    if f["base"]["requests_per_commit"] is not None:
        msg += (f"\nstore {f['base']['store']}: {f['base']['requests_per_commit']:.1f} requests per commit at "
                f"{f['base']['versions']:,} versions, {f['scaled']['requests_per_commit']:.1f} at {f['scaled']['versions']:,}")
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
    loop_paths: Annotated[bool, typer.Option(
        "--loop-paths", help="Instead: the loop queries (--samples) with each loop path (round by round, partition-local): "
                             "first run time and updates/s of a run of BATCH updates.")] = False,
    paths: Annotated[str, typer.Option(help="With --loop-paths: the loop paths to measure, comma-separated (round, local, resident).")] = "round,local",
    pathway: Annotated[bool, typer.Option(help="With --loop-paths: also replay the stream in Pathway when it is installed.")] = True,
    samples: Annotated[str, typer.Option(help="With --loop-paths: the queries to measure, comma-separated (reach, bfs, cc; "
                                              "Pathway replays all three).")] = "reach,bfs",
    sustained: Annotated[bool, typer.Option(
        "--sustained", help="Instead: sustained latency on one store: a run of --sustained-run updates after "
                            "10^3, 10^4, ... --sustained-total updates (the bulk in runs of at most --filler, "
                            "advanced and compacted after every run), and the ratio last / first.")] = False,
    sustained_total: Annotated[int, typer.Option(min=2, help="With --sustained: updates processed before the last measurement.")] = 1_000_000,
    sustained_run: Annotated[int, typer.Option(min=2, help="With --sustained: updates in each timed run.")] = 1000,
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
        ddcli bench reach --loop-paths --batch 10000 --out docs/bench/reach_loop_paths.json
        ddcli bench reach --sustained --sustained-total 100000 --out sustained.json --plot sustained.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    from ddcli.bench import reach as bp
    if loop_paths and sustained:
        raise typer.BadParameter("--loop-paths and --sustained are two different benchmarks: give one")
    if sustained:
        _bench_sustained(nodes, edges, roots, sustained_run, sustained_total, repeat, filler, workdir,
                         out_json, plot, out, output)
        return
    if loop_paths:
        _bench_loop_paths(nodes, edges, roots, batch, workdir, out_json, plot, out, output,
                          paths=tuple(x.strip() for x in paths.split(",") if x.strip()), pathway=pathway,
                          samples=tuple(x.strip() for x in samples.split(",") if x.strip()))
        return

    save = _latency_saver(out_json, plot)
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


def _latency_saver(out_json, plot):
    """Writes a latency benchmark's JSON and plot after every point: a long benchmark
    stopped early keeps the figures it has."""
    from ddcli.bench import reach as bp

    def save(res: dict) -> None:
        if out_json:
            with open(out_json, "w") as fh:
                json.dump(res, fh, indent=2)
        if plot and res["latency"]:
            bp.plot_reach(res, plot)

    return save


def _bench_sustained(nodes, edges, roots, run, total, repeat, filler, workdir, out_json, plot, out, output) -> None:
    from ddcli.bench import reach as bp

    save = _latency_saver(out_json, plot)
    res = bp.bench_reach_sustained(nodes=nodes, edges=edges, roots=roots, run=run, total=total, repeat=repeat,
                                   filler=filler, workdir=workdir, log=_bench_log(), progress=save)
    save(res)
    lines = [f"after {p['processed']:,} updates: a run of {run:,} took {min(p['run_seconds']):.2f}-"
             f"{max(p['run_seconds']):.2f} s (load {min(p['load_average']):.1f}-{max(p['load_average']):.1f}); "
             f"store {p['store_rows']:,} rows, {p['store_bytes'] / 1e6:.1f} MB" for p in res["latency"]]
    lines.append(f"last / first: {res['latest_over_first']:.2f}x (fastest run at each point; aim: within 1.2x)")
    render.report(res, "\n".join(lines), out, output)


def _bench_loop_paths(nodes, edges, roots, batch, workdir, out_json, plot, out, output, *, paths=("round", "local"),
                      pathway=True, samples=("reach", "bfs")) -> None:
    import shutil
    import tempfile

    from ddcli.bench.loops import bench_loop_paths, plot_loop_paths
    bad = [x for x in paths if x not in ("round", "local")]
    if bad:
        raise typer.BadParameter(f"--paths: unknown loop path {bad[0]!r}: use round, local")
    bad = [x for x in samples if x not in ("reach", "bfs", "cc")]
    if bad:
        raise typer.BadParameter(f"--samples: unknown query {bad[0]!r}: use reach, bfs, cc")
    work = workdir or tempfile.mkdtemp(prefix="ddcli-bench-loops-")
    try:
        res = bench_loop_paths(nodes=nodes, edges=edges, roots=roots, batch=batch, work=work, log=_bench_log(),
                               paths=paths, pathway=pathway, samples=samples)
    finally:
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    if out_json:
        with open(out_json, "w") as fh:
            json.dump(res, fh, indent=2)
    if plot:
        plot_loop_paths(res, plot)
    lines = [f"{r['sample']} {r['path']}: first run {r['first_run_s']:.1f} s, {r['updates_per_second']:,.0f} updates/s "
             f"({r['spark_jobs']} Spark jobs)" for r in res["runs"]]
    lines += [f"{s}: partition-local / round by round = {x:.2f}x" for s, x in res["local_over_round"].items()]
    lines += [f"{r['sample']} Pathway {r['pathway']}: first run {r['first_run_s']:.1f} s, "
              f"{r['updates_per_second']:,.0f} updates/s; same output changes as ddcli: "
              + ", ".join(f"{k[8:]} {'yes' if v else 'NO'}" for k, v in r.items() if k.startswith("same_as_"))
              for r in res.get("pathway_runs", [])]
    lines += [f"{k}: ddcli / Pathway = {x:.3f}x (updates/s)" for k, x in res.get("ddcli_over_pathway", {}).items()]
    if res.get("pathway_skipped"):
        lines.append(res["pathway_skipped"])
    render.report(res, "\n".join(lines), out, output)


@bench_app.command("reduce", epilog=EXIT_CODES_HELP)
def bench_reduce(
    updates: Annotated[int, typer.Option(min=1, help="Insertions of distinct rows in the timed run.")] = 1_000_000,
    hot_keys: Annotated[int, typer.Option(min=1, help="Keys of the hot-key table.")] = 10,
    uniform_keys: Annotated[int, typer.Option(min=1, help="Keys of the uniform table.")] = 100_000,
    times: Annotated[int, typer.Option(min=1, help="Distinct times in the run.")] = 10_000,
    new_updates: Annotated[int, typer.Option(min=1, help="Updates in each incremental run afterwards.")] = 1000,
    repeat: Annotated[int, typer.Option(min=1, help="Timed incremental runs per table (median reported).")] = 3,
    one_key: Annotated[int, typer.Option(min=0, help="Also run one key holding this many updates (0: skip).")] = 0,
    one_key_times: Annotated[int, typer.Option(min=1, help="Distinct times of the one-key run.")] = 100_000,
    workdir: Annotated[Optional[str], typer.Option("--dir", metavar="DIR", help="Work directory (default: a temp dir, removed).")] = None,
    out_json: Annotated[Optional[str], typer.Option("--out", metavar="FILE.json", help="Write the figures as JSON.")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the figures as PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """count, sum, min and top_k(3) by key over a wide table: hot keys against uniform keys,
    against DuckDB's window functions over the same file (which also check every output).

    Example:

        ddcli bench reduce --updates 100000 --times 1000 --uniform-keys 10000 --out reduce.json --plot reduce.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    from ddcli.bench import reduce as br
    res = br.bench_reduce(updates=updates, hot_keys=hot_keys, uniform_keys=uniform_keys, times=times,
                          new_updates=new_updates, repeat=repeat, one_key=one_key, one_key_times=one_key_times,
                          workdir=workdir, log=_bench_log())
    if out_json:
        with open(out_json, "w") as fh:
            json.dump(res, fh, indent=2)
    if plot:
        br.plot_reduce(res, plot)
    f = res["figures"]
    lines = [f"{label}: run {f[label]['run_s']:.1f} s, peak {f[label]['peak_memory_bytes'] / 2**30:.2f} GiB, "
             f"DuckDB {f[label]['duckdb_s']:.2f} s, incremental run of {new_updates:,}: {f[label]['incremental_s']:.2f} s"
             for label in ("hot", "uniform")]
    lines.append(f"hot / uniform: {res['hot_over_uniform']:.2f}x; hot / DuckDB: {res['hot_over_duckdb']:.1f}x "
                 f"(Spark's start, {res['spark_start_s']:.1f} s, not included); incremental hot / uniform: "
                 f"{res['incremental_hot_over_uniform']:.2f}x")
    if "one_key" in res:
        o = res["one_key"]
        lines.append(f"one key, {o['updates']:,} updates at {o['times']:,} times: {o['run_s']:.1f} s, "
                     f"peak {o['peak_memory_bytes'] / 2**30:.2f} GiB, DuckDB {o['duckdb_s']:.2f} s, "
                     f"equal to it at {min(o['checked_points'].values()):,} times")
    render.report(res, "\n".join(lines), out, output)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"give whole numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"give whole numbers of at least 1, got {text!r}")
    return values


@bench_app.command("join", epilog=EXIT_CODES_HELP)
def bench_join(
    keys: Annotated[int, typer.Option(min=1, help="Keys of the main cases.")] = 20,
    times: Annotated[str, typer.Option(help="Times T of the main cases, comma-separated.")] = "200,800,1600,6400",
    wide_keys: Annotated[int, typer.Option(min=1, help="Keys of the wide cases.")] = 10_000,
    wide_times: Annotated[str, typer.Option(help="Times T of the wide cases, comma-separated.")] = "25,50,100",
    hot_times: Annotated[int, typer.Option(min=0, help="Times of the one hot key (0: skip).")] = 300_000,
    new_keys: Annotated[int, typer.Option(min=0, help="Keys changed by each incremental run (0: skip).")] = 10,
    repeat: Annotated[int, typer.Option(min=1, help="Timed incremental runs (median reported).")] = 3,
    workdir: Annotated[Optional[str], typer.Option("--dir", metavar="DIR", help="Work directory (default: a temp dir, removed).")] = None,
    out_json: Annotated[Optional[str], typer.Option("--out", metavar="FILE.json", help="Write the figures as JSON.")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the figures as PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """l.join(r, on="k") where every key's one live value on each side is replaced at each
    of T times, one run over all T times; against DuckDB computing the same changes (which
    also checks them).

    Example:

        ddcli bench join --times 200,400,800 --wide-times 25,50 --hot-times 0 --out join.json --plot join.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    main_times, wide = sorted(_int_list(times)), sorted(_int_list(wide_times))
    from ddcli.bench import join as bj
    res = bj.bench_join(keys=keys, times=tuple(main_times), wide_keys=wide_keys, wide_times=tuple(wide),
                        hot_times=hot_times, new_keys=new_keys, repeat=repeat, workdir=workdir, log=_bench_log())
    if out_json:
        with open(out_json, "w") as fh:
            json.dump(res, fh, indent=2)
    if plot:
        bj.plot_join(res, plot)
    lines = [f"{c['keys']:,} keys, T={c['times']:,}: {c['run_s']:.1f} s, peak {c['peak_memory_bytes'] / 2**30:.2f} GiB, "
             f"{c['output_rows']:,} output rows, DuckDB {c['duckdb_s']:.2f} s"
             for c in res["cases"] + res["wide_cases"] + ([res["hot"]] if "hot" in res else [])]
    lines += [f"{x['keys']:,} keys, T {x['from']:,} -> {x['to']:,}: {x['ratio']:.2f}x per doubling" for x in res["doubling"]]
    if "incremental_s" in res:
        lines.append(f"incremental run of {new_keys} keys on a {wide_keys:,}-key store: {res['incremental_s']:.2f} s")
    lines.append(f"peak memory {res['peak_memory_bytes'] / 2**30:.2f} GiB; worst run / DuckDB {res['over_duckdb']:.1f}x "
                 f"(Spark's start, {res['spark_start_s']:.1f} s, not included); load average {res['load_average']:.1f} "
                 f"before, {res['load_average_after']:.1f} after")
    render.report(res, "\n".join(lines), out, output)
