"""``ddcli changes``: follow a trace's changes with a named reader, exactly once.

Registered on the main app by ``ddcli/cli.py``; the reader lives in
``storage/state/readers.py`` and ``storage/writes/feeds.py`` (no Spark).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app
from ddcli.options import DEFAULT_STORE, CsvNullOpt, FormatOpt, JsonOpt, OutputOpt, StoreOpt, store_at, trace_arg


@app.command(epilog=EXIT_CODES_HELP)
def changes(
    trace: Annotated[str, trace_arg("The trace to follow (a user trace or a pipeline's output).")],
    reader: Annotated[str, typer.Option(
        "--reader", "-r", metavar="NAME",
        help="The reader's name (letters, digits and _); created by its first read.")],
    ack: Annotated[bool, typer.Option(
        "--ack", help="Once the output is completely written, move the reader to the upper it read.")] = False,
    drop: Annotated[bool, typer.Option(
        "--drop", help="Remove the reader and release its hold (nothing is printed but a line).")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
    null: CsvNullOpt = None,
) -> None:
    """The changes a named reader has not acknowledged: updates (data, time, diff) at times
    beyond its position and not beyond the trace's upper, consolidated, ordered by time.

    A new reader starts at the trace's since (until it acknowledges it reads the whole
    history, times advanced to that since) and holds the trace: compaction, `advance --since` and
    garbage collection keep every update it has not acknowledged, at its own time. With
    --ack the reader moves to the upper it just read, after the output was completely
    written; a command killed before that leaves it where it was, so a consumer that
    takes the output and then lets the command finish reads every change exactly once.
    If the reader moved meanwhile the ack is a conflict (exit 3): read again.
    `ddcli status` lists readers and how far behind each is.

    Examples:

        ddcli changes words --reader etl --format csv -o batch.csv --ack

        ddcli changes words --reader etl --drop
    """
    out = render.choose_format(fmt, json_, output, store)
    from storage.lattice import format_frontier
    from storage.writes import feeds
    st = store_at(store)
    if drop:
        if ack:
            raise typer.BadParameter("give --ack or --drop, not both", param_hint="--drop")
        hold = feeds.drop_reader(st, trace, reader)
        at = format_frontier(hold.position) if hold.position is not None else "its start"
        render.report({"command": "changes", "trace": trace, "reader": reader, "dropped": True,
                       "position": format_frontier(hold.position) if hold.position is not None else None},
                      f"reader {reader!r} of trace {trace!r} dropped (it was at {at}); its hold is released",
                      out, output)
        return
    reading, tbl = feeds.read_changes(st, trace, reader)
    start = (format_frontier(reading.hold.position) if reading.hold.position is not None
             else f"since {format_frontier(reading.since)}")
    upper = format_frontier(reading.upper)
    render.table(tbl, out, output, every_row=ack, null=null,
                 title=f"{trace}: changes for reader {reader!r}, from {start} to upper {upper}")
    if ack:
        feeds.acknowledge(st, reading)
