"""Ingest: validate update files, write one layer, commit it (or change nothing).

Split from storage/store.py, which keeps the state model, the commit path and compaction.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from storage import faults
from storage.state import ingested
from storage.lattice import Frontier, beyond_mask, format_frontier, format_time
from storage.layer import updates_table
from storage.files.limits import DiffOverflow
from storage.log.commit import Conflict
from storage.state.seal import check_open
from storage.store import (IngestResult, State, _apply_seal, _check_new_layers, _seal_point,
                           _written_layers)
from storage.state.trace import StoreError, Trace, check_name, check_new_name


def ingest(store, name: str, paths: list[str], *, key: list[str] | None = None,
           time: tuple[int, ...] | None = None, upper: str | Frontier | None = None,
           fmt: str | None = None, progress: Callable[[str], None] | None = None,
           null: str | None = None, columns: list[str] | None = None,
           prepare: Callable[[Trace | None, pa.Table], pa.Table] | None = None) -> IngestResult:
    """Validate every file, then write one layer and commit it; or change nothing.

    ``null`` is the CSV null marker (storage/files/nulls.py); ``columns`` the data columns the
    files hold when not all of the trace's (a delete by key). ``prepare(existing, updates)``
    sees the validated new updates before anything is written and returns the updates
    to write (an upsert adds its retractions, storage/writes/upsert.py) or raises a user error.
    """
    from storage.files.read import read_update_file
    from storage.lattice import parse_frontier

    check_name(name)
    state = store.state()
    existing = state.traces.get(name)
    if existing is None:
        check_new_name(name, state.traces)
    if existing is not None and existing.owner:
        raise StoreError(f"trace {name!r} is written by pipeline {existing.owner!r}; it cannot be ingested into")
    if existing is not None:
        check_open(existing)
    if not paths:
        raise StoreError("give at least one update file")
    if time is not None:
        time = tuple(int(c) for c in time) if isinstance(time, (tuple, list)) else (int(time),)
    tag = "" if time is None else "@" + format_time(time)

    batches = []
    schema = existing.schema if existing else None
    d = existing.d if existing else None
    if columns is not None and existing is not None:
        missing = [c for c in columns if c not in existing.schema.names]
        if missing:
            raise StoreError(f"{missing[0]!r} is not a column of trace {name!r} "
                             f"(columns: {', '.join(existing.schema.names)})")
        schema = pa.schema([existing.schema.field(c) for c in columns])
    for p in paths:
        if progress:
            progress(p)
        b = read_update_file(p, fmt=fmt, schema=schema, d=d, time=time, null=null)
        if schema is None:
            schema, d = b.data.schema, b.d
        elif b.data.schema != schema:
            b.data = b.data.cast(schema)
        batches.append(b)

    key = list(key) if key else None
    if existing is None:
        key = key or [schema.names[0]]
        for k in key:
            if k not in schema.names:
                raise StoreError(f"key column {k!r} is not a column of {paths[0]} (columns: {', '.join(schema.names)})")
    elif key and key != existing.key:
        raise StoreError(f"trace {name!r} is keyed by {','.join(existing.key)}, not {','.join(key)}")
    else:
        key = existing.key

    cur_upper = existing.upper if existing else Frontier.minimum(d)
    seen = set(existing.ingested) if existing else set()
    record = existing.ingested if existing else {}
    fresh, skipped = [], []
    for b in batches:
        sig = b.sha256 + tag
        if sig in seen:
            skipped.append(b.path)
        else:
            seen.add(sig)
            fresh.append(b)

    new_upper = cur_upper
    if isinstance(upper, str):
        upper = parse_frontier(upper, d)
    if upper is not None:
        if upper.d != d:
            raise StoreError(f"--upper {format_frontier(upper)} has {upper.d} coordinate(s); the trace's times have {d}")
        if not upper.dominates(cur_upper):
            raise StoreError(f"--upper {format_frontier(upper)} is behind the trace's upper {format_frontier(cur_upper)}; frontiers only move forward")
        new_upper = upper

    for b in fresh:
        mask = beyond_mask(b.times, cur_upper)
        if not mask.all():
            i = int(np.argmin(mask))
            t = tuple(int(c[i]) for c in b.times)
            raise StoreError(f"{b.path}: row {i + 1}: time {format_time(t)} is not beyond the upper "
                             f"{format_frontier(cur_upper)} of trace {name!r} (those times are sealed); "
                             f"to correct the past, ingest the correction at a time beyond the upper "
                             f"(e.g. at time {format_frontier(cur_upper).split()[0]}), with --upsert KEYCOLS "
                             f"to have the old rows retracted for you" + ingested.forgotten_note(record, b.path))
        if upper is not None:
            late = beyond_mask(b.times, new_upper)
            if late.any():
                i = int(np.argmax(late))
                t = tuple(int(c[i]) for c in b.times)
                raise StoreError(f"{b.path}: row {i + 1}: time {format_time(t)} is beyond the new upper "
                                 f"{format_frontier(new_upper)}")
    if upper is None and d == 1 and any(len(b.diff) for b in fresh):
        top = max(int(b.times[0].max()) for b in fresh if len(b.diff))
        if top >= 2**63 - 1:
            raise StoreError(f"time {top} is the largest int64; the upper cannot move past it")
        new_upper = Frontier([(max(top + 1, cur_upper.elements[0][0]),)], 1) if not cur_upper.is_empty() else cur_upper

    if not fresh:
        return IngestResult(name, 0, [], skipped, cur_upper, False)

    table = pa.concat_tables([updates_table(b.data, b.times, b.diff, d) for b in fresh])
    if prepare is not None:
        table = prepare(existing, table)
    proto = existing or Trace(name, schema, key, d, Frontier.minimum(d), cur_upper)
    sealed = upper is not None or d == 1
    seal_to = new_upper if sealed else cur_upper
    try:
        written = store._seal(proto, table if sealed else None, seal_to)
    except DiffOverflow as e:
        raise DiffOverflow(f"trace {name!r}: {e}; nothing was ingested") from None
    try:
        pend = [] if sealed else [store.write_layer(proto, table, lower=cur_upper, upper=cur_upper,
                                                   seq_lo=-1, seq_hi=-1)]
    except BaseException:
        store.discard(name, _written_layers(written))
        raise
    sigs = [b.sha256 + tag for b in fresh]
    new_layers = _written_layers(written) + pend

    def change(s: State) -> State:
        t = s.traces.get(name)
        if existing is None:
            if t is not None:
                raise Conflict(f"trace {name!r} was created by another command at the same time; "
                               f"nothing was ingested, retry")
            t = proto
        elif t is None:
            raise Conflict(f"trace {name!r} was removed while ingesting; nothing was ingested")
        elif _seal_point(t) != _seal_point(existing):
            raise Conflict(f"trace {name!r} changed while ingesting (another command wrote to it; "
                           f"its upper is now {format_frontier(t.upper)}); nothing was ingested, retry")
        again = [p for p, sig in zip((b.path for b in fresh), sigs) if sig in t.ingested]
        if again:
            raise Conflict(f"{again[0]} was ingested into trace {name!r} by another command at the same time; "
                           f"nothing was ingested by this one")
        _check_new_layers(store, t, new_layers)
        t = _apply_seal(t, written, seal_to)
        t = t.with_(pending=t.pending + pend, ingested=ingested.add(t.ingested, sigs))
        s.traces[name] = t
        return s

    try:
        faults.point("ingest.before_commit")
        store.commit(change)
    except BaseException:
        store._discard_unless_committed(name, new_layers)
        raise
    faults.point("ingest.after_commit")
    store._maintain_quietly(name)
    return IngestResult(name, table.num_rows, [b.path for b in fresh], skipped, seal_to, existing is None)
