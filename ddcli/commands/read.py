"""The commands that read the store: ``query``, ``history``, ``sql`` and ``status``.

Registered on :data:`ddcli.cli.app` when :mod:`ddcli.cli` is imported; none starts Spark.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app
from ddcli.options import (DEFAULT_STORE, CsvNullOpt, FormatOpt, HistoryWhereOpt, JsonOpt, OutputOpt, StoreOpt,
                           WhereOpt, store_at, trace_arg)

# ---------------------------------------------------------------- reading


@app.command(epilog=EXIT_CODES_HELP)
def query(
    trace: Annotated[str, trace_arg("The trace to read.")],
    as_of: Annotated[Optional[str], typer.Option(
        "--as-of", "-a", metavar="T",
        help="The time (default: the latest complete time; for d >= 2 every update present).")] = None,
    where: WhereOpt = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse (exit 2) a time that is not complete yet (beyond the upper) "
                         "instead of warning.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
    null: CsvNullOpt = None,
) -> None:
    """The collection at a time: the data columns plus `count` (the multiplicity).

    The multiplicity column is `count`, or `multiplicity` when the trace has a data column
    named `count` (a word count's output, for one), so no column is ever shadowed.

    A time not beyond the trace's since was compacted away and is refused, naming the
    earliest time that works. A time beyond the upper is not complete yet: the answer
    comes with a warning on stderr (an error with --strict).

    Examples:

        ddcli query words

        ddcli query words --as-of 3 --where "word LIKE 'a%'" --format csv
    """
    out = render.choose_format(fmt, json_, output, store)
    from storage.lattice import format_time, parse_time
    from storage.sql.query import as_of as as_of_
    from storage.sql.query import default_time
    st = store_at(store)
    if as_of is not None:
        from storage.errors import StoreError
        from storage.state.complete import incomplete
        tr = st.trace(trace)
        why = incomplete(tr, parse_time(as_of, tr.d))
        if why and strict:
            raise StoreError(f"{why} (--strict)")
    tbl = as_of_(st, trace, as_of, where)
    if as_of is not None:
        if why:
            render.warning(why)
        title = f"{trace} as of {as_of}"
    else:
        t = default_time(st.trace(trace))
        title = f"{trace} as of {format_time(t)}" if t is not None else f"{trace} (every update)"
    render.table(tbl, out, output, title=title, null=null)


@app.command(epilog=EXIT_CODES_HELP)
def history(
    trace: Annotated[str, trace_arg("The trace to read.")],
    where: HistoryWhereOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
    null: CsvNullOpt = None,
) -> None:
    """The consolidated updates (data, time, diff), ordered by data then time.

    Times are shown advanced to the trace's since; --where sees them so, and the
    consolidated diff.

    Examples:

        ddcli history words --where "word = 'apple'"

        ddcli history words --where "time >= 6 AND diff < 0"
    """
    out = render.choose_format(fmt, json_, output, store)
    from storage.sql.query import history as history_
    tbl = history_(store_at(store), trace, where)
    render.table(tbl, out, output, title=f"{trace} history", null=null)


@app.command(epilog=EXIT_CODES_HELP)
def sql(
    query_text: Annotated[str, typer.Argument(metavar="QUERY", help="A DuckDB query.")],
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
    null: CsvNullOpt = None,
) -> None:
    """DuckDB SQL with every trace a view of its updates (data, time or time_0.., diff).

    The collection at time t is the sum of the diffs of the updates at times <= t. For
    d = 2 write the product order: WHERE time_0 <= 1 AND time_1 <= 2. Pipeline state
    (traces named pipeline.operator) is reachable only quoted: SELECT * FROM "wc.count".

    Examples:

        ddcli sql "SELECT word, SUM(diff) AS count FROM words WHERE time <= 5 GROUP BY ALL HAVING SUM(diff) <> 0"

        ddcli sql "SELECT time, SUM(diff) AS change FROM words GROUP BY time ORDER BY time" --format csv
    """
    out = render.choose_format(fmt, json_, output, store)
    from storage.sql.query import sql as sql_
    tbl = sql_(store_at(store), query_text)
    if out == "table" and tbl.column_names == ["explain_key", "explain_value"]:
        # an EXPLAIN: its plan is text drawn for a terminal, as lines rather than a table cell
        render.text("\n".join(tbl.column("explain_value").to_pylist()), output)
        return
    render.table(tbl, out, output, null=null)


@app.command(epilog=EXIT_CODES_HELP)
def status(
    trace: Annotated[Optional[str], trace_arg("One trace (default: all, and the pipelines).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Also list pipeline state (internal traces).")] = False,
    pipelines: Annotated[bool, typer.Option(
        "--pipelines", help="For csv/parquet output: the pipelines table instead of the traces table.")] = False,
    lag: Annotated[bool, typer.Option(
        "--lag", help="For csv/parquet output: the lag table (one row per pipeline input) instead of the traces table.")] = False,
    readers: Annotated[bool, typer.Option(
        "--readers",
        help="For csv/parquet output: the named readers table (ddcli changes) instead of the traces table.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Traces, pipelines, and how far each pipeline and named reader lags behind.

    Traces: schema, key, d, since, upper, layers, rows, bytes, reader holds. Pipelines:
    runs, frontier, inputs and outputs. Lag, one row per pipeline input: the input's
    upper when the pipeline last ran (`consumed`) against its upper now, and the sealed
    layers and updates the next `ddcli run` will process (`behind` is true when there
    are any); `pending` counts updates ingested beyond the upper, not yet sealed.
    Readers, one row per named reader (`ddcli changes`): its position (the upper it last
    acknowledged; empty for a new reader), the trace's upper, the layers and updates it
    has not read, `behind_by` (upper - position, for one-dimensional times) and where its
    hold keeps the trace's history (`holds_since`).

    With --format jsonl every record has a "kind" field: "trace", "pipeline", "lag" or
    "reader". With TRACE: that trace, the lag of every pipeline reading it, its readers.

    Examples:

        ddcli status

        ddcli status words --json

        ddcli status --lag --format csv
    """
    out = render.choose_format(fmt, json_, output, store)
    from ddcli.status_rows import pipelines_table, short_columns
    from storage.sql.query import status as status_
    from storage.state.lag import lag_table
    from storage.state.readers import reader_table
    st = store_at(store)
    state = st.state()
    traces = status_(st, trace, internal=all_)
    pipes = pipelines_table(state.pipelines if trace is None else {})
    if out == "table":  # a wide schema on one line; --json keeps every column
        i = traces.schema.get_field_index("columns")
        traces = traces.set_column(i, "columns", [[short_columns(c) for c in traces.column(i).to_pylist()]])
    lags = lag_table(state, trace)
    followers = reader_table(state, trace)
    parts = [("trace", traces, f"traces in {st.path}")]
    if pipes.num_rows or pipelines:
        parts.append(("pipeline", pipes, "pipelines"))
    if lags.num_rows or lag:
        parts.append(("lag", lags, "pipeline inputs: lag"))
    if followers.num_rows or readers:
        parts.append(("reader", followers, "named readers: lag"))
    if out in ("csv", "parquet") and (pipelines or lag or readers):
        parts = [p for p in parts if p[0] == ("lag" if lag else "reader" if readers else "pipeline")]
    if out == "table" and output is None:  # where the store lives, e.g. an object store's endpoint
        render.report({}, f"store: {st.path} ({st.blobs.where()})", out)
    render.tables(parts, out, output)
