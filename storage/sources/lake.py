"""Ingest a Delta or Iceberg table's new versions into a trace, each version once.

``ddcli ingest TRACE delta:PATH`` (a local folder or ``s3://…``) and ``ddcli ingest TRACE
iceberg:CATALOG_URI#namespace.table`` or ``iceberg:/path/metadata.json`` take the versions
(Delta) or snapshots of the main branch (Iceberg) made since the last ingest of that table
into that trace. Each becomes one ddcli time: its version or sequence number, or with
``--time-from timestamp`` its commit time in microseconds since 1970 (moved up to the
trace's upper when the table's clock went back, so every version keeps a time of its own).
Its rows are the version's changes: rows added diff +1, rows removed diff -1
(storage/sources/delta.py, storage/sources/iceberg.py say how each format tells them).

Exactly once: the trace records how far it took each table (``Trace.sources``: the last
version or snapshot) in the same commit as the updates
(:func:`storage.state.transitions.took_lake_table`), so a command killed before the commit
leaves both as they were and the next ingest takes the same versions again, and two
commands never both take one. A version that changed no data (metadata only) adds nothing
but still moves the record and the upper. The table's schema becomes the trace's at the
first ingest; a version that changes it is refused in one line. Every version is read and
checked (storage/files/validate.py, the checks of update files) before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa

from storage.errors import DiffOverflow, StoreError
from storage.files.limits import ReadBudget, type_problem
from storage.lattice import Frontier, format_frontier
from storage.layer import updates_table
from storage.sources.change import Change, plain_schema
from storage.state import transitions
from storage.state.seal import check_open
from storage.state.trace import Trace, check_name, check_new_name
from storage.writes.diff_sums import check_diff_sums

TIME_FROM = ("version", "timestamp")
_RESERVED = re.compile(r"(time|diff|count|time_\d+)\Z", re.IGNORECASE)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class LakeIngest:
    trace: str
    label: str  # the table, for messages
    rows: int
    numbers: list[int] = field(default_factory=list)  # the versions (snapshots' numbers) taken
    upper: Frontier | None = None
    created: bool = False
    position: dict | None = None  # how far the trace has taken the table now


def open_table(spec: str):
    """The Delta or Iceberg table a ``delta:…`` or ``iceberg:…`` source names."""
    if spec.startswith("delta:"):
        from storage.sources.delta import DeltaSource
        return DeltaSource(spec[len("delta:"):])
    from storage.sources.iceberg import IcebergSource
    return IcebergSource(spec[len("iceberg:"):])


def ingest_lake(store, name: str, spec: str, *, key: list[str] | None = None, time_from: str = "version",
                limit: int | None = None, progress: Callable[[str], None] | None = None) -> LakeIngest:
    """Take the versions of lake table ``spec`` that trace ``name`` has not taken (at most
    ``limit``), as one layer and one commit; or change nothing."""
    check_name(name)
    if time_from not in TIME_FROM:
        raise StoreError(f"--time-from {time_from!r}: give version or timestamp")
    if limit is not None and limit < 1:
        raise StoreError(f"--max-versions {limit}: give a positive number")
    table = open_table(spec)
    state = store.state(to_write=True)
    existing = state.traces.get(name)
    if existing is None:
        check_new_name(name, state.traces)
    else:
        if existing.owner:
            raise StoreError(f"trace {name!r} is written by pipeline {existing.owner!r}; it cannot be ingested into")
        check_open(existing)
        if existing.d != 1:
            raise StoreError(f"trace {name!r} has times of {existing.d} coordinates; a lake table's versions "
                             f"are times of one")
    before = existing.sources.get(table.id) if existing else None
    budget = ReadBudget()
    changes = table.changes(before, limit=limit, budget=budget, progress=progress)
    if not changes:
        return LakeIngest(name, table.label, 0, upper=existing.upper if existing else None, position=before)
    schema = _schema(name, table.label, existing, changes)
    floor = existing.upper.elements[0][0] if existing else 0
    times = _times(name, table.label, changes, time_from, floor, existing)
    updates = pa.concat_tables([_updates(table.label, c, t, schema) for c, t in zip(changes, times)])
    key = _key(name, existing, key, schema)
    check_diff_sums(store, name, existing, updates, schema.names)
    proto = existing or Trace(name, schema, key, 1, Frontier.minimum(1), Frontier.minimum(1))
    new_upper = Frontier([(times[-1] + 1,)], 1)
    after = dict(changes[-1].position, time=times[-1])

    def write(written):
        try:
            return store.write_seal(proto, updates, new_upper, written)
        except DiffOverflow as e:
            raise DiffOverflow(f"trace {name!r}: {e}; nothing was ingested") from None

    def change(s, sealed):
        s = transitions.ingest(s, proto, existing, sealed, new_upper, [], {})
        return transitions.took_lake_table(s, name, table.id, before, after)

    store.write_and_commit("ingest", write, change, merge=[name])
    return LakeIngest(name, table.label, updates.num_rows, [c.number for c in changes], new_upper,
                      existing is None, after)


def _schema(name: str, label: str, existing: Trace | None, changes: list[Change]) -> pa.Schema:
    """The trace's schema; every version's must be it (the first version's for a new trace)."""
    want = existing.schema if existing else plain_schema(changes[0].schema)
    for f in want:
        if _RESERVED.match(f.name):
            raise StoreError(f"{label}: column {f.name!r} has a name ddcli keeps for times, diffs and counts "
                             f"(time, time_N, diff, count); such a table cannot be ingested")
        if not _IDENT.match(f.name):
            raise StoreError(f"{label}: column {f.name!r}: ddcli's column names are identifiers "
                             f"([A-Za-z_][A-Za-z0-9_]*); such a table cannot be ingested")
        if type_problem(f.type):
            raise StoreError(f"{label}: column {f.name!r} {type_problem(f.type)}")
    for c in changes:
        have = plain_schema(c.schema)
        if have != want:
            raise StoreError(f"{label}: {_version(c)} has the schema {_show(have)}, but trace {name!r} holds "
                             f"{_show(want)}; a trace keeps one schema: ingest the table into a new trace")
    return want


def _show(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name} {f.type}" for f in schema) + ")"


def _version(c: Change) -> str:
    return ", ".join(f"{k} {v}" for k, v in c.position.items())


def _times(name: str, label: str, changes: list[Change], time_from: str, floor: int,
           existing: Trace | None) -> list[int]:
    """Each version's time: its number, or its commit time kept increasing and at or beyond
    ``floor`` (the trace's upper)."""
    out = []
    for c in changes:
        if time_from == "version":
            if c.number is None:
                raise StoreError(f"{label}: {_version(c)} has no sequence number (an Iceberg table of format "
                                 f"version 1); use --time-from timestamp")
            if c.number < floor:
                raise StoreError(f"{label}: {_version(c)} would be time {c.number}, which is not beyond the upper "
                                 f"{format_frontier(existing.upper)} of trace {name!r}; ingest the table into a "
                                 f"new trace, or with --time-from timestamp")
            out.append(c.number)
        else:
            if c.timestamp_us is None:
                raise StoreError(f"{label}: {_version(c)} records no commit time; use --time-from version")
            out.append(max(c.timestamp_us, floor, out[-1] + 1 if out else floor))
    return out


def _updates(label: str, c: Change, t: int, schema: pa.Schema) -> pa.Table:
    """A version's rows as checked updates at time ``t`` (the checks of update files)."""
    from storage.files.locations import UpdateObject
    from storage.files.sources import Source
    from storage.files.validate import validate

    rows = c.rows
    if rows is None or rows.num_rows == 0:
        empty = pa.table({f.name: pa.array([], f.type) for f in schema})
        return updates_table(empty, [np.zeros(0, np.int64)], np.zeros(0, np.int64), 1)
    src = Source(UpdateObject(f"{label} ({_version(c)})"), ReadBudget())
    src.fmt = "parquet"
    data = rows.select(schema.names)
    table = data.append_column("time", pa.array(np.full(rows.num_rows, t, dtype=np.int64)))
    table = table.append_column("diff", rows.column("diff"))
    batch = validate(src, table, "", schema=schema, d=1, time=None)
    return updates_table(batch.data, batch.times, batch.diff, 1)


def _key(name: str, existing: Trace | None, key: list[str] | None, schema: pa.Schema) -> list[str]:
    """The trace's key: as given (first ingest; default the first column), or the existing one."""
    if existing is not None:
        if key and list(key) != existing.key:
            raise StoreError(f"trace {name!r} is keyed by {','.join(existing.key)}, not {','.join(key)}")
        return existing.key
    key = list(key) if key else [schema.names[0]]
    for k in key:
        if k not in schema.names:
            raise StoreError(f"key column {k!r} is not a column of the table (columns: {', '.join(schema.names)})")
    return key
