"""A pipeline output's current state as a Delta table: the collection, not its log.

``STORE/tables/NAME`` holds the output's collection at its latest complete time (the
upper's predecessor when ``d = 1``; every sealed update when ``d >= 2``, as ``ddcli query``
answers): its data columns and the multiplicity column ``ddcli query`` shows (``count``, or
``multiplicity`` beside a data column named ``count``). Unlike the trace's own table
(storage/lake/table.py), whose files are the trace's layers, this one is written: each
ddcli commit that moves the output becomes one Delta MERGE of the rows whose multiplicity
changed (deleted, updated or inserted), with the change data feed on, so that readers get
``_change_type`` rows.

The change since the time ``t`` the table shows (its commit info names it) to the new time
``t'`` is, for ``d = 1``, the sum of the updates at times in ``(t, t']``, read from the
layers that can hold such times only, so its cost follows the change. That holds while
``t`` is beyond the trace's since (no compaction moved an update across ``t``); otherwise,
for ``d >= 2`` and for a table written from an unknown time, the change is the new
collection minus the table's rows (a full comparison, still written as a merge of the rows
that differ).

Each version carries ``txn {appId: "ddcli", version: V}`` (Delta's idempotent-write
marker: the ddcli log version it shows, never written twice nor moved back) and, in its
commit info under ``ddcli``, the output, the time, upper and since it shows, the log
version and ddcli's version.
"""

from __future__ import annotations

import time

import pyarrow as pa

from storage.lake.table import APP_ID, ATTEMPTS, ddcli_version, shown, storage_options
from storage.lake.types import delta_arrow_schema, delta_problem
from storage.lattice import format_frontier, time_columns
from storage.sql.duck import connect, parquet_source, string_literal
from storage.state.trace import Trace, count_column

CHANGE = "__ddcli_change"  # the change of multiplicity of a row, in the merge's source
# files of about 1 MiB: a merge rewrites the files holding a changed row, so their size bounds what a
# change of one row costs; readers still get few files per million rows
TABLE_CONFIG = {"delta.enableChangeDataFeed": "true", "delta.targetFileSize": str(1 << 20)}


def table_uri(store, name: str) -> str:
    return store.blobs.join(store.path, "tables", name)


def is_output(name: str, raw: dict | None) -> bool:
    """A pipeline's output (a trace its pipeline writes that users name), not its state."""
    return raw is not None and bool(raw.get("owner")) and "." not in name


def latest_time(trace: Trace) -> tuple | None:
    """The time the table shows: ``upper - 1`` for ``d = 1``; None (every sealed update) else."""
    if trace.d == 1 and not trace.upper.is_empty():
        return (trace.upper.elements[0][0] - 1,)
    return None


def table_schema(trace: Trace) -> pa.Schema:
    """The table's columns: the trace's data columns as Delta declares them, the multiplicity."""
    declared = delta_arrow_schema(trace.schema, trace.d)
    fields = [declared.field(c) for c in trace.data_columns]
    return pa.schema(fields + [pa.field(count_column(trace), pa.int64())])


def _info(name: str, trace: Trace | None, version: int, how: str, empty: str | None = None) -> dict:
    info = {"output": name, "ddcli": ddcli_version(), "logVersion": version, "change": how}
    if trace is None:
        return {"ddcli": {**info, "empty": empty}, "userMetadata": f"ddcli {info['ddcli']}: empty, {empty}"}
    t = latest_time(trace)
    info.update(time=list(t) if t is not None else None, upper=trace.upper.to_json(), since=trace.since.to_json(),
                d=trace.d)
    at = f"time {t[0]}" if t is not None else f"upper {format_frontier(trace.upper)}"
    # also as flat strings, named as in the Iceberg snapshots' summaries (storage/lake/iceberg.py)
    flat = {"ddcli.time": str(t[0]) if t is not None else "", "ddcli.upper": format_frontier(trace.upper),
            "ddcli.log-version": str(version)}
    return {"ddcli": info, **flat,
            "userMetadata": f"ddcli {info['ddcli']}: output {name} at {at}, log version {version}"}


def _properties(name: str, trace: Trace | None, version: int, how: str, empty: str | None = None):
    from deltalake.transaction import CommitProperties, Transaction
    return CommitProperties(custom_metadata=_info(name, trace, version, how, empty), max_commit_retries=0,
                            app_transactions=[Transaction(APP_ID, version)])


# ------------------------------------------------------------------ bringing a table up to a trace


def bring_up(store, name: str, trace: Trace | None, version: int) -> str:
    """Make the table of output ``name`` show ``trace`` as of ddcli log version ``version``
    (``trace`` None: no longer an output, the table is emptied). One Delta version at most;
    returns what happened (``current``, ``created``, ``incremental``, ``full``, ...).
    Another writer that commits first makes it look again: its change was computed from
    what the table showed before."""
    from deltalake.exceptions import CommitFailedError
    for _ in range(ATTEMPTS):
        try:
            return _bring_up_once(store, name, trace, version)
        except CommitFailedError:
            time.sleep(0.01)
        except Exception as e:  # noqa: BLE001 - a create racing another: the table exists now
            if "already exists" not in str(e).lower():
                raise
    raise CommitFailedError(f"the current-state table of output {name!r} kept changing; "
                            f"the next command brings it up to date")


def _bring_up_once(store, name: str, trace: Trace | None, version: int) -> str:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    uri, options = table_uri(store, name), storage_options(store.blobs)
    try:
        table = DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        table = None
    if table is not None and (table.transaction_version(APP_ID) or -1) >= version:
        return "current"  # written by another command already, or by a newer one
    problem = delta_problem(trace.schema) if trace is not None else None
    if trace is None or problem:
        return _empty(store, table, name, version, problem or "no longer a pipeline output")
    if table is None:
        _write(store, uri, name, trace, version, "error", options)
        return "created"
    info = shown(store.blobs, uri, table.version()) or {}
    if not _same_columns(table, table_schema(trace)):  # the output was made again with other columns
        _write(store, uri, name, trace, version, "overwrite", options)
        return "replaced"
    if info.get("upper") == trace.upper.to_json() and info.get("d") == trace.d and "empty" not in info:
        return "current"
    change, how = change_since(store, trace, info.get("time"), lambda: pa.table(table.to_pyarrow_table()))
    _merge(table, change, trace, _properties(name, trace, version, how))
    return how


def _same_columns(table, schema: pa.Schema) -> bool:
    """Whether the table has the columns (names and types) ``schema`` has, whatever
    nullability or metadata the Arrow schemas carry."""
    have = pa.schema([pa.field(f.name, f.type) for f in pa.schema(table.schema().to_arrow())])
    return have.names == schema.names and all(pa.field(f.name, f.type) == have.field(f.name) for f in schema)


def _empty(store, table, name: str, version: int, why: str) -> str:
    if table is None:
        return "no table"
    if "empty" in (shown(store.blobs, table_uri(store, name), table.version()) or {}):
        return "current"
    table.delete(commit_properties=_properties(name, None, version, "emptied", why))
    return "emptied"


def _write(store, uri: str, name: str, trace: Trace, version: int, mode: str, options) -> None:
    """Create (or replace) the table with the whole collection."""
    from deltalake import write_deltalake
    rows = collection(store, trace)
    write_deltalake(uri, rows, mode=mode, schema_mode="overwrite" if mode == "overwrite" else None,
                    configuration=TABLE_CONFIG, storage_options=options, name=name,
                    description=f"ddcli pipeline output {name}: its collection at its latest complete time, "
                                f"one row per distinct row with its multiplicity. Written by ddcli.",
                    commit_properties=_properties(name, trace, version, "full"))


# ------------------------------------------------------------------ the change, in DuckDB


def sql_name(c: str) -> str:
    return '"' + c.replace('"', '""') + '"'


def _updates_sql(store, trace: Trace, layers) -> str | None:
    return parquet_source(store.read_paths(trace, layers, local=True))


def _time_condition(trace: Trace, t: tuple | None, after: tuple | None = None) -> str:
    conds = []
    if t is not None:
        conds += [f"{sql_name(c)} <= {x}" for c, x in zip(time_columns(trace.d), t)]
    if after is not None:
        conds += [f"{sql_name(c)} > {x}" for c, x in zip(time_columns(trace.d), after)]
    return " WHERE " + " AND ".join(conds) if conds else ""


def query(store, sql: str, schema: pa.Schema, tables: dict | None = None) -> pa.Table:
    with connect(store, upkeep=True) as con:
        for n, t in (tables or {}).items():
            con.register(n, t)
        return con.sql(sql).to_arrow_table().rename_columns(schema.names).cast(schema)


def collection(store, trace: Trace) -> pa.Table:
    """The collection the table shows for ``trace``, in the table's schema."""
    schema = table_schema(trace)
    src = _updates_sql(store, trace, trace.layers)
    if src is None:
        return schema.empty_table()
    cols = ", ".join(sql_name(c) for c in trace.data_columns)
    order = ", ".join(sql_name(c) for c in _sort_order(trace))
    return query(store, f"SELECT {cols}, CAST(SUM(diff) AS BIGINT) FROM {src}"
                         f"{_time_condition(trace, latest_time(trace))} GROUP BY ALL HAVING SUM(diff) <> 0 "
                         f"ORDER BY {order}", schema)


def _sort_order(trace: Trace) -> list[str]:
    """The trace's own order (its key first): the table's files then hold ranges of it,
    which a merge's bounds (:func:`_bounds`) skip by their statistics."""
    return list(trace.key) + [c for c in trace.data_columns if c not in trace.key]


def change_since(store, trace: Trace, old: list | None, have) -> tuple[pa.Table, str]:
    """The rows whose multiplicity changed from what a table shows (the collection at time
    ``old``, or None: unknown; ``have()`` reads its rows) to ``trace``'s latest time: the
    data columns and the change (:data:`CHANGE`), and how it was found."""
    schema = table_schema(trace)
    change_schema = pa.schema(list(schema)[:-1] + [pa.field(CHANGE, pa.int64())])
    cols = ", ".join(sql_name(c) for c in trace.data_columns)
    new = latest_time(trace)
    if (trace.d == 1 and new is not None and isinstance(old, list) and len(old) == 1 and old[0] <= new[0]
            and trace.since.beyond(tuple(old))):
        # times at or before the old time stay there whatever compaction did (the since is
        # not past it): the layers that can hold later times carry the whole change
        layers = [l for l in trace.layers if l.upper.is_empty() or l.upper.elements[0][0] > old[0] + 1]
        src = _updates_sql(store, trace, layers)
        if src is None:
            return change_schema.empty_table(), "incremental"
        sql = (f"SELECT {cols}, CAST(SUM(diff) AS BIGINT) FROM {src}{_time_condition(trace, new, tuple(old))} "
               f"GROUP BY ALL HAVING SUM(diff) <> 0")
        return query(store, sql, change_schema), "incremental"
    now = collection(store, trace)
    m = sql_name(schema.names[-1])
    sql = (f"SELECT {cols}, CAST(SUM(n) AS BIGINT) FROM (SELECT {cols}, {m} AS n FROM now "
           f"UNION ALL SELECT {cols}, -{m} AS n FROM have) GROUP BY ALL HAVING SUM(n) <> 0")
    return query(store, sql, change_schema, {"now": now, "have": have().cast(schema)}), "full"


def _merge(table, change: pa.Table, trace: Trace, properties) -> None:
    """One Delta version: rows whose multiplicity falls to 0 deleted, the others updated,
    new ones inserted (null-safe equality on every data column)."""
    if change.num_rows == 0:
        table.create_write_transaction([], mode="append", schema=table.schema(), commit_properties=properties)
        return
    m = sql_name(count_column(trace))
    data = [sql_name(c) for c in trace.data_columns]
    on = " AND ".join([f"(t.{c} IS NOT DISTINCT FROM s.{c})" for c in data] + _bounds(change, trace)) or "TRUE"
    (table.merge(change, predicate=on, source_alias="s", target_alias="t", commit_properties=properties)
          .when_matched_delete(predicate=f"t.{m} + s.{CHANGE} = 0")
          .when_matched_update(updates={m: f"t.{m} + s.{CHANGE}"})
          .when_not_matched_insert(updates={**{c: f"s.{c}" for c in data}, m: f"s.{CHANGE}"})
          .execute())


def _literal(v, t: pa.DataType) -> str | None:
    if pa.types.is_integer(t):
        return str(int(v))
    if pa.types.is_decimal(t):
        return f"CAST('{v:f}' AS DECIMAL({t.precision}, {t.scale}))"
    if pa.types.is_date(t):
        return f"CAST('{v.isoformat()}' AS DATE)"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return string_literal(v)
    return None  # doubles (NaN), timestamps, binaries: no bound


def _bounds(change: pa.Table, trace: Trace) -> list[str]:
    """Conditions on the target alone that every row the change matches meets (each
    column between the change's least and greatest value, or null): delta-rs skips the
    files whose statistics fail them, so a merge reads the files a change can touch."""
    import pyarrow.compute as pc
    out = []
    for c in _sort_order(trace):
        col = change.column(c)
        bounds = pc.min_max(col)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        lo_sql, hi_sql = (_literal(v, col.type) if v is not None else None for v in (lo, hi))
        if lo_sql is None or hi_sql is None:
            continue
        n = sql_name(c)
        cond = f"t.{n} >= {lo_sql} AND t.{n} <= {hi_sql}"
        out.append(f"(t.{n} IS NULL OR ({cond}))" if col.null_count else f"({cond})")
    return out
