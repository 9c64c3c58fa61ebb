"""``ddcli run`` and ``ddcli verify``: the commands that start Spark.

Spark is imported inside the commands' bodies, so registering them imports none of it.
"""

from __future__ import annotations

import contextlib
import json
from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app, exit_code_for, store_warnings
from ddcli.completion import complete_pipelines
from ddcli.run_display import progress_output
from ddcli.options import DEFAULT_STORE, FormatOpt, JsonOpt, OutputOpt, StoreOpt, StrictNoopOpt, finish, store_at

MasterOpt = Annotated[Optional[str], typer.Option(
    "--master", envvar="DDCLI_SPARK_MASTER", metavar="URL",
    help="Spark master URL (default: local[*], an embedded engine). A cluster (spark://HOST:PORT) needs the store "
         "on a shared filesystem and a Python with pyarrow, numpy and pandas on the workers "
         "(DDCLI_SPARK_EXECUTOR_PYTHON); ddcli ships its own code. See DDCLI_SPARK_DRIVER_HOST and "
         "DDCLI_SPARK_BIND_ADDRESS for the driver's address.")]
NameOpt = Annotated[Optional[str], typer.Option(
    "--name", "-n", metavar="N", autocompletion=complete_pipelines,
    help="The pipeline's name (default: the file name); it names its state and holds.")]


def _quiet_pyspark_logging() -> None:
    """PySpark logs every SQL error it raises as a JSON record on stderr; the command reports
    the same error as its one ``error:`` line, so those loggers are silenced (configuring
    logging is the application's choice, made here, not in the library)."""
    import logging

    from pyspark.logger import PySparkLogger
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


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
            session.stop_after_interrupt()
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


def _announce_at_exit(say) -> None:
    """Let Spark's session say what it does when the command ends (it may take seconds)."""
    from ops.spark import session
    session.announce = say


def _run_one(st, path: str, name: str | None, live, emitter, **options):
    """One pipeline's run under its lease, shown by ``live`` (a live display) and told to
    OpenLineage through ``emitter`` (START, COMPLETE or FAIL)."""
    from ops.dataflow.load import default_name
    from ops.run.lineage import RunLineage
    from ops.run.run import run_pipeline
    pipeline = name or default_name(path)
    if live is not None:
        live.pipeline(pipeline)
    events = RunLineage(emitter, st, pipeline, path) if emitter is not None else None
    try:
        with _leased(st.path, pipeline):
            res = run_pipeline(st, path, name=name, planned=events.planned if events else None, **options)
    except BaseException as e:
        if events is not None:
            events.failed(e)
        raise
    if events is not None:
        events.completed(res)
    return res


def _run_record(res, seconds: float) -> tuple[dict, str]:
    from storage.lattice import format_frontier
    record = {"command": "run", "pipeline": res.pipeline, "noop": res.nothing_to_do,
              "frontier": format_frontier(res.frontier) if res.frontier else None,
              "outputs": res.outputs, "inputs": res.inputs, "seconds": round(seconds, 3),
              "rows_in": res.rows_in, "rows_out": sum(res.outputs.values()),
              "spark_jobs": res.spark_jobs, "steps": res.steps}
    if res.rebuilt is not None:
        record["rebuilt"] = res.rebuilt
    if res.nothing_to_do:
        msg = f"nothing to do: pipeline {res.pipeline!r} has processed every input update"
    else:
        outs = ", ".join(f"{o} (+{n:,} updates)" for o, n in res.outputs.items())
        msg = (f"pipeline {res.pipeline!r} ran in {seconds:.1f} s: {res.rows_in:,} new input updates -> {outs}; "
               f"complete up to {format_frontier(res.frontier)}")
        if res.rebuilt is not None:
            b = res.rebuilt
            msg += (f"; rebuilt: recomputed {', '.join(b['recomputed']) or 'nothing'}"
                    + (f" from the stored state {', '.join(b['reused_state'])}" if b["reused_state"] else "")
                    + (f", replaced {', '.join(b['replaced_outputs'])}" if b["replaced_outputs"] else ""))
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
        metavar="PIPELINE...", help="Pipeline files (a .py defining pipeline(p), or a .sql model of views), run in this order.")],
    name: NameOpt = None,
    master: MasterOpt = None,
    strict_noop: StrictNoopOpt = False,
    batch_times: Annotated[Optional[int], typer.Option(
        "--batch-times", min=1, metavar="N",
        help="Pipelines with loops (one-dimensional times): take the new updates in batches of at "
             "most N distinct times [default: 50000], compacting state in between, so that the cost "
             "of a big run grows linearly.")] = None,
    rebuild: Annotated[bool, typer.Option(
        "--rebuild", help="After editing the pipeline's file: recompute the operators whose definition changed "
                          "and what depends on them, reusing the stored state of the others (the outputs "
                          "recomputed from stored state are exact from the pipeline's frontier on), in a commit "
                          "of its own; then run over new input.")] = False,
    rebuild_all: Annotated[bool, typer.Option(
        "--rebuild-all", help="Recompute the whole pipeline from its inputs' since: its state and outputs are "
                              "replaced in the run's one commit, and the outputs keep their history.")] = False,
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

    out = render.choose_format(fmt, json_, output, store)
    if name is not None and len(pipelines) > 1:
        raise typer.BadParameter("--name names one pipeline: give one PIPELINE with it", param_hint="--name")
    _quiet_pyspark_logging()
    from ops.run import lineage
    from ops.run.progress import RunProgress
    st = store_at(store)
    say, live = progress_output(out)
    _announce_at_exit(say)
    emitter = lineage.Emitter() if lineage.enabled() else None
    records, messages, failures, committed = [], [], [], []
    from ops.spark.session import check_interrupt, interrupted
    try:
        with stopping_spark_on_interrupt(committed), (live or contextlib.nullcontext()), st.following_once():
            for path in pipelines:
                check_interrupt()  # Ctrl-C stops the whole command, not one pipeline of it
                started = time.monotonic()
                try:
                    res = _run_one(st, path, name, live, emitter, master=master, batch_times=batch_times,
                                   rebuild=rebuild, rebuild_all=rebuild_all, progress=RunProgress(say, live))
                except Exception as e:  # noqa: BLE001 - named below, with its own exit code
                    if len(pipelines) == 1 or interrupted():  # a cancelled job surfaces as any error
                        raise
                    failures.append((path, e))
                    continue
                if not res.nothing_to_do:
                    committed.append(res.pipeline)
                record, msg = _run_record(res, time.monotonic() - started)
                records.append(record)
                messages.append(msg)
    finally:
        lost = emitter.close() if emitter is not None else None
        if lost:
            store_warnings.append(lost)  # printed when the command succeeds
    if records:
        _report_all(records, messages, out, output)
    if failures:
        path, e = failures[0]
        others = f"; also failed: {', '.join(p for p, _ in failures[1:])}" if failures[1:] else ""
        ran = "; the other pipelines ran" if records else ""
        render.error(f"pipeline {path} failed, nothing of it was committed: {e}{others}{ran}")
        raise typer.Exit(exit_code_for(e))
    finish(all(r["noop"] for r in records), strict_noop)


@app.command(epilog=EXIT_CODES_HELP)
def verify(
    pipeline: Annotated[str, typer.Argument(metavar="PIPELINE", help="A pipeline file (.py or .sql) that has run.")],
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
    accumulated at t must hold the same rows with the same counts; floating-point values
    are equal within a relative 1e-9 (sums of doubles differ in their last bits with the
    order they add in). Every time the inputs and outputs tell apart is checked, and the
    count is reported. Reports the first time and row that differ; exit code 1 if one does.

    Examples:

        ddcli verify sample_data/pipelines/wordcount.py

        ddcli verify sample_data/pipelines/length_count.py --at "(1,1)"
    """
    out = render.choose_format(fmt, json_, output, store)
    say, _ = progress_output(out, live=False)
    if say:
        say(f"loading {pipeline} and Spark's libraries")
    _announce_at_exit(say)
    _quiet_pyspark_logging()
    from ops.verify.verify import TOLERANCE, verify_pipeline
    from storage.lattice import format_time, parse_time
    st = store_at(store)
    times = [parse_time(t) for t in at] if at else None
    res = verify_pipeline(st, pipeline, name=name, at=times, master=master, max_times=max_times, progress=say)
    record = {"command": "verify", "pipeline": res.pipeline, "ok": res.ok,
              "times": [format_time(t) for t in res.times],
              "differences": [d.describe() for d in res.differences]}
    if res.ok:
        msg = (f"pipeline {res.pipeline!r} verified at {len(res.times)} time(s): every output equals "
               f"the from-scratch evaluation (doubles within a relative {TOLERANCE:g})")
    else:
        msg = f"pipeline {res.pipeline!r} differs from the from-scratch evaluation: " + res.differences[0].describe()
    render.report(record, msg, out, output)
    if not res.ok:
        raise typer.Exit(1)
