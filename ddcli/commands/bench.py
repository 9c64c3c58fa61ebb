"""``ddcli bench``: the benchmarks, as a table for people, JSON (``--out``) and PNG (``--plot``).

Each command checks its output files first, calls one driver of ``ddcli/bench/`` (which
returns the figures) and renders them. Spark and the drivers are imported inside the
commands' bodies.
"""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, bench_app
from ddcli.bench.common import console_log, require_matplotlib, write_json
from ddcli.options import FormatOpt, JsonOpt, OutputOpt

OutJsonOpt = Annotated[Optional[str], typer.Option("--out", metavar="FILE.json", help="Write the figures as JSON.")]
WorkdirOpt = Annotated[Optional[str], typer.Option(
    "--dir", metavar="DIR", help="Work directory (default: a temp dir, removed).")]


def _check_bench_outputs(out_json: str | None, plot: str | None) -> None:
    """Refuse unwritable --out/--plot (and --plot without matplotlib) before any work."""
    render.check_output(out_json, "--out")
    render.check_output(plot, "--plot")
    if plot:
        require_matplotlib()


@bench_app.command("storage", epilog=EXIT_CODES_HELP)
def bench_storage(
    updates: Annotated[int, typer.Option(min=1, help="Updates in the big ingest.")] = 10_000_000,
    keys: Annotated[int, typer.Option(min=1, help="Distinct keys.")] = 1_000_000,
    small_ingests: Annotated[int, typer.Option(min=0, help="Number of small ingests after the big one.")] = 1000,
    small_size: Annotated[int, typer.Option(min=1, help="Updates per small ingest.")] = 1000,
    repeat: Annotated[int, typer.Option(min=1, help="Timed repetitions of each query (median reported).")] = 5,
    meta_ingests: Annotated[int, typer.Option(
        min=0, help="One-row ingests of the metadata-log benchmark (log size and commit latency "
                    "after 10^2 of them against after all; 0 skips it).")] = 10_000,
    log_retention: Annotated[float, typer.Option(
        min=0, help="Seconds the metadata benchmark keeps old log versions.")] = 30.0,
    delta_ingests: Annotated[int, typer.Option(
        min=0, help="Small ingests into a store writing Delta Lake logs and into one not, "
                    "for the latency ratio (0 skips it).")] = 200,
    workdir: Annotated[Optional[str], typer.Option(
        "--dir", metavar="DIR", help="Where to put the generated files and the store (default: a temp dir, removed).")] = None,
    s3: Annotated[bool, typer.Option(
        "--s3", help="Put the store on a local S3-compatible server (moto, started for the benchmark) "
                     "and count the requests per commit.")] = False,
    out_json: OutJsonOpt = None,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", metavar="FILE.png",
        help="Draw the figures as a PNG: latency CDF of the small ingests, layers after each (needs matplotlib).")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Ingest, merge and query throughput of the trace store.

    Ingests UPDATES updates (KEYS keys, d = 1) from Parquet, then SMALL-INGESTS ingests of
    SMALL-SIZE updates; reports updates/s, layers, bytes on disk against one consolidated
    Parquet file, and query --as-of against DuckDB over that file. Then META-INGESTS
    one-row ingests into a fresh store: the metadata log's size and commit latency after
    10^2 of them against after all. Then DELTA-INGESTS ingests with and without Delta Lake
    logs: the latency ratio.

    Example:

        ddcli bench storage --updates 100000 --keys 10000 --small-ingests 50 --out bench.json --plot bench.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    from ddcli.bench import storage as bench
    res = bench.bench_storage(updates=updates, keys=keys, small_ingests=small_ingests,
                              small_size=small_size, repeat=repeat, workdir=workdir,
                              meta_ingests=meta_ingests, log_retention=log_retention, s3=s3,
                              delta_ingests=delta_ingests, log=None if out != "table" else console_log())
    if out_json:
        write_json(res, out_json)
    if plot:
        bench.write_plot(res, plot)
    if out == "table":
        bench.print_table(res, output)
    else:
        render.report(res, "", out, output)


@bench_app.command("incremental", epilog=EXIT_CODES_HELP)
def bench_incremental(
    updates: Annotated[int, typer.Option(min=1, help="Updates already processed.")] = 10_000_000,
    keys: Annotated[int, typer.Option(min=1, help="Distinct keys among them.")] = 1_000_000,
    new_updates: Annotated[int, typer.Option(min=1, help="New updates (each at its own time) in the timed run.")] = 1000,
    scale: Annotated[int, typer.Option(min=1, help="How many times more prior state (keys) for the second store.")] = 10,
    repeat: Annotated[int, typer.Option(min=1, help="Timed incremental runs per store (figures use the median).")] = 10,
    workdir: WorkdirOpt = None,
    s3: Annotated[bool, typer.Option(
        "--s3", help="Put the stores on a local S3-compatible server (moto, started for the benchmark) "
                     "and count the requests per commit.")] = False,
    out_json: OutJsonOpt = None,
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
    from ddcli.bench import incremental
    res = incremental.bench_incremental(updates=updates, keys=keys, new_updates=new_updates, scale=scale,
                                        repeat=repeat, workdir=workdir, log=console_log(), s3=s3)
    if out_json:
        write_json(res, out_json)
    if plot:
        incremental.plot_incremental(res, plot)
    f = res["figures"]
    msg = (f"incremental run of {new_updates:,} updates (median of {repeat}): {f['base']['incremental_s']:.2f} s; from scratch "
           f"(verify at the last time): {f['base']['from_scratch_s']:.2f} s; ratio {res['speedup_vs_from_scratch']:.1f}x\n"
           f"with {scale}x more prior state: {f['scaled']['incremental_s']:.2f} s "
           f"({res['scaled_over_base']:.2f}x the base run)")
    if f["base"]["requests_per_commit"] is not None:
        msg += (f"\nstore {f['base']['store']}: {f['base']['requests_per_commit']:.1f} requests per commit at "
                f"{f['base']['versions']:,} versions, {f['scaled']['requests_per_commit']:.1f} at {f['scaled']['versions']:,}")
    render.report(res, msg, out, output)


@bench_app.command("rebuild", epilog=EXIT_CODES_HELP)
def bench_rebuild(
    orders: Annotated[int, typer.Option(min=1, help="Orders the pipeline has processed.")] = 200_000,
    customers: Annotated[int, typer.Option(min=1, help="Customers they are placed by.")] = 20_000,
    regions: Annotated[int, typer.Option(min=2, help="Regions the customers live in.")] = 50,
    times: Annotated[int, typer.Option(min=2, help="Distinct times of the orders.")] = 50,
    new_orders: Annotated[int, typer.Option(min=1, help="New orders in the runs after a comment edit.")] = 1000,
    repeat: Annotated[int, typer.Option(min=1, help="Timed runs of each kind (figures use the median).")] = 3,
    workdir: WorkdirOpt = None,
    out_json: OutJsonOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the times as a PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """What an edit of a pipeline file costs: a comment edit, and the last operator changed.

    A three-stage pipeline (a join, a sum, a select) has run over ORDERS orders at TIMES
    times. A comment edit: the next run needs no rebuild (timed against the unedited file).
    The last operator changed: `run --rebuild` (the changed operators, from the unchanged
    join's stored state) timed against `run --rebuild-all` (everything, from the inputs).

    Example:

        ddcli bench rebuild --orders 50000 --out docs/bench/rebuild.json --plot docs/bench/rebuild.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    from ddcli.bench import rebuild
    res = rebuild.bench_rebuild(orders=orders, customers=customers, regions=regions, times=times,
                                new_orders=new_orders, repeat=repeat, workdir=workdir, log=console_log())
    if out_json:
        write_json(res, out_json)
    if plot:
        rebuild.plot_rebuild(res, plot)
    ce, lo = res["comment_edit"], res["last_operator"]
    msg = (f"comment edit: {'a rebuild was needed' if ce['rebuild_needed'] else 'no rebuild'}; its run "
           f"{ce['commented_s']:.2f} s against {ce['unedited_s']:.2f} s unedited\n"
           f"last operator changed: --rebuild {lo['rebuild_s']:.2f} s against --rebuild-all "
           f"{lo['full_rebuild_s']:.2f} s (ratio {lo['ratio']:.2f}; recomputed {', '.join(lo['recomputed'])} "
           f"from {', '.join(lo['reused_state'])}); outputs equal: {lo['outputs_equal_at_latest_time']}")
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
    workdir: WorkdirOpt = None,
    out_json: OutJsonOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the latency plot as PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Reachability with a sliding window: sustained latency, store size, throughput and scaling.

    Example:

        ddcli bench reach --nodes 200 --edges 400 --batch 1000 --points 1000,10000 --throughput 1000 --plot reach.png
        ddcli bench reach --loop-paths --batch 10000 --out docs/bench/loops_local_pathway_10000.json
        ddcli bench reach --sustained --sustained-total 100000 --out sustained.json --plot sustained.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    from ddcli.bench import reach
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
    res = reach.bench_reach(nodes=nodes, edges=edges, roots=roots, batch=batch,
                            points=[int(x) for x in points.split(",")], repeat=repeat, filler=filler,
                            throughput_batches=[int(x) for x in throughput.split(",")], workdir=workdir,
                            log=console_log(), progress=save)
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
    from ddcli.bench import reach

    def save(res: dict) -> None:
        if out_json:
            write_json(res, out_json)
        if plot and res["latency"]:
            reach.plot_reach(res, plot)

    return save


def _bench_sustained(nodes, edges, roots, run, total, repeat, filler, workdir, out_json, plot, out, output) -> None:
    from ddcli.bench import reach

    save = _latency_saver(out_json, plot)
    res = reach.bench_reach_sustained(nodes=nodes, edges=edges, roots=roots, run=run, total=total, repeat=repeat,
                                      filler=filler, workdir=workdir, log=console_log(), progress=save)
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
        res = bench_loop_paths(nodes=nodes, edges=edges, roots=roots, batch=batch, work=work, log=console_log(),
                               paths=paths, pathway=pathway, samples=samples)
    finally:
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    if out_json:
        write_json(res, out_json)
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
    workdir: WorkdirOpt = None,
    out_json: OutJsonOpt = None,
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
    from ddcli.bench.against_duckdb import reduce
    res = reduce.bench_reduce(updates=updates, hot_keys=hot_keys, uniform_keys=uniform_keys, times=times,
                              new_updates=new_updates, repeat=repeat, one_key=one_key, one_key_times=one_key_times,
                              workdir=workdir, log=console_log())
    if out_json:
        write_json(res, out_json)
    if plot:
        reduce.plot_reduce(res, plot)
    f = res["figures"]
    lines = [f"{label}: run {f[label]['run_s']:.1f} s, peak {f[label]['peak_memory_bytes'] / 2**30:.2f} GiB, "
             f"DuckDB {f[label]['duckdb_s']:.2f} s, incremental run of {new_updates:,}: {f[label]['incremental_s']:.2f} s"
             for label in ("hot", "uniform")]
    lines.append(f"hot / uniform: {res['hot_over_uniform']:.2f}x; hot / DuckDB: {res['hot_over_duckdb']:.1f}x, "
                 f"uniform / DuckDB: {res['uniform_over_duckdb']:.1f}x (aim <= 5: "
                 f"{'met' if res['aims']['run_over_duckdb']['met'] else 'NOT met'}) "
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
    wide_times: Annotated[str, typer.Option(help="Times T of the wide cases, comma-separated.")] = "200,800,1600,6400",
    hot_times: Annotated[int, typer.Option(min=0, help="Times of the one hot key (0: skip).")] = 300_000,
    new_keys: Annotated[int, typer.Option(min=0, help="Keys changed by each incremental run (0: skip).")] = 10,
    repeat: Annotated[int, typer.Option(min=1, help="Timed incremental runs (median reported).")] = 3,
    workdir: WorkdirOpt = None,
    out_json: OutJsonOpt = None,
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
    from ddcli.bench.against_duckdb import join as bj
    res = bj.bench_join(keys=keys, times=tuple(main_times), wide_keys=wide_keys, wide_times=tuple(wide),
                        hot_times=hot_times, new_keys=new_keys, repeat=repeat, workdir=workdir, log=console_log())
    if out_json:
        write_json(res, out_json)
    if plot:
        bj.plot_join(res, plot)
    lines = [f"{c['keys']:,} keys, T={c['times']:,}: {c['run_s']:.1f} s, peak {c['peak_memory_bytes'] / 2**30:.2f} GiB, "
             f"{c['output_rows']:,} output rows, DuckDB {c['duckdb_s']:.2f} s"
             for c in res["cases"] + res["wide_cases"] + ([res["hot"]] if "hot" in res else [])]
    lines += [f"{x['keys']:,} keys, T {x['from']:,} -> {x['to']:,}: {x['ratio']:.2f}x wall, {x['cpu_ratio']:.2f}x CPU "
              f"per doubling" for x in res["doubling"]]
    lines += [f"aim {name}: {'met' if a['met'] else 'NOT met'}" for name, a in res["aims"].items()]
    if "incremental_s" in res:
        lines.append(f"incremental run of {new_keys} keys on a {wide_keys:,}-key store: {res['incremental_s']:.2f} s")
    lines.append(f"peak memory {res['peak_memory_bytes'] / 2**30:.2f} GiB; worst run / DuckDB {res['over_duckdb']:.1f}x "
                 f"(Spark's start, {res['spark_start_s']:.1f} s, not included); load average {res['load_average']:.1f} "
                 f"before, {res['load_average_after']:.1f} after")
    render.report(res, "\n".join(lines), out, output)


@bench_app.command("backfill", epilog=EXIT_CODES_HELP)
def bench_backfill(
    days: Annotated[str, typer.Option(help="Days T of the cases, comma-separated (one run over all T days each).")]
        = "90,180,365,730",
    per_day: Annotated[int, typer.Option(min=1, help="Trips a day.")] = 4000,
    routes: Annotated[int, typer.Option(min=1, help="Routes (the keys of the aggregates and the join).")] = 1000,
    groups: Annotated[int, typer.Option(min=1, help="Groups of routes (the keys of the top 3).")] = 20,
    workdir: WorkdirOpt = None,
    out_json: OutJsonOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the figures as PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """A backfill of T days of trips: sum and count by route joined into an average, then
    the top 3 routes per group, one run over all T days; every output change checked against
    DuckDB computing the same changes directly.

    Example:

        ddcli bench backfill --days 30,60 --per-day 1000 --out backfill.json --plot backfill.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    from ddcli.bench.against_duckdb import backfill
    res = backfill.bench_backfill(days=tuple(sorted(_int_list(days))), per_day=per_day, routes=routes, groups=groups,
                                  workdir=workdir, log=console_log())
    if out_json:
        write_json(res, out_json)
    if plot:
        backfill.plot_backfill(res, plot)
    lines = [f"{c['days']} days, {c['trips']:,} trips: {c['run_s']:.1f} s ({c['run_cpu_s']:.1f} s CPU), peak "
             f"{c['peak_memory_bytes'] / 2**30:.2f} GiB, {sum(c['output_rows'].values()):,} output rows, "
             f"DuckDB {c['duckdb_s']:.2f} s" for c in res["cases"]]
    lines += [f"T {x['from']} -> {x['to']}: {x['ratio']:.2f}x wall, {x['cpu_ratio']:.2f}x CPU, "
              f"{x['cpu_ratio_beyond_fixed']:.2f}x CPU beyond a run's fixed cost, per doubling" for x in res["doubling"]]
    lines += [f"aim {name}: {'met' if a['met'] else 'NOT met'} ({a['measured']})" for name, a in res["aims"].items()]
    lines.append(f"a run's fixed cost {res['fixed']['run_s']:.1f} s ({res['fixed']['run_cpu_s']:.1f} s CPU), included; "
                 f"load average {res['load_average']:.1f} "
                 f"before, {res['load_average_after']:.1f} after")
    render.report(res, "\n".join(lines), out, output)


@bench_app.command("priority", epilog=EXIT_CODES_HELP)
def bench_priority(
    nodes: Annotated[int, typer.Option(min=2, help="Nodes of the random graph.")] = 10_000,
    edges: Annotated[int, typer.Option(min=1, help="Edges of the random graph (and of the sliding window).")] = 20_000,
    roots: Annotated[int, typer.Option(min=1, help="Roots of the shortest paths.")] = 1,
    updates: Annotated[int, typer.Option(min=2, help="Updates in each run after the first.")] = 1_000,
    runs: Annotated[int, typer.Option(min=0, help="Runs after the first, each of UPDATES updates.")] = 1,
    max_weight: Annotated[int, typer.Option(min=1, help="Edge weights are random in 1..MAX-WEIGHT.")] = 10,
    variants: Annotated[str, typer.Option(
        help="The pipelines to compare, comma-separated (cc and sssp, each with and without priority).")]
    = "cc_prioritized,cc_plain,sssp_prioritized,sssp_plain",
    out_json: OutJsonOpt = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The same loops with and without priority: run time, rounds and updates inside the loop.

    Connected components and weighted shortest paths over one random graph: a first run
    over the whole graph, then RUNS runs of UPDATES updates each (a sliding window).

    Example:

        ddcli bench priority --nodes 10000 --edges 20000 --out priority.json
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, None)
    from ddcli.bench import priority
    chosen = [v.strip() for v in variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in priority.VARIANTS]
    if unknown or not chosen:
        raise typer.BadParameter(f"unknown variant {unknown[0] if unknown else variants!r}: use "
                                 f"{', '.join(priority.VARIANTS)}", param_hint="--variants")
    log = console_log()
    res = priority.bench_priority(nodes, edges, roots, updates, runs, max_weight, variants=chosen,
                                  log=log or (lambda msg: None))
    if out_json:
        write_json(res, out_json)
    lines = [f"{r['variant']}, {r['run']} run: {r['seconds']:.1f} s, {r['rounds']:,} rounds, "
             f"{r['loop_updates']:,} updates inside the loop" for r in res["figures"]]
    render.report(res, "\n".join(lines), out, output)


@bench_app.command("small", epilog=EXIT_CODES_HELP)
def bench_small(
    repeat: Annotated[int, typer.Option(min=1, help="Timed one-update runs and queries (medians reported).")] = 5,
    updates: Annotated[int, typer.Option(min=2, help="Updates in the node-set reach's timed run.")] = 10_000,
    nodes: Annotated[int, typer.Option(min=2, help="Nodes of the sliding-window graph.")] = 1000,
    edges: Annotated[int, typer.Option(min=1, help="Edges of the sliding-window graph.")] = 2000,
    roots: Annotated[int, typer.Option(min=1, help="Roots of the reachability.")] = 10,
    no_pathway: Annotated[bool, typer.Option("--no-pathway", help="Leave Pathway out.")] = False,
    workdir: WorkdirOpt = None,
    out_json: OutJsonOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the figures as PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """What a small change costs: a one-update run of word count against a query, with
    the warm engine off (cold) and on (warm), and the node-set reach at UPDATES updates a
    run against Pathway, each command a real ddcli process (the benchmark's own service,
    stopped at the end).

    Example:

        ddcli bench small --out docs/bench/small.json --plot docs/bench/small.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    import shutil
    import tempfile

    from ddcli.bench import small
    work = workdir or tempfile.mkdtemp(prefix="ddbs-", dir="/tmp" if os.path.isdir("/tmp") else None)
    os.makedirs(work, exist_ok=True)
    try:
        res = small.bench_small(repeat=repeat, updates=updates, nodes=nodes, edges=edges, roots=roots, work=work,
                                log=console_log(), pathway=not no_pathway)
    finally:
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    if out_json:
        write_json(res, out_json)
    if plot:
        small.plot_small(res, plot)
    cold, warm, rn = res["wordcount_cold"], res["wordcount_warm"], res["reach_nodes"]
    msg = (f"word count, a one-update run against a query (median of {repeat}): cold {cold['run_s']:.2f} s / "
           f"{cold['query_s']:.2f} s = {cold['run_over_query']:.1f}x; warm {warm['run_s']:.2f} s / "
           f"{warm['query_s']:.2f} s = {warm['run_over_query']:.1f}x\n"
           f"node-set reach, {updates:,} updates in one run (warm): {rn['run_s']:.2f} s"
           + (f"; Pathway {rn['pathway']['seconds']:.2f} s: ddcli / Pathway {rn['ddcli_over_pathway']:.2f}x"
              if "pathway" in rn else "")
           + f"\nnode-set reach's first run {rn['first_run_s']:.2f} s, a one-update run of it "
             f"{rn['one_update_run_s']:.2f} s; first run / warm word count run "
             f"{res['aims']['reach_nodes_first_run_over_warm_one_update_run']['value']:.1f}x")
    render.report(res, msg, out, output)


@bench_app.command("tpch", epilog=EXIT_CODES_HELP)
def bench_tpch(
    scale: Annotated[float, typer.Option(min=0.001, help="TPC-H scale factor (1: 6 million lineitems).")] = 1.0,
    refreshes: Annotated[int, typer.Option(min=1, help="Refreshes run through the warm engine (one cold refresh follows).")] = 3,
    refresh_fraction: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Share of the orders each refresh deletes and inserts, with their lineitems.")] = 0.001,
    customers: Annotated[int, typer.Option(min=0, help="Customers each refresh moves to another segment and nation.")] = 5,
    cache: Annotated[Optional[str], typer.Option(
        "--cache", metavar="DIR", help="Where the generated base tables are kept [default: tpch/ in DDCLI_CACHE_DIR, "
                                       "else ~/.cache/ddcli/tpch].")] = None,
    queries: Annotated[Optional[str], typer.Option(
        "--queries", metavar="Q,...", help="Only these queries, comma-separated (q01 ... q22) [default: all 22].")] = None,
    no_spark_sql: Annotated[bool, typer.Option("--no-spark-sql", help="Leave out Spark SQL's 22 over the base.")] = False,
    workdir: WorkdirOpt = None,
    out_json: OutJsonOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Save the figures as PNG.")] = None,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """TPC-H's 22 queries as SQL models: a warm ddcli run of each refresh against DuckDB
    recomputing the 22 from scratch, on the same data in the same run, every output checked
    against DuckDB's; the base's ingest and first run, against Spark SQL's 22 once.

    Example:

        ddcli bench tpch --scale 0.01 --refreshes 3 --out docs/bench/tpch.json --plot docs/bench/tpch.png
    """
    out = render.choose_format(fmt, json_, output)
    _check_bench_outputs(out_json, plot)
    import shutil
    import tempfile

    from ddcli.bench.tpch import bench as tpch
    from ddcli.bench.tpch.data import GenerationError
    from ddcli.bench.tpch.data import query_files
    known = [os.path.basename(f)[:-len(".sql")] for f in query_files()]
    chosen = [q.strip().lower() for q in queries.split(",") if q.strip()] if queries else None
    unknown = [q for q in chosen or [] if q not in known]
    if unknown or chosen == []:
        raise typer.BadParameter(f"unknown query {unknown[0] if unknown else queries!r}: use q01 ... q22",
                                 param_hint="--queries")
    work = workdir or tempfile.mkdtemp(prefix="ddbt-", dir="/tmp" if os.path.isdir("/tmp") else None)
    os.makedirs(work, exist_ok=True)
    try:
        res = tpch.bench_tpch(scale=scale, refreshes=refreshes, fraction=refresh_fraction, customers=customers,
                              cache=cache, work=work, spark_sql=not no_spark_sql, queries=chosen,
                              log=console_log())
    except GenerationError as e:
        raise render.RenderError(str(e)) from None
    finally:
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    if out_json:
        write_json(res, out_json)
    if plot:
        from ddcli.bench.tpch.plot import plot_tpch
        plot_tpch(res, plot)
    s, n = res["summary"], len(res["queries"])
    lines = [f"scale {scale:g}: {res['rows']['lineitem']:,} lineitems; each refresh {res['orders_per_refresh']:,} orders "
             f"and {customers} customers",
             f"base: ingest {s['base_ingest_s']:.1f} s (peak {s['base_ingest_peak_bytes'] / 2**30:.2f} GiB), first run of "
             f"the {n} {s['first_run_s']:.1f} s, Spark SQL's {n} {s['spark_sql_s'] or 0:.1f} s, DuckDB's {n} "
             f"{s['duckdb_base_s']:.2f} s",
             f"refresh: ingest {s['refresh_ingest_s']:.1f} s, warm run of the {n} {s['warm_refresh_s']:.1f} s, cold "
             f"{s['cold_refresh_s']:.1f} s; DuckDB recomputes the {n} in {s['duckdb_recompute_s']:.2f} s "
             f"(ddcli / DuckDB {s['refresh_over_duckdb']}x)",
             f"mismatches with DuckDB: {s['mismatches']}"]
    lines += [f"aim {name}: {'met' if a['met'] else 'not measured' if a['met'] is None else 'NOT met'} ({a['measured']})"
              for name, a in res["aims"].items()]
    render.report(res, "\n".join(lines), out, output)
