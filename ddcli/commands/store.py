"""The commands that change traces without Spark: ``ingest``, ``advance`` and ``compact``.

Registered on :data:`ddcli.cli.app` when :mod:`ddcli.cli` is imported; the shapes they
follow (options, rendering, "nothing to do") are described there.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ddcli import render
from ddcli.app import EXIT_CODES_HELP, app
from ddcli.options import (DEFAULT_STORE, FormatOpt, InputFormat, JsonOpt, MaxVersionsOpt, OutputOpt, StoreOpt,
                           StrictNoopOpt, TimeFromOpt, finish, plural, store_at, trace_arg)

# ---------------------------------------------------------------- ingest


@app.command(epilog=EXIT_CODES_HELP)
def ingest(
    trace: Annotated[str, trace_arg("The trace to append to (created by its first ingest).", ingested=True)],
    files: Annotated[list[str], typer.Argument(
        metavar="SOURCE...",
        help="Update files: CSV, JSON Lines or Parquet (CSV and JSON Lines may be .gz or .zst): "
             "local paths, quoted globs (`'data/*.csv'`), s3://bucket/key or s3:// globs "
             "(`'s3://lake/raw/day=*/*.csv.gz'`). Or one lake table's new versions: `delta:PATH`, "
             "`iceberg:CATALOG_URI#ns.table` or `iceberg:METADATA.json`.")],  # in code marks: the help reads Markdown
    key: Annotated[Optional[str], typer.Option(
        "--key", "-k", metavar="COLS",
        help="Key columns, comma-separated (first ingest only; default: the first data column).")] = None,
    time: Annotated[Optional[str], typer.Option(
        "--time", "-t", metavar="T", help="The time of every update, for files without a time column.")] = None,
    upper: Annotated[Optional[str], typer.Option(
        "--upper", "-u", metavar="F",
        help="Seal the trace up to frontier F (default for d = 1: just past the largest time ingested).")] = None,
    file_format: Annotated[Optional[InputFormat], typer.Option(
        "--file-format", "--input-format", case_sensitive=False,
        help="Format of the update files (default: from the extension).")] = None,
    column_types: Annotated[Optional[list[str]], typer.Option(
        "--type", metavar="COL=TYPE",
        help="Parse column COL as TYPE instead of inferring it (repeatable): int, double, string, boolean, "
             "date, timestamp or decimal(P,S), e.g. --type 'price=decimal(15,2)'. A decimal is read "
             "exactly from its text; a value that does not fit is refused.")] = None,
    null: Annotated[Optional[str], typer.Option(
        "--null", metavar="STR",
        help="CSV: the text that means null in every column [default: \\N, and an empty field "
             "in columns that are not text].")] = None,
    upsert: Annotated[Optional[str], typer.Option(
        "--upsert", metavar="KEYCOLS",
        help="Each row replaces the live rows with the same key (comma-separated columns) at the "
             "row's time; ddcli retracts the old rows.")] = None,
    delete: Annotated[Optional[str], typer.Option(
        "--delete", metavar="KEYCOLS",
        help="Each row (these key columns and a time) removes the live rows with that key at its time.")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse the ingest (exit 2, nothing written) when a retraction matches "
                         "no live row, instead of warning.")] = False,
    time_from: TimeFromOpt = None,
    max_versions: MaxVersionsOpt = None,
    strict_noop: StrictNoopOpt = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Append update files (or a lake table's new versions) to a trace.

    Columns: the data columns, `time` (or `time_0`, `time_1`, ... for d >= 2) and an
    optional `diff` (default 1). Every row of every file is validated before anything is
    written; a bad file changes nothing. Re-ingesting a file already ingested is a no-op:
    a glob run again reads only the objects it has not seen.

    Examples:

        ddcli ingest words sample_data/words_1.csv

        ddcli ingest strings sample_data/strings_1.csv --upper "(1,0)"

        ddcli ingest clicks events.jsonl --time 42 --key user

        ddcli ingest airports airports_fix.csv --time 9 --upsert faa

        ddcli ingest orders orders.csv --type 'price=decimal(15,2)' --type day=date

        ddcli ingest events 's3://lake/raw/day=*/*.csv.gz'

        ddcli ingest orders delta:s3://lake/orders --time-from timestamp
    """
    out = render.choose_format(fmt, json_, output, store)
    if _lake_tables(files, {"--time-from": time_from, "--max-versions": max_versions}):
        return _ingest_lake(trace, files, key, time_from, max_versions, store, out, output, strict_noop, {
            "--time": time, "--upper": upper, "--file-format": file_format, "--type": column_types, "--null": null,
            "--upsert": upsert, "--delete": delete})
    from storage.lattice import format_frontier, parse_time
    st = store_at(store)
    t = parse_time(time) if time is not None else None
    keys = [k.strip() for k in key.split(",") if k.strip()] if key is not None else None
    from storage.files.column_types import parse_column_types
    types = parse_column_types(column_types)
    from storage.writes.retractions import checker
    negative: list = []
    prepare = checker(st, strict=strict, found=negative)
    by_key = _by_key_step(st, upsert, delete)
    if by_key is not None:
        prepare = _then(by_key[0], prepare)
    from storage.files.locations import expand_sources
    sources = expand_sources(files, st.path)
    with render.progress(len(sources), f"ingest {trace}") as step:
        res = st.ingest(trace, sources, key=keys, time=t, upper=upper,
                        fmt=file_format.value if file_format else None, progress=step, null=null,
                        columns=by_key[2] if by_key else None, types=types, prepare=prepare)
    tr = _trace_after(st, trace, res)
    unmatched = negative[0] if negative and negative[0].rows else None
    if unmatched is not None:
        render.warning(f"trace {trace!r}: {unmatched.describe()}; restate retracted rows exactly "
                       f"(CSV nulls are written {null if null is not None else chr(92) + 'N'})")
    noop = not res.files
    pending = sum(l.rows for l in tr.pending)
    record = {"command": "ingest", "trace": trace, "noop": noop, "created": res.created,
              "updates": res.rows, "files": res.files, "skipped": res.skipped,
              "upper": format_frontier(tr.upper), "since": format_frontier(tr.since),
              "layers": len(tr.layers), "pending": pending, "warnings": st.warnings,
              "unmatched_retractions": unmatched.rows if unmatched else 0}
    if by_key is not None:
        record.update({"upserted" if upsert else "deleted": by_key[1].rows, "retracted": by_key[1].retracted})
    msg = _ingest_message(trace, res, tr, by_key, upsert, pending)
    render.report(record, msg, out, output)
    finish(noop, strict_noop)


def _ingest_message(trace: str, res, tr, by_key, upsert: str | None, pending: int) -> str:
    """What an ingest of update files says it did."""
    from storage.lattice import format_frontier
    if not res.files:
        msg = (f"nothing to do: trace {trace!r} already holds "
               f"{'this file' if len(res.skipped) == 1 else 'these files'} "
               f"({_listed(res.skipped)}); re-ingesting a file is a no-op")
    else:
        msg = (f"{'created trace' if res.created else 'trace'} {trace!r}: ingested "
               f"{plural(res.rows, 'update')} from {plural(len(res.files), 'file')}; "
               f"upper is {format_frontier(tr.upper)}")
        if by_key is not None:
            msg += (f" ({plural(by_key[1].rows, 'row')} {'upserted' if upsert else 'deleted'} by key, "
                    f"{plural(by_key[1].retracted, 'live row')} retracted)")
        if res.skipped:
            msg += f" (skipped, already ingested: {_listed(res.skipped)})"
        if pending:
            msg += (f"; {plural(pending, 'update')} beyond the upper wait to be sealed "
                    f"(ddcli advance {trace} --upper F)")
    return msg


def _lake_tables(sources: list[str], lake_options: dict) -> bool:
    """Whether the sources are a lake table; the options only lake tables take refused otherwise."""
    from storage.sources import is_lake_source
    if any(is_lake_source(s) for s in sources):
        return True
    for name, value in lake_options.items():
        if value is not None:
            raise typer.BadParameter("only for lake tables (delta:…, iceberg:…)", param_hint=name)
    return False


def _ingest_lake(trace: str, sources: list[str], key: str | None, time_from: str | None, max_versions: int | None,
                 store: str, out: str, output: str | None, strict_noop: bool, file_options: dict) -> None:
    """``ddcli ingest TRACE delta:…|iceberg:…``: the table's new versions (storage/sources/lake.py);
    ``file_options`` (name -> value) are those of update files, refused here."""
    others = [k for k, v in file_options.items() if v]
    if len(sources) != 1:
        raise typer.BadParameter("give one lake table (delta:… or iceberg:…) and no other source", param_hint="SOURCE")
    if others:
        raise typer.BadParameter("for update files only, not for lake tables", param_hint=others[0])
    from storage.lattice import format_frontier
    from storage.sources.lake import ingest_lake
    st = store_at(store)
    keys = [k.strip() for k in key.split(",") if k.strip()] if key is not None else None
    with render.progress(1, f"ingest {trace}") as step:
        res = ingest_lake(st, trace, sources[0], key=keys, time_from=time_from or "version", limit=max_versions,
                          progress=step)
    noop = not res.numbers
    record = {"command": "ingest", "trace": trace, "noop": noop, "created": res.created, "updates": res.rows,
              "source": sources[0], "versions": res.numbers, "position": res.position,
              "upper": format_frontier(res.upper) if res.upper is not None else None, "warnings": st.warnings}
    if noop:
        at = f" (it holds {', '.join(f'{k} {v}' for k, v in res.position.items())})" if res.position else ""
        msg = f"nothing to do: trace {trace!r} already holds every version of {res.label}{at}"
    else:
        span = str(res.numbers[0]) if len(res.numbers) == 1 else f"{res.numbers[0]}-{res.numbers[-1]}"
        msg = (f"{'created trace' if res.created else 'trace'} {trace!r}: ingested {plural(res.rows, 'update')} "
               f"from {plural(len(res.numbers), 'version')} ({span}) of {res.label}; upper is "
               f"{format_frontier(res.upper)}")
    render.report(record, msg, out, output)
    finish(noop, strict_noop)


def _trace_after(st, trace: str, res):
    """The trace after an ingest: read again (merges may have followed the commit), or as
    the ingest committed it when the store stopped answering after the commit."""
    from storage.errors import StoreUnreachable
    try:
        return st.trace(trace)
    except StoreUnreachable as e:
        if res.committed is None:
            raise
        render.warning(f"the ingest was committed, then the store stopped answering: {e}")
        return res.committed


def _listed(paths: list[str], most: int = 5) -> str:
    """Paths for a message: a glob may name thousands (``--json`` lists them all)."""
    if len(paths) <= most:
        return ", ".join(paths)
    return ", ".join(paths[:most - 1]) + f" and {len(paths) - most + 1:,} more"


def _by_key_step(st, upsert: str | None, delete: str | None):
    """``(prepare step, stats, file columns)`` for --upsert/--delete KEYCOLS, or None."""
    if upsert is None and delete is None:
        return None
    if upsert is not None and delete is not None:
        raise typer.BadParameter("give --upsert or --delete, not both", param_hint="--delete")
    from storage.writes.upsert import UpsertStats, upsert_step
    key = [k.strip() for k in (upsert or delete).split(",") if k.strip()]
    if not key:
        raise typer.BadParameter("give the key columns, comma-separated", param_hint="--upsert/--delete")
    stats = UpsertStats()
    return upsert_step(st, key, delete=delete is not None, stats=stats), stats, key if delete else None


def _then(first, second):
    """Two ``prepare`` steps of an ingest, one after the other."""
    return lambda existing, table: second(existing, first(existing, table))


# ---------------------------------------------------------------- advance


@app.command(epilog=EXIT_CODES_HELP)
def advance(
    trace: Annotated[str, trace_arg("The trace whose frontiers move.")],
    upper: Annotated[Optional[str], typer.Option(
        "--upper", "-u", metavar="F", help="Seal every time not beyond F (no more updates there).")] = None,
    since: Annotated[Optional[str], typer.Option(
        "--since", "-s", metavar="F", help="Allow compaction: times not beyond F may be merged.")] = None,
    seal: Annotated[bool, typer.Option(
        "--seal", help="Seal every time (upper = the empty frontier): a dimension table that never "
                       "holds a pipeline back and takes no more updates.")] = False,
    strict_noop: StrictNoopOpt = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Seal times (move the upper) and/or allow compaction (move the since), then compact.

    Frontiers only move forward. After --since F the collection is exact only at times
    beyond F.

    Examples:

        ddcli advance words --since 3

        ddcli advance strings --upper "(2,0)" --since "(1,0)"

        ddcli advance airlines --seal
    """
    out = render.choose_format(fmt, json_, output, store)
    from storage.lattice import format_frontier
    st = store_at(store)
    before = st.trace(trace)
    if seal:
        from storage.state.seal import sealed_frontier
        if upper is not None:
            raise typer.BadParameter("give --seal or --upper, not both", param_hint="--seal")
        upper = sealed_frontier(before)
    after = st.advance(trace, upper=upper, since=since)
    noop = (after.upper, after.since) == (before.upper, before.since)
    record = {"command": "advance", "trace": trace, "noop": noop,
              "upper": format_frontier(after.upper), "since": format_frontier(after.since),
              "upper_before": format_frontier(before.upper), "since_before": format_frontier(before.since),
              "layers": len(after.layers), "rows": after.rows()}
    if noop:
        msg = (f"nothing to do: trace {trace!r} already has upper {format_frontier(after.upper)} "
               f"and since {format_frontier(after.since)}")
    else:
        moves = []
        if after.upper != before.upper:
            to = "{} (sealed for all times)" if after.upper.is_empty() else format_frontier(after.upper)
            moves.append(f"upper {format_frontier(before.upper)} -> {to}")
        if after.since != before.since:
            moves.append(f"since {format_frontier(before.since)} -> {format_frontier(after.since)}")
        msg = (f"trace {trace!r}: {', '.join(moves)}; "
               f"{plural(len(after.layers), 'layer')}, {plural(after.rows(), 'update')}")
    render.report(record, msg, out, output)
    finish(noop, strict_noop)


# ---------------------------------------------------------------- compact


@app.command(epilog=EXIT_CODES_HELP)
def compact(
    trace: Annotated[Optional[str], trace_arg("One trace (default: every trace).")] = None,
    full: Annotated[bool, typer.Option("--full", help="Merge all layers into one (per reader hold).")] = False,
    grace: Annotated[float, typer.Option(
        "--grace", metavar="SECONDS", min=0,
        help="Remove unreferenced files only once older than this.")] = 3600.0,
    strict_noop: StrictNoopOpt = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: FormatOpt = None,
    json_: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Merge layers, advance times to the since, consolidate, and collect garbage.

    Examples:

        ddcli compact

        ddcli compact words --full --grace 0
    """
    out = render.choose_format(fmt, json_, output, store)
    st = store_at(store)
    n = 1 if trace else len(st.state().traces)
    with render.progress(max(n, 1), "compact") as step:
        res = st.compact(trace, full=full, grace_seconds=grace, progress=step)
    noop = not res.get("merges") and not res.get("removed_files")
    record = {"command": "compact", "trace": trace, "noop": noop, **res}
    scope = f"trace {trace!r}" if trace else plural(res.get("traces", 0), "trace")
    if noop:
        msg = f"nothing to do: {scope} already compact, no garbage older than {grace:g}s"
    else:
        msg = (f"compacted {scope}: {plural(res.get('merges', 0), 'merge')}, "
               f"removed {plural(res.get('removed_files', 0), 'unreferenced file')}")
    render.report(record, msg, out, output)
    finish(noop, strict_noop)
