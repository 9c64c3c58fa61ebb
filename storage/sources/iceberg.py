"""An Iceberg table's snapshots as changes, read with pyiceberg.

The table comes from a SQL catalog (``iceberg:sqlite:////data/cat.db#ns.table``: the
catalog's URI, then the table's name after the last ``#``) or from a metadata file
(``iceberg:/data/t/metadata/00004-….metadata.json``, ``StaticTable.from_metadata``). Its
snapshots are those of the main branch's history (the current snapshot and its ancestors),
oldest first; each snapshot's number is its sequence number. The trace records the last
snapshot it took by id, so a table rolled back past it, or whose history expired, is refused.

A snapshot's changes are the difference of its scan and its parent's: the file scan tasks
(a data file with the delete files that apply to it) it has and the parent has not +1, the
ones the parent has and it has not -1, each read by pyiceberg's own reader, positional
deletes applied. A file that gained a delete file is thereby read whole -1 and again with
the deletes +1, and the rows kept cancel when the trace consolidates. Copy-on-write
overwrites and deletes are files removed and added. What pyiceberg cannot read (equality
deletes) is refused in one line.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from storage.errors import StoreError
from storage.sources.change import Change, plain_table


class IcebergSource:
    """The Iceberg table ``spec`` names: ``CATALOG_URI#namespace.table`` or a metadata file."""

    def __init__(self, spec: str):
        if not spec:
            raise StoreError("iceberg: give CATALOG_URI#namespace.table or a metadata file, "
                             "e.g. iceberg:sqlite:////data/cat.db#sales.orders")
        self.spec = spec
        self.label = f"iceberg table {spec}"
        self.table = self._load()
        self.id = "iceberg:" + str(self.table.metadata.table_uuid)

    def _fail(self, what: str, e: Exception) -> StoreError:
        return StoreError(f"{self.label}: {what}: {' '.join(str(e).split())[:300]}")

    def _load(self):
        props = _s3_properties()
        uri, hash_, name = self.spec.rpartition("#")
        try:
            if hash_ and "://" in uri:
                from pyiceberg.catalog.sql import SqlCatalog
                return SqlCatalog(_catalog_name(uri, name), uri=uri, **props).load_table(name)
            from pyiceberg.table import StaticTable
            path = self.spec if "://" in self.spec else os.path.realpath(self.spec)
            return StaticTable.from_metadata(path, props)
        except Exception as e:  # noqa: BLE001 - a missing catalog, table or file: pyiceberg's many types
            raise self._fail("cannot be opened", e) from None

    def changes(self, after: dict | None, *, limit: int | None, budget, progress=None) -> list[Change]:
        """The snapshots of the main branch after ``after`` (the record of the last one taken)."""
        from pyiceberg.table.snapshots import ancestors_of
        meta = self.table.metadata
        current = self.table.current_snapshot()
        chain = list(reversed(list(ancestors_of(current, meta)))) if current is not None else []
        start = 0
        if after is not None:
            ids = [s.snapshot_id for s in chain]
            if after["snapshot"] not in ids:
                raise StoreError(f"{self.label}: snapshot {after['snapshot']}, the last one this trace took, is no "
                                 f"longer in the main branch's history (rolled back, or expired); ingest the table "
                                 f"into a new trace")
            start = ids.index(after["snapshot"]) + 1
        new = chain[start:] if limit is None else chain[start:start + limit]
        if not new:
            return []
        prev = self._tasks(chain[start - 1].snapshot_id) if start > 0 else {}
        out = []
        for s in new:
            if progress:
                progress(f"{self.label} snapshot {s.snapshot_id}")
            tasks = self._tasks(s.snapshot_id)
            schema = meta.schema_by_id(s.schema_id) if s.schema_id is not None else meta.schema()
            number = s.sequence_number if meta.format_version >= 2 else None
            c = Change({"snapshot": s.snapshot_id, "sequence": s.sequence_number}, number,
                       int(s.timestamp_ms) * 1000, schema.as_arrow())
            c.rows = self._rows(prev, tasks, schema, budget)
            out.append(c)
            prev = tasks
        return out

    def _tasks(self, snapshot_id: int) -> dict:
        """The snapshot's file scan tasks, by data file and the delete files applied to it."""
        try:
            tasks = self.table.scan(snapshot_id=snapshot_id).plan_files()
            return {(t.file.file_path, frozenset(d.file_path for d in t.delete_files)): t for t in tasks}
        except Exception as e:  # noqa: BLE001
            raise self._fail(f"snapshot {snapshot_id} cannot be planned", e) from None

    def _rows(self, prev: dict, tasks: dict, schema, budget) -> pa.Table | None:
        """The rows of the tasks ``prev`` has and ``tasks`` has not (-1), and the reverse (+1)."""
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan
        parts = []
        for chosen, sign in (([t for k, t in prev.items() if k not in tasks], -1),
                             ([t for k, t in tasks.items() if k not in prev], 1)):
            if not chosen:
                continue
            try:
                t = ArrowScan(self.table.metadata, self.table.io, schema, AlwaysTrue()).to_table(chosen)
            except Exception as e:  # noqa: BLE001 - equality deletes, a missing data file, ...
                raise self._fail("data files cannot be read", e) from None
            budget.take(t.nbytes, self.label)
            t = plain_table(t)
            parts.append(t.append_column("diff", pa.array(np.full(t.num_rows, sign, dtype=np.int64))))
        return pa.concat_tables(parts) if parts else None


def _catalog_name(uri: str, name: str) -> str:
    """The name of the catalog that holds table ``name`` in the SQL catalog database at
    ``uri`` (pyiceberg keeps several catalogs' tables in one database, by catalog name)."""
    import sqlalchemy
    namespace, _, table = name.rpartition(".")
    engine = sqlalchemy.create_engine(uri)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sqlalchemy.text(
                "SELECT DISTINCT catalog_name FROM iceberg_tables WHERE table_namespace = :ns AND table_name = :t"),
                {"ns": namespace, "t": table}).fetchall()
    except sqlalchemy.exc.SQLAlchemyError as e:
        raise StoreError(f"iceberg table {uri}#{name}: the catalog database cannot be read: "
                         f"{' '.join(str(e).split())[:200]}") from None
    finally:
        engine.dispose()
    if len(rows) > 1:
        raise StoreError(f"iceberg table {uri}#{name}: catalogs {', '.join(r[0] for r in rows)} of that database "
                         f"all hold a table of that name")
    return rows[0][0] if rows else "ddcli"


def _s3_properties() -> dict[str, str]:
    """pyiceberg's S3 settings from the variables S3 stores read (storage/blobs/s3.py)."""
    env = os.environ
    props = {"s3.endpoint": env.get("AWS_ENDPOINT_URL"),
             "s3.region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
             "s3.access-key-id": env.get("AWS_ACCESS_KEY_ID"),
             "s3.secret-access-key": env.get("AWS_SECRET_ACCESS_KEY"),
             "s3.session-token": env.get("AWS_SESSION_TOKEN")}
    return {k: v for k, v in props.items() if v}
