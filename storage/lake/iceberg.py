"""A trace's current collection published as an Apache Iceberg table, through pyiceberg.

The table holds what the output's current-state Delta table holds (storage/lake/current.py):
the collection at the latest complete time, one row per distinct row with its multiplicity.
The first publish creates it; each later one applies the change since the time the table
shows (its current snapshot's summary names it, ``ddcli.time``) as **one** snapshot, copy on
write: the data files holding a changed row are rewritten without it, and the changed rows'
new multiplicities are appended, all in one overwrite. No equality or positional delete
files, so every Iceberg reader reads it correctly (a reader that ignores equality deletes
would otherwise serve stale rows). The catalog is a SQL catalog (``sqlite:////path/cat.db``
or any SQLAlchemy URI); each snapshot's summary also names the upper, the ddcli log version
and ddcli's version.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

import pyarrow as pa

from storage.errors import StoreError
from storage.lake.current import CHANGE, change_since, collection, latest_time, query, sql_name, table_schema
from storage.lake.table import ddcli_version
from storage.lake.types import delta_problem
from storage.lattice import format_frontier

# copy on write, in data files of about 1 MiB (of Arrow data): a change rewrites the files
# holding a changed row, so their size bounds what a change of one row costs
PROPERTIES = {**{f"write.{op}.mode": "copy-on-write" for op in ("delete", "update", "merge")},
              "write.target-file-size-bytes": str(1 << 20)}


@dataclass(frozen=True)
class Published:
    """What a publish did: the snapshot the table is at, the time it shows, rows rewritten."""
    table: str
    snapshot: int | None
    time: str
    how: str            # created, incremental, full or current (nothing to do)
    changed_rows: int
    rewritten_files: int


def parse_target(target: str) -> tuple[str, tuple[str, ...]]:
    """``CATALOG_URI#namespace.table`` -> (catalog URI, identifier)."""
    uri, sep, name = target.rpartition("#")
    parts = tuple(name.split("."))
    if not sep or not uri or len(parts) < 2 or not all(parts):
        raise StoreError(f"bad Iceberg target {target!r}: write CATALOG_URI#namespace.table, "
                         f"e.g. sqlite:////data/catalog.db#analytics.counts")
    return uri, parts


def default_warehouse(catalog_uri: str) -> str:
    """A folder ``warehouse`` next to a SQLite catalog's database file."""
    prefix = "sqlite:///"
    path = catalog_uri[len(prefix):] if catalog_uri.startswith(prefix) else ""
    if not path or path == ":memory:":
        raise StoreError(f"give --warehouse for the Iceberg catalog {catalog_uri!r} (where its data files go)")
    return "file://" + os.path.join(os.path.dirname(os.path.abspath(path)), "warehouse")


def _properties(store, trace, version: int) -> dict[str, str]:
    t = latest_time(trace)
    return {"ddcli.output": trace.name, "ddcli.time": str(t[0]) if t is not None else "",
            "ddcli.upper": format_frontier(trace.upper), "ddcli.log-version": str(version),
            "ddcli.version": ddcli_version()}


def publish(store, name: str, target: str, warehouse: str | None = None, catalog_name: str = "default") -> Published:
    """Bring the Iceberg table ``target`` to the current collection of trace ``name``
    (``catalog_name``: the name the SQL catalog's rows carry, as its readers configure it)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    catalog_uri, identifier = parse_target(target)
    state = store.state()
    trace = store.trace(name, state)
    problem = delta_problem(trace.schema)
    if problem:
        raise StoreError(f"trace {name!r} cannot be published to Iceberg: {problem}")
    catalog = SqlCatalog(catalog_name, uri=catalog_uri, warehouse=warehouse or default_warehouse(catalog_uri))
    schema, props = table_schema(trace), _properties(store, trace, state.version)
    label = ".".join(identifier)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        catalog.create_namespace_if_not_exists(identifier[:-1])
        rows = collection(store, trace)
        tx = catalog.create_table_transaction(identifier, schema=schema, properties=PROPERTIES)
        tx.append(rows, snapshot_properties=props)
        tx.commit_transaction()
        table = catalog.load_table(identifier)
        return Published(label, table.current_snapshot().snapshot_id, props["ddcli.time"], "created", rows.num_rows, 0)
    have = pa.schema([pa.field(f.name, f.type) for f in table.schema().as_arrow()])
    if have.names != schema.names:
        raise StoreError(f"Iceberg table {label} has columns {', '.join(have.names)}; trace {name!r} has "
                         f"{', '.join(schema.names)}: publish it to another table")
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    if summary is not None and summary["ddcli.upper"] == props["ddcli.upper"]:
        return Published(label, snapshot.snapshot_id, props["ddcli.time"], "current", 0, 0)
    shown = summary["ddcli.time"] if summary is not None else None
    old = [int(shown)] if shown else None
    change, how = change_since(store, trace, old, lambda: table.scan().to_arrow())
    rewritten = _apply(store, table, change, schema, props, trace.key[0] if trace.key else schema.names[0])
    snapshot = catalog.load_table(identifier).current_snapshot()
    return Published(label, snapshot.snapshot_id, props["ddcli.time"], how, change.num_rows, rewritten)


def _bounds(change: pa.Table, column: str):
    """A filter every changed row meets: ``column`` between the change's least and greatest
    value (or null), for integer and string columns; the scan skips the files whose
    statistics fail it. None: no bound."""
    import pyarrow.compute as pc
    from pyiceberg.expressions import And, GreaterThanOrEqual, IsNull, LessThanOrEqual, Or
    col = change.column(column)
    if not (pa.types.is_integer(col.type) or pa.types.is_string(col.type)) or col.null_count == len(col):
        return None
    lo_hi = pc.min_max(col)
    bound = And(GreaterThanOrEqual(column, lo_hi["min"].as_py()), LessThanOrEqual(column, lo_hi["max"].as_py()))
    return Or(IsNull(column), bound) if col.null_count else bound


def _apply(store, table, change: pa.Table, schema: pa.Schema, props: dict, first: str) -> int:
    """One overwrite snapshot: the files holding a changed row rewritten without it, the
    changed rows' new multiplicities appended (``first``: the column the table is sorted
    by first). Returns the files rewritten."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    arrow_schema = table.schema().as_arrow()
    cols = [sql_name(c) for c in schema.names[:-1]]
    m = sql_name(schema.names[-1])
    on = " AND ".join(f"(r.{c} IS NOT DISTINCT FROM c.{c})" for c in cols) or "TRUE"
    marked = pa.schema(list(schema) + [pa.field("__ddcli_hit", pa.bool_())])
    counter, rewritten, old_rows = itertools.count(0), 0, []
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
        def write(rows: pa.Table) -> None:
            for f in _dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows.cast(arrow_schema),
                                              io=table.io, write_uuid=overwrite.commit_uuid, counter=counter):
                overwrite.append_data_file(f)

        bound = _bounds(change, first) if change.num_rows else None
        scan = table.scan(row_filter=bound) if bound is not None else table.scan()
        for task in (scan.plan_files() if change.num_rows else []):
            rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table([task]).cast(schema)
            found = query(store, f"SELECT r.*, c.{sql_name(CHANGE)} IS NOT NULL FROM r LEFT JOIN c ON {on}",
                          marked, {"r": rows, "c": change})
            hit = found.column("__ddcli_hit").to_numpy(zero_copy_only=False)
            if not hit.any():
                continue
            overwrite.delete_data_file(task.file)
            rewritten += 1
            old_rows.append(found.filter(pa.array(hit)).drop_columns(["__ddcli_hit"]))
            kept = found.filter(pa.array(~hit)).drop_columns(["__ddcli_hit"])
            if kept.num_rows:
                write(kept)
        if change.num_rows:
            old = pa.concat_tables(old_rows) if old_rows else schema.empty_table()
            c = ", ".join(cols)
            new = query(store, f"SELECT {c}, CAST(SUM(n) AS BIGINT) FROM (SELECT {c}, {m} AS n FROM old UNION ALL "
                               f"SELECT {c}, {sql_name(CHANGE)} AS n FROM change) GROUP BY ALL HAVING SUM(n) <> 0",
                        schema, {"old": old, "change": change})
            if new.num_rows:
                write(new)
    tx.commit_transaction()
    return rewritten
