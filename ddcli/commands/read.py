"""The commands that read the store: ``query``, ``history``, ``sql`` and ``status``.

Registered on :data:`ddcli.cli.app` when :mod:`ddcli.cli` is imported; none starts Spark.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.cli import (DEFAULT_STORE, EXIT_CODES_HELP, FormatOpt, JsonOpt, OutputOpt, StoreOpt, WhereOpt,
                       _store, app)

# ---------------------------------------------------------------- reading


@app.command(epilog=EXIT_CODES_HELP)
def query(
    trace: Annotated[str, typer.Argument(metavar="TRACE", help="The trace to read.")],
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
) -> None:
    """The collection at a time: the data columns plus `count` (the multiplicity).

    A time not beyond the trace's since was compacted away and is refused, naming the
    earliest time that works. A time beyond the upper is not complete yet: the answer
    comes with a warning on stderr (an error with --strict).

    Examples:

        ddcli query words

        ddcli query words --as-of 3 --where "word LIKE 'a%'" --format csv
    """
    out = render.choose_format(fmt, json_, output)
    from storage.lattice import format_time, parse_time
    from storage.sql.query import as_of as as_of_
    from storage.sql.query import default_time
    st = _store(store)
    if as_of is not None:
        from storage.state.complete import incomplete
        from storage.state.trace import StoreError
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
    render.table(tbl, out, output, title=title)


@app.command(epilog=EXIT_CODES_HELP)
def history(
    trace: Annotated[str, typer.Argument(metavar="TRACE", help="The trace to read.")],
    where: WhereOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """The consolidated updates (data, time, diff), ordered by data then time.

    Times are shown advanced to the trace's since.

    Example:

        ddcli history words --where "word = 'apple'"
    """
    out = render.choose_format(fmt, json_, output)
    from storage.sql.query import history as history_
    tbl = history_(_store(store), trace, where)
    render.table(tbl, out, output, title=f"{trace} history")


@app.command(epilog=EXIT_CODES_HELP)
def sql(
    query_text: Annotated[str, typer.Argument(metavar="QUERY", help="A DuckDB query.")],
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """DuckDB SQL with every trace a view of its updates (data, time or time_0.., diff).

    The collection at time t is the sum of the diffs of the updates at times <= t. For
    d = 2 write the product order: WHERE time_0 <= 1 AND time_1 <= 2. Pipeline state
    (traces named pipeline.operator) is reachable only quoted: SELECT * FROM "wc.count".

    Examples:

        ddcli sql "SELECT word, SUM(diff) AS count FROM words WHERE time <= 5 GROUP BY ALL HAVING SUM(diff) <> 0"

        ddcli sql "SELECT time, SUM(diff) AS change FROM words GROUP BY time ORDER BY time" --format csv
    """
    out = render.choose_format(fmt, json_, output)
    from storage.sql.query import sql as sql_
    tbl = sql_(_store(store), query_text)
    render.table(tbl, out, output)


@app.command(epilog=EXIT_CODES_HELP)
def status(
    trace: Annotated[Optional[str], typer.Argument(metavar="TRACE", help="One trace (default: all, and the pipelines).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Also list pipeline state (internal traces).")] = False,
    pipelines: Annotated[bool, typer.Option(
        "--pipelines", help="For csv/parquet output: the pipelines table instead of the traces table.")] = False,
    lag: Annotated[bool, typer.Option(
        "--lag", help="For csv/parquet output: the lag table (one row per pipeline input) instead of the traces table.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Traces, pipelines and how far each pipeline lags behind its inputs.

    Traces: schema, key, d, since, upper, layers, rows, bytes, reader holds. Pipelines:
    runs, frontier, inputs and outputs. Lag, one row per pipeline input: the input's
    upper when the pipeline last ran (`consumed`) against its upper now, and the sealed
    layers and updates the next `ddcli run` will process (`behind` is true when there
    are any); `pending` counts updates ingested beyond the upper, not yet sealed.

    With --format jsonl every record has a "kind" field: "trace", "pipeline" or "lag".
    With TRACE: that trace, and the lag of every pipeline reading it.

    Examples:

        ddcli status

        ddcli status words --json

        ddcli status --lag --format csv
    """
    out = render.choose_format(fmt, json_, output)
    from storage.sql.query import status as status_
    st = _store(store)
    state = st.state()
    traces, pipes = status_(st, trace, internal=all_)
    if out == "table":  # a wide schema on one line; --json keeps every column
        from ddcli.status_rows import short_columns
        i = traces.schema.get_field_index("columns")
        traces = traces.set_column(i, "columns", [[short_columns(c) for c in traces.column(i).to_pylist()]])
    lags = lag_table(state, trace)
    parts = [("trace", traces, f"traces in {st.path}")]
    if pipes.num_rows or pipelines:
        parts.append(("pipeline", pipes, "pipelines"))
    if lags.num_rows or lag:
        parts.append(("lag", lags, "pipeline inputs: lag"))
    if out in ("csv", "parquet") and (pipelines or lag):
        parts = [p for p in parts if p[0] == ("lag" if lag else "pipeline")]
    if out == "table" and output is None:  # where the store lives, e.g. an object store's endpoint
        render.report({}, f"store: {st.path} ({st.blobs.where()})", out)
    render.tables(parts, out, output)


LAG_COLUMNS = [("pipeline", "string"), ("input", "string"), ("behind", "bool"), ("consumed", "string"),
               ("upper", "string"), ("layers", "int64"), ("updates", "int64"), ("pending", "int64"),
               ("consumed_seq", "int64"), ("input_seq", "int64"), ("frontier", "string"),
               ("holds_back", "bool"), ("behind_by", "int64")]


def lag_rows(state, trace: str | None = None) -> list[dict]:
    """How far each pipeline is behind each of its inputs, from one store state.

    For every pipeline that has run and every input it reads: ``consumed`` is the input's
    upper when the pipeline last ran, ``upper`` the input's upper now; ``layers`` and
    ``updates`` are what the next run would read (the input's layers sealed after the
    position the pipeline holds it at), ``pending`` the updates ingested beyond the upper
    (a run cannot read them until ``advance --upper`` seals them); ``consumed_seq`` and
    ``input_seq`` are the positions in the input's sequence of seals. ``frontier`` is
    the pipeline's own frontier: its outputs are complete up to it. ``holds_back`` is true
    for an input whose upper is behind another input's (the pipeline waits for it; a
    dimension table that is complete for good is sealed with ``advance --seal``), and
    ``behind_by`` says by how much (one-dimensional times).
    """
    from storage.lattice import Frontier, format_frontier
    from storage.state.seal import hold_back
    rows = []
    for name, rec in sorted(state.pipelines.items()):
        if not isinstance(rec, dict):
            continue
        d = rec.get("d", 1)
        frontier = format_frontier(Frontier.from_json(rec["frontier"], d)) if "frontier" in rec else None
        waits = hold_back({inp: state.traces[inp].upper for inp in (rec.get("inputs") or {})
                           if inp in state.traces})
        for inp, pos in sorted((rec.get("inputs") or {}).items()):
            if trace is not None and trace not in (inp, name):
                continue
            t = state.traces.get(inp)
            if t is None:
                continue
            hold = t.holds.get(name)
            seq = hold.seq if hold is not None else int(pos.get("seq", 0))
            new = [l for l in t.layers if l.seq_lo >= seq]
            consumed = Frontier.from_json(pos["upper"], t.d) if "upper" in pos else None
            rows.append({
                "pipeline": name, "input": inp,
                "behind": bool(new) or (consumed is not None and consumed != t.upper),
                "consumed": format_frontier(consumed) if consumed is not None else None,
                "upper": format_frontier(t.upper),
                "layers": len(new), "updates": sum(l.rows for l in new),
                "pending": sum(l.rows for l in t.pending),
                "consumed_seq": seq, "input_seq": t.next_seq, "frontier": frontier,
                "holds_back": waits[inp][0], "behind_by": waits[inp][1],
            })
    return rows


def lag_table(state, trace: str | None = None):
    """:func:`lag_rows` as an Arrow table (an empty one has the same columns)."""
    import pyarrow as pa
    schema = pa.schema([(n, pa.type_for_alias(t)) for n, t in LAG_COLUMNS])
    return pa.Table.from_pylist(lag_rows(state, trace), schema=schema)
