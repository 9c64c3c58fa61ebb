"""Reading traces with DuckDB: a collection as of a time, its history, SQL over every trace.

Nothing here writes: every function opens a private in-memory DuckDB connection, points it
at the Parquet layer files the newest committed version of the store names, and returns an
Arrow table. DuckDB reads only what a query needs: filters on data columns and times are
pushed into ``read_parquet``, so row groups whose min/max statistics exclude them are
skipped (layers are sorted by key, so a look-up of a few keys reads a few row groups).

* :func:`as_of` — the collection at a time ``t``: data columns plus ``count``.
* :func:`history` — the consolidated updates ``(data, time, diff)`` ordered by data then time.
* :func:`sql` — any DuckDB query with every trace available as a view of its updates.
* :func:`status` — what the store holds: one row per trace.

A collection at a time in plain SQL
-----------------------------------

Every trace is a view with its data columns, ``time`` (or ``time_0 … time_{d-1}``) and
``diff``. The collection at time ``t`` is the sum of the updates at times ``<= t``::

    SELECT word, SUM(diff) AS count FROM words
    WHERE time <= 5
    GROUP BY ALL HAVING SUM(diff) <> 0

and for ``d = 2`` the condition is ``time_0 <= 1 AND time_1 <= 2`` (the product order).
The answer is exact for every ``t`` beyond the trace's ``since`` (see ``ddcli status``);
times not beyond it may have been advanced by compaction.

Pipeline state lives in internal traces whose names contain a dot (``pipeline.operator``).
They are views too, but only under their quoted name (``SELECT * FROM "wc.count"``).
"""

from __future__ import annotations

import contextlib

import pyarrow as pa

from storage.errors import Conflict, LayerVanished, StoreError
from storage.lattice import Frontier, Time, format_frontier, format_time, join, leq_sql, parse_time, time_columns
from storage.sql import sandbox
from storage.sql.duck import connect, parquet_source, quote
from storage.sql.trace_at import register_trace_at
from storage.state.trace import Trace, count_column
from storage.store import Store

_ATTEMPTS = 3  # reads retried when compaction collected the files they were reading

__all__ = ["as_of", "history", "sql", "status", "default_time"]


# ---------------------------------------------------------------- helpers


def _one_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _source(store: Store, trace: Trace, layers=None) -> str | None:
    """The SQL table expression of a trace's updates (default: every layer, pending ones
    included), or None when there are none."""
    return parquet_source(store.read_paths(trace, layers, local=True))  # checked: size, footer, hash


def _empty_updates(trace: Trace) -> pa.Table:
    fields = list(trace.schema) + [pa.field(c, pa.int64()) for c in time_columns(trace.d)]
    return pa.schema(fields + [pa.field("diff", pa.int64())]).empty_table()


def _check_where(con, trace: Trace, where: str | None, schema: pa.Schema | None = None) -> str | None:
    """Validate ``where`` as one SQL expression over the trace's data columns (or over the
    columns of ``schema``: a history's updates also have ``time`` and ``diff``).

    It is bound against an empty table with exactly those columns, so a typo, an unknown
    column or (for a collection) a reference to ``time``/``diff`` is a one-line StoreError
    here, before any file is read.
    """
    if where is None or not where.strip():
        return None
    import duckdb
    try:
        expr = str(duckdb.SQLExpression(where))
    except duckdb.Error as e:
        raise StoreError(f"bad --where expression {where!r} for trace {trace.name!r}: {_one_line(e)}") from None
    probe = (schema or pa.schema(list(trace.schema))).empty_table()
    try:
        con.register("__ddcli_probe", probe)
        con.execute(f"SELECT 1 FROM __ddcli_probe WHERE ({expr})").fetchall()
    except duckdb.Error as e:
        cols = ", ".join(probe.column_names)
        raise StoreError(f"bad --where expression {where!r} for trace {trace.name!r} "
                         f"(columns: {cols}): {_refusal(e) or _one_line(e)}") from None
    finally:
        try:
            con.unregister("__ddcli_probe")
        except duckdb.Error:
            pass
    return expr


class _Vanished(Exception):
    """Layer files named by the version a reader started from are gone (collected after a
    compaction committed a newer version): read again from the newest version."""


def _run(con, query: str, what: str, store: Store, traces: list[Trace]) -> pa.Table:
    import duckdb
    try:
        return con.sql(query).to_arrow_table()
    except duckdb.Error as e:
        _explain_failure(store, traces, e)
        raise StoreError(f"{what}: {_refusal(e) or _one_line(e)}") from None


def _explain_failure(store: Store, traces: list[Trace], error: Exception) -> None:
    """A read failed: because compaction removed its files meanwhile (read again), because
    a layer it names is damaged (CorruptionError, from the full check of that trace), or
    for a reason of its own (return: the caller reports it)."""
    paths = [p for t in traces for p in store.layer_paths(t)]
    if any(not store.blobs.exists(p) for p in paths):
        raise _Vanished() from None
    text = str(error)
    for t in traces:
        if any(p in text for p in store.layer_paths(t)):
            store.check_layers(t, full=True)


def _refusal(e: Exception) -> str | None:
    """The one line for SQL that tried to read a file it may not read (None otherwise)."""
    path = sandbox.refused_file(e)
    if path is None:
        return None
    return f"reading {path!r} is refused: SQL in ddcli reads only the store's traces"


def _retrying(read, what: str):
    """Call ``read()`` (which takes the newest version each time) until its files stay put."""
    for _ in range(_ATTEMPTS):
        try:
            return read()
        except (_Vanished, LayerVanished):
            continue
    raise Conflict(f"{what}: compaction kept removing the layer files being read; retry")


def _cast(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Give DuckDB's result the trace's Arrow types (DuckDB may answer with equivalents)."""
    try:
        return table.cast(schema)
    except (pa.ArrowException, ValueError):
        return table


def _as_time(trace: Trace, t) -> Time:
    if isinstance(t, str):
        return parse_time(t, trace.d)
    t = tuple(int(c) for c in (t if isinstance(t, (tuple, list)) else (t,)))
    if len(t) != trace.d:
        raise StoreError(f"time {format_time(t)} has {len(t)} coordinate(s); trace {trace.name!r} has {trace.d}")
    return t


def default_time(trace: Trace) -> Time | None:
    """The latest complete time: ``upper - 1`` for ``d = 1`` with a non-empty upper.

    None means "every update present" (an empty upper, or ``d >= 2``, where the times not
    beyond ``upper`` have no single greatest element).
    """
    if trace.d == 1 and not trace.upper.is_empty():
        return (trace.upper.elements[0][0] - 1,)
    return None


def _check_since(trace: Trace, t: Time) -> None:
    """A time not beyond ``since`` may have been rewritten by compaction: refuse it."""
    if trace.since.beyond(t):
        return
    earliest = Frontier([join(t, f) for f in trace.since], trace.d)
    raise StoreError(
        f"time {format_time(t)} is not beyond the since {format_frontier(trace.since)} of trace "
        f"{trace.name!r} (it was compacted); the earliest time that works is {format_frontier(earliest)}")


# ---------------------------------------------------------------- the three readers


def default_layers(trace: Trace):
    """The layers a query at the default time reads: all of them, except that the pending
    updates of a pipeline's output are not final (they lie beyond its upper, waiting for
    the pipeline's frontier to pass them) and are left out."""
    return trace.layers if trace.owner else None


def as_of_query(store: Store, trace: Trace, t: Time | None, where: str | None, con) -> str | None:
    """The SQL :func:`as_of` runs (None for a trace without layers). Exposed for tests."""
    src = _source(store, trace, default_layers(trace) if t is None else None)
    if src is None:
        return None
    expr = _check_where(con, trace, where)
    conds = []
    if t is not None:
        conds.append(leq_sql(t, [quote(c) for c in time_columns(trace.d)]))
    if expr is not None:
        conds.append(f"({expr})")
    cols = ", ".join(quote(c) for c in trace.data_columns)
    return (f"SELECT {cols}, CAST(SUM(diff) AS BIGINT) AS {quote(count_column(trace))} FROM {src}"
            + (" WHERE " + " AND ".join(conds) if conds else "")
            + f" GROUP BY {cols} HAVING SUM(diff) <> 0 ORDER BY {cols}")


def as_of(store: Store, trace: str, t=None, where: str | None = None) -> pa.Table:
    """The collection of ``trace`` at time ``t``: its data columns plus the multiplicity,
    ``count`` (or ``multiplicity`` when a data column is named ``count``: :func:`count_column`).

    ``t`` is a time (``7``, ``(1,2)``, a tuple) or None for the latest complete time (see
    :func:`default_time`). A time not beyond the trace's ``since`` is refused with a
    :class:`StoreError` naming the earliest time that works. ``where`` is a DuckDB SQL
    expression over the data columns (``"word LIKE 'a%'"``); it is applied before summing.
    """
    return _retrying(lambda: _as_of(store, store.trace(trace), t, where), f"query of trace {trace!r}")


def _as_of(store: Store, tr: Trace, t, where: str | None) -> pa.Table:
    if t is None:
        # Every update of a sealed layer has a time below upper (d = 1 has no pending
        # updates but an output's, left out), and compaction preserves sums: the
        # collection at upper - 1 is the sum of them all, whatever the since. No time
        # condition, so nothing to refuse -- except for a pipeline's output recomputed
        # from history compacted to its frontier (a rebuild): its updates from before
        # the upper then wait beyond it with the rest, and it answers no time until its
        # pipeline's frontier passes its since.
        tt = None
        latest = default_time(tr)
        if tr.owner and latest is not None and tr.pending:
            _check_since(tr, latest)
    else:
        tt = _as_time(tr, t)
        _check_since(tr, tt)
    out_schema = pa.schema(list(tr.schema) + [pa.field(count_column(tr), pa.int64())])
    with connect(store) as con:
        q = as_of_query(store, tr, tt, where, con)
        if q is None:
            _check_where(con, tr, where)
            return out_schema.empty_table()
        return _cast(_run(con, q, f"query of trace {tr.name!r} failed", store, [tr]), out_schema)


def history(store: Store, trace: str, where: str | None = None) -> pa.Table:
    """The consolidated updates of ``trace``, ordered by data then time.

    Times are advanced to the trace's ``since`` (layers compacted at different moments
    may hold the same update at different, equivalent times); updates that then agree on
    (data, time) are summed, zeros dropped. ``where`` is a DuckDB SQL expression over the
    data columns, ``time`` (or ``time_0``…) and ``diff`` of those consolidated updates
    (``"time >= 6"``, ``"diff < 0"``).
    """
    return _retrying(lambda: _history(store, store.trace(trace), where), f"history of trace {trace!r}")


def _history(store: Store, tr: Trace, where: str | None) -> pa.Table:
    with connect(store) as con:
        expr = _check_where(con, tr, where, _empty_updates(tr).schema)
        src = _source(store, tr)
        if src is None:
            return _empty_updates(tr)
        return _history_query(con, store, tr, src, expr)


def _history_query(con, store: Store, tr: Trace, src: str, expr: str | None) -> pa.Table:
    tcols = time_columns(tr.d)
    m = tr.since.meet_time()
    if m is None:
        times = [quote(c) for c in tcols]
    else:
        times = [f"GREATEST({quote(c)}, CAST({v} AS BIGINT))" for c, v in zip(tcols, m)]
    data = [quote(c) for c in tr.data_columns]
    sel = ", ".join(data + [f"{x} AS {quote(c)}" for x, c in zip(times, tcols)])
    group = ", ".join(data + times)
    order = ", ".join(data + [quote(c) for c in tcols])
    q = (f"SELECT {sel}, CAST(SUM(diff) AS BIGINT) AS diff FROM {src}"
         f" GROUP BY {group} HAVING SUM(diff) <> 0")
    q = f"SELECT * FROM ({q})" + (f" WHERE ({expr})" if expr else "") + f" ORDER BY {order}"
    return _cast(_run(con, q, f"history of trace {tr.name!r} failed", store, [tr]),
                 _empty_updates(tr).schema)


def register_traces(con, state, sources: dict[str, list[str]]) -> None:
    """Create one temporary view per trace of ``state`` on ``con``, reading the files
    ``sources`` gives for it (the checked local paths of its layers)."""
    names = []
    for name, tr in sorted(state.traces.items()):
        src = parquet_source(sources[name])
        if src is None:
            con.register(f"__ddcli_empty_{len(names)}", _empty_updates(tr))
            src = quote(f"__ddcli_empty_{len(names)}")
        con.execute(f"CREATE TEMP VIEW {quote(name)} AS SELECT * FROM {src}")
        names.append(name)
    register_trace_at(con, {n: state.traces[n] for n in names})


def sql(store: Store, query: str) -> pa.Table:
    """Run a DuckDB query with every trace as a view of its updates.

    User traces are views under their names; pipeline state (names with a dot) only under
    the quoted name. A statement that returns nothing gives an empty table.

    The database may read exactly the layer files of the version read: the checked
    copies the views read (on an object store, local copies of the objects) and the
    store's own paths of them, so ``read_parquet('<a layer>')`` works on every storage.
    """
    import duckdb
    if not query or not query.strip():
        raise StoreError("give a SQL query, e.g. \"SELECT * FROM words\"")

    sandbox.check_read_only(query)

    def read() -> pa.Table:
        state = store.state()
        sources = {name: store.read_paths(tr, local=True) for name, tr in state.traces.items()}
        paths = [p for t in state.traces.values() for p in store.layer_paths(t)]
        allowed = sorted(set(paths) | {p for ps in sources.values() for p in ps})
        with contextlib.closing(sandbox.sandbox(paths=allowed, prepare=store.blobs.prepare_duckdb)) as con:
            register_traces(con, state, sources)
            try:
                rel = con.sql(query)
                return pa.table({}) if rel is None else _narrow(rel.to_arrow_table())
            except duckdb.Error as e:
                _explain_failure(store, list(state.traces.values()), e)
                raise StoreError(f"sql: {_refusal(e) or _one_line(e)}") from None
    return _retrying(read, "sql")


def _narrow(table: pa.Table) -> pa.Table:
    """DuckDB sums BIGINTs into HUGEINTs (Arrow decimal128(38, 0)): give back int64 where
    every value fits, so ``SUM(diff)`` reads as the integer it is in CSV and JSON."""
    import pyarrow.compute as pc
    for i, f in enumerate(table.schema):
        if pa.types.is_decimal(f.type) and f.type.scale == 0:
            try:
                table = table.set_column(i, f.name, pc.cast(table.column(i), pa.int64(), safe=True))
            except (pa.ArrowException, ValueError):
                pass
    return table


# ---------------------------------------------------------------- status


def _holds(tr: Trace) -> str:
    return " ".join(f"{h}@{format_frontier(v.since)}" for h, v in sorted(tr.holds.items()))


def trace_status(tr: Trace) -> dict:
    return {
        "trace": tr.name,
        "columns": ", ".join(f"{f.name}:{f.type}" for f in tr.schema),
        "key": ",".join(tr.key),
        "d": tr.d,
        "since": format_frontier(tr.since),
        "upper": format_frontier(tr.upper),
        "layers": len(tr.layers),
        "pending": len(tr.pending),
        "rows": tr.rows(),
        "bytes": tr.bytes(),
        "holds": _holds(tr),
        "owner": tr.owner or "",
    }


def status(store: Store, trace: str | None = None, *, internal: bool = False) -> pa.Table:
    """One row per trace: schema, key, frontiers, layers, size and reader holds.

    With ``trace``, only that trace (internal or not). Internal traces (pipeline state,
    names with a dot) are listed only with ``internal=True``.
    """
    state = store.state()
    if trace is not None:
        rows = [trace_status(store.trace(trace, state))]
    else:
        rows = [trace_status(t) for n, t in sorted(state.traces.items()) if internal or "." not in n]
    trace_schema = pa.schema([("trace", pa.string()), ("columns", pa.string()), ("key", pa.string()),
                              ("d", pa.int64()), ("since", pa.string()), ("upper", pa.string()),
                              ("layers", pa.int64()), ("pending", pa.int64()), ("rows", pa.int64()),
                              ("bytes", pa.int64()), ("holds", pa.string()), ("owner", pa.string())])
    return pa.Table.from_pylist(rows, schema=trace_schema)
