"""Ingest: validate update files, write one layer, commit it (or change nothing).

The sources name local files, globs and S3 objects (storage/files/locations.py). The
trace remembers what it took (storage/state/ingested.py): a local file by its content
hash, an S3 object by its URL and version, so an object already taken is skipped without
being read, and a glob run again reads only the objects it has not seen. Every file read
in one ingest shares one memory budget (storage/files/limits.py, ``DDCLI_INGEST_MEMORY``).
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


def ingest(store, name: str, paths: list, *, key: list[str] | None = None,
           time: tuple[int, ...] | None = None, upper: str | Frontier | None = None,
           fmt: str | None = None, progress: Callable[[str], None] | None = None,
           null: str | None = None, columns: list[str] | None = None,
           prepare: Callable[[Trace | None, pa.Table], pa.Table] | None = None) -> IngestResult:
    """Validate every file, then write one layer and commit it; or change nothing.

    ``paths`` are sources: local paths, globs, ``s3://`` URLs and globs, or
    :class:`~storage.files.locations.UpdateObject` items. ``null`` is the CSV null marker
    (storage/files/nulls.py); ``columns`` the data columns the files hold when not all of the
    trace's (a delete by key). ``prepare(existing, updates)``
    sees the validated new updates before anything is written and returns the updates
    to write (an upsert adds its retractions, storage/writes/upsert.py) or raises a user error.
    """
    from storage.files.locations import expand_sources

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

    schema = existing.schema if existing else None
    d = existing.d if existing else None
    if columns is not None and existing is not None:
        missing = [c for c in columns if c not in existing.schema.names]
        if missing:
            raise StoreError(f"{missing[0]!r} is not a column of trace {name!r} "
                             f"(columns: {', '.join(existing.schema.names)})")
        schema = pa.schema([existing.schema.field(c) for c in columns])
    taken = existing.ingested if existing else {}
    fresh, sigs, skipped, schema, d = _read_new(expand_sources(paths, store.path), taken, tag, schema=schema,
                                                d=d, fmt=fmt, time=time, null=null, progress=progress)

    key = _key_of(name, key, existing, schema, fresh)
    cur_upper = existing.upper if existing else Frontier.minimum(d)
    upper = _upper_option(upper, d, cur_upper)
    new_upper = upper if upper is not None else cur_upper
    _check_times(name, fresh, cur_upper, upper, taken)
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
        now = ingested.keys(t.ingested)
        again = [b.path for b, sig in zip(fresh, sigs) if set(ingested.entry_keys(sig)) & now]
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


def _read_new(objects: list, taken: dict, tag: str, *, schema, d, fmt, time, null, progress):
    """``(batches, signatures, skipped, schema, d)``: the validated updates of the objects
    the trace has not taken, each once (storage/state/ingested.py). An S3 object taken before is
    known by its URL and version and not read; a local file, or an S3 object at a version
    not seen, is known by its content once read."""
    from storage.files.read import read_update_file
    from storage.files.limits import ReadBudget
    budget = ReadBudget()
    seen = ingested.keys(taken)
    fresh, sigs, skipped = [], [], []
    for o in objects:
        version = o.version()
        if version is not None and ingested.version_key(version, tag) in seen:
            skipped.append(o.url)
            continue
        if progress:
            progress(o.url)
        b = read_update_file(o, fmt=fmt, schema=schema, d=d, time=time, null=null, budget=budget)
        if schema is None:
            schema, d = b.data.schema, b.d
        elif b.data.schema != schema:
            b.data = b.data.cast(schema)
        sig = b.sha256 + tag if version is None else f"{b.sha256}{ingested.version_key(version, tag)}"
        if ingested.entry_keys(sig)[0] in seen:
            skipped.append(b.path)  # the same bytes were taken (under another name or version)
            continue
        seen.update(ingested.entry_keys(sig))
        fresh.append(b)
        sigs.append(sig)
    return fresh, sigs, skipped, schema, d


def _check_times(name: str, fresh: list, cur_upper: Frontier, upper: Frontier | None, taken: dict) -> None:
    """Every new update is at a time beyond the trace's upper (and not beyond ``upper``,
    the one given with --upper)."""
    for b in fresh:
        mask = beyond_mask(b.times, cur_upper)
        if not mask.all():
            i = int(np.argmin(mask))
            t = tuple(int(c[i]) for c in b.times)
            raise StoreError(f"{b.path}: row {i + 1}: time {format_time(t)} is not beyond the upper "
                             f"{format_frontier(cur_upper)} of trace {name!r} (those times are sealed); "
                             f"to correct the past, ingest the correction at a time beyond the upper "
                             f"(e.g. at time {format_frontier(cur_upper).split()[0]}), with --upsert KEYCOLS "
                             f"to have the old rows retracted for you" + ingested.forgotten_note(taken, b.path))
        if upper is not None:
            late = beyond_mask(b.times, upper)
            if late.any():
                i = int(np.argmax(late))
                t = tuple(int(c[i]) for c in b.times)
                raise StoreError(f"{b.path}: row {i + 1}: time {format_time(t)} is beyond the new upper "
                                 f"{format_frontier(upper)}")


def _key_of(name: str, key: list[str] | None, existing: Trace | None, schema: pa.Schema, fresh: list) -> list[str]:
    """The trace's key: given (or the first column) for a new trace, checked for an old one."""
    key = list(key) if key else None
    if existing is None:
        key = key or [schema.names[0]]
        for k in key:
            if k not in schema.names:
                raise StoreError(f"key column {k!r} is not a column of {fresh[0].path} "
                                 f"(columns: {', '.join(schema.names)})")
        return key
    if key and key != existing.key:
        raise StoreError(f"trace {name!r} is keyed by {','.join(existing.key)}, not {','.join(key)}")
    return existing.key


def _upper_option(upper: str | Frontier | None, d: int, cur_upper: Frontier) -> Frontier | None:
    """The frontier given with --upper, checked against the trace's upper (None if none)."""
    from storage.lattice import parse_frontier
    if isinstance(upper, str):
        upper = parse_frontier(upper, d)
    if upper is None:
        return None
    if upper.d != d:
        raise StoreError(f"--upper {format_frontier(upper)} has {upper.d} coordinate(s); the trace's times have {d}")
    if not upper.dominates(cur_upper):
        raise StoreError(f"--upper {format_frontier(upper)} is behind the trace's upper "
                         f"{format_frontier(cur_upper)}; frontiers only move forward")
    return upper
