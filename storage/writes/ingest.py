"""Ingest: validate update files, write one layer, commit it (or change nothing).

Every file is read and validated before anything is written; the new updates (and any
pending ones the new upper seals) become one layer, committed by the store's one commit
path with :func:`storage.state.transitions.ingest`. A file already ingested is skipped.

The sources name local files, globs and S3 objects (storage/files/locations.py). The
trace remembers what it took (storage/state/ingested.py): a local file by its content
hash, an S3 object by its URL and version, so an object already taken is skipped without
being read, and a glob run again reads only the objects it has not seen. Every file read
in one ingest shares one memory budget (storage/files/limits.py, ``DDCLI_INGEST_MEMORY``).
The new updates, with those the trace holds, must keep every sum of a row's diffs within
int64 (storage/writes/diff_sums.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from storage.errors import DiffOverflow, StoreError
from storage.files.column_types import describe
from storage.files.limits import OverBudget, ReadBudget
from storage.files.locations import expand_sources
from storage.lattice import Frontier, beyond_mask, format_frontier, format_time, parse_frontier, time_columns
from storage.layer import updates_table
from storage.state import ingested, transitions
from storage.state.seal import check_open
from storage.state.trace import Trace, check_name, check_new_name
from storage.writes import spill as out_of_core
from storage.writes.diff_sums import check_diff_sums, within_bound


@dataclass
class IngestResult:
    trace: str
    rows: int
    files: list[str]
    skipped: list[str]
    upper: Frontier
    created: bool
    committed: Trace | None = None  # the trace as this ingest committed it (and the merges after)


def ingest(store, name: str, paths: list, *, key: list[str] | None = None,
           time: tuple[int, ...] | None = None, upper: str | Frontier | None = None,
           fmt: str | None = None, progress: Callable[[str], None] | None = None,
           null: str | None = None, columns: list[str] | None = None,
           types: dict[str, pa.DataType] | None = None,
           prepare: Callable[[Trace | None, pa.Table], pa.Table] | None = None) -> IngestResult:
    """Validate every file, then write one layer and commit it; or change nothing.

    ``paths`` are sources: local paths, globs, ``s3://`` URLs and globs, or
    :class:`~storage.files.locations.UpdateObject` items. ``null`` is the CSV null marker (storage/files/nulls.py); ``columns`` the data columns the
    files hold when not all of the trace's (a delete by key). ``types`` (column -> type,
    storage/files/column_types.py) are parsed as asked instead of inferred. ``prepare(existing, updates)``
    sees the validated new updates before anything is written and returns the updates
    to write (an upsert adds its retractions, storage/writes/upsert.py) or raises a user error.
    """
    check_name(name)
    state = store.state(to_write=True)
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

    objects = expand_sources(paths, store.path)
    try:
        fresh, files, skipped, schema, d = _read_new(name, existing, objects, tag, fmt=fmt, time=time, null=null,
                                                     columns=columns, types=types, progress=progress)
    except OverBudget:
        if columns is not None or not _out_of_core_fits(existing, prepare):
            raise
        fresh = None  # out of the except block: its traceback holds what was read
    if fresh is None:
        return _ingest_out_of_core(store, name, existing, objects, tag, key=key, time=time, upper=upper, fmt=fmt,
                                   null=null, types=types, progress=progress,
                                   check=getattr(prepare, "on_disk", None))
    key = _key(name, existing, key, schema, [b.path for b in fresh])
    cur_upper = existing.upper if existing else Frontier.minimum(d)
    if isinstance(upper, str):
        upper = parse_frontier(upper, d)
    new_upper = _given_upper(upper, cur_upper, d)
    record = existing.ingested if existing else {}
    for b in fresh:
        _check_times(name, b, cur_upper, upper, new_upper, record)
    if upper is None:
        new_upper = _upper_after([int(b.times[0].max()) for b in fresh if len(b.diff)], cur_upper, d)
    if not fresh:
        return IngestResult(name, 0, [], skipped, cur_upper, False)

    table = pa.concat_tables([updates_table(b.data, b.times, b.diff, d) for b in fresh])
    if prepare is not None:
        table = prepare(existing, table)
    check_diff_sums(store, name, existing, table, [c for c in table.column_names if c not in time_columns(d) + ["diff"]])
    proto = existing or Trace(name, schema, key, d, Frontier.minimum(d), cur_upper)
    sealed = upper is not None or d == 1
    seal_to = new_upper if sealed else cur_upper

    def write(written) -> tuple:
        try:
            seal = store.write_seal(proto, table if sealed else None, seal_to, written)
        except DiffOverflow as e:
            raise DiffOverflow(f"trace {name!r}: {e}; nothing was ingested") from None
        pend = [] if sealed else [written.add(name, store.write_layer(proto, table, lower=cur_upper, upper=cur_upper,
                                                                        seq_lo=-1, seq_hi=-1))]
        return seal, pend

    store.write_and_commit("ingest", write, lambda s, w: transitions.ingest(s, proto, existing, w[0], seal_to,
                                                                            w[1], files), merge=[name])
    return IngestResult(name, table.num_rows, [b.path for b in fresh], skipped, seal_to, existing is None,
                        store.committed.traces.get(name))


def _read_new(name: str, existing: Trace | None, objects: list, tag: str, *, fmt, time, null, columns, types,
              progress) -> tuple[list, dict[str, str], list[str], pa.Schema, int]:
    """The files the trace has not taken, each once, read and validated against the
    trace's schema (the first file's, for a new trace): the batches, their signatures
    (path -> signature, storage/state/ingested.py), the paths skipped, the schema and the
    time dimension. An S3 object taken before is known by its URL and version and not
    read; a local file, or an S3 object at a version not seen, by its content once read."""
    from storage.files.read import read_update_file  # here: every command loads the store, few read files

    schema = existing.schema if existing else None
    d = existing.d if existing else None
    if columns is not None and existing is not None:
        missing = [c for c in columns if c not in existing.schema.names]
        if missing:
            raise StoreError(f"{missing[0]!r} is not a column of trace {name!r} "
                             f"(columns: {', '.join(existing.schema.names)})")
        schema = pa.schema([existing.schema.field(c) for c in columns])
    if existing is not None:
        for c, t in (types or {}).items():
            if c in existing.schema.names and existing.schema.field(c).type != t:
                raise StoreError(f"--type {c}={describe(t)}: trace {name!r} holds column {c!r} as "
                                 f"{describe(existing.schema.field(c).type)}")
    budget = ReadBudget()
    seen = ingested.keys(existing.ingested if existing else {})
    fresh, files, skipped = [], {}, []
    for o, version in _not_taken(objects, seen, tag, skipped, progress):
        b = read_update_file(o, fmt=fmt, schema=schema, d=d, time=time, null=null, budget=budget, types=types)
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
        files[b.path] = sig
    return fresh, files, skipped, schema, d


def _not_taken(objects: list, seen: set, tag: str, skipped: list, progress):
    """Each object (with its version) whose version was not ingested before, announced to
    ``progress``; the others' names go to ``skipped``."""
    for o in objects:
        version = o.version()
        if version is not None and ingested.version_key(version, tag) in seen:
            skipped.append(o.url)
            continue
        if progress:
            progress(o.url)
        yield o, version


def _key(name: str, existing: Trace | None, key: list[str] | None, schema: pa.Schema, paths: list[str]) -> list[str]:
    """The trace's key: as given (first ingest; default the first column), or the existing one."""
    key = list(key) if key else None
    if existing is None:
        key = key or [schema.names[0]]
        for k in key:
            if k not in schema.names:
                raise StoreError(f"key column {k!r} is not a column of {paths[0]} (columns: {', '.join(schema.names)})")
        return key
    if key and key != existing.key:
        raise StoreError(f"trace {name!r} is keyed by {','.join(existing.key)}, not {','.join(key)}")
    return existing.key


def _given_upper(upper: Frontier | None, cur_upper: Frontier, d: int) -> Frontier:
    """The ``--upper`` an ingest seals to, checked (the current upper when none is given)."""
    if upper is None:
        return cur_upper
    if upper.d != d:
        raise StoreError(f"--upper {format_frontier(upper)} has {upper.d} coordinate(s); the trace's times have {d}")
    if not upper.dominates(cur_upper):
        raise StoreError(f"--upper {format_frontier(upper)} is behind the trace's upper {format_frontier(cur_upper)}; frontiers only move forward")
    return upper


def _upper_after(tops: list[int], cur_upper: Frontier, d: int) -> Frontier:
    """Without ``--upper``: for d = 1 just past the largest time ingested (``tops``: of
    each file), else unchanged."""
    if d == 1 and tops:
        top = max(tops)
        if top >= 2**63 - 1:
            raise StoreError(f"time {top} is the largest int64; the upper cannot move past it")
        return Frontier([(max(top + 1, cur_upper.elements[0][0]),)], 1) if not cur_upper.is_empty() else cur_upper
    return cur_upper


def _check_times(name: str, b, cur_upper: Frontier, upper: Frontier | None, new_upper: Frontier,
                 record: dict, first_row: int = 0) -> None:
    """Every time of a file is beyond the trace's upper (and, with ``--upper``, not beyond
    the new one); ``first_row``: the rows of the file before ``b`` (a chunk of it)."""
    mask = beyond_mask(b.times, cur_upper)
    if not mask.all():
        i = int(np.argmin(mask))
        t = tuple(int(c[i]) for c in b.times)
        raise StoreError(f"{b.path}: row {first_row + i + 1}: time {format_time(t)} is not beyond the upper "
                         f"{format_frontier(cur_upper)} of trace {name!r} (those times are sealed); "
                         f"to correct the past, ingest the correction at a time beyond the upper "
                         f"(e.g. at time {format_frontier(cur_upper).split()[0]}), with --upsert KEYCOLS "
                         f"to have the old rows retracted for you" + ingested.forgotten_note(record, b.path))
    if upper is not None:
        late = beyond_mask(b.times, new_upper)
        if late.any():
            i = int(np.argmax(late))
            t = tuple(int(c[i]) for c in b.times)
            raise StoreError(f"{b.path}: row {first_row + i + 1}: time {format_time(t)} is beyond the new upper "
                             f"{format_frontier(new_upper)}")



def _out_of_core_fits(existing: Trace | None, prepare) -> bool:
    """Whether updates too big for memory can be ingested out of core: into a new trace,
    or one with no pending updates whose times need no advancing (nothing else to merge),
    with no ``prepare`` step or one that can check updates on disk (``on_disk``, it changes
    none: storage/writes/retractions.py); an upsert's needs its updates in memory."""
    if prepare is not None and not hasattr(prepare, "on_disk"):
        return False
    return existing is None or (not existing.pending and existing.effective_since() == Frontier.minimum(existing.d))


def _ingest_out_of_core(store, name: str, existing: Trace | None, objects: list, tag: str, *, key, time, upper,
                        fmt, null, types, progress, check) -> IngestResult:
    """:func:`ingest` for updates bigger than ``DDCLI_INGEST_MEMORY``: every file read
    again in chunks, validated and kept on disk (storage/writes/spill.py), then one layer
    consolidated and sorted out of core, committed as :func:`ingest` commits its own."""
    from storage.files.read import read_update_chunks
    st = {"schema": existing.schema if existing else None, "d": existing.d if existing else None}
    record = existing.ingested if existing else {}

    def frontiers() -> tuple:
        d = st["d"]
        cur = existing.upper if existing else Frontier.minimum(d)
        given = parse_frontier(upper, d) if isinstance(upper, str) else upper
        return cur, given, _given_upper(given, cur, d)

    spill = out_of_core.Spill(ReadBudget().limit)
    try:
        seen = ingested.keys(record)
        files, skipped = {}, []
        for o, version in _not_taken(objects, seen, tag, skipped, progress):

            def take(b, first_row: int, path=o.url) -> None:
                if st["schema"] is None:
                    st["schema"], st["d"] = b.data.schema, b.d
                _check_times(name, b, *frontiers(), record, first_row)
                spill.add(path, out_of_core.chunk_table(b, st["d"], st["schema"]), st["d"])

            sha = read_update_chunks(o, take, memory=spill.memory, fmt=fmt, schema=st["schema"], d=st["d"],
                                     time=time, null=null, types=types)
            sig = sha + tag if version is None else f"{sha}{ingested.version_key(version, tag)}"
            if ingested.entry_keys(sig)[0] in seen:
                skipped.append(o.url)
                spill.drop(o.url)
                continue
            seen.update(ingested.entry_keys(sig))
            files[o.url] = sig
        schema, d = st["schema"], st["d"]
        key = _key(name, existing, key, schema, list(files))
        cur_upper, given, new_upper = frontiers()
        if not files:
            return IngestResult(name, 0, [], skipped, cur_upper, False)
        if given is None:
            new_upper = _upper_after(list(spill.top.values()), cur_upper, d)
        if not within_bound(store, existing, spill.bound()):
            raise StoreError(f"trace {name!r}: the updates of this ingest are too many, or their diffs too big, to "
                             f"check the sums of their diffs out of core; ingest them in smaller parts, or raise "
                             f"DDCLI_INGEST_MEMORY; nothing was ingested")
        if check is not None:
            check(existing, spill.dataset(), spill.retracts)
        proto = existing or Trace(name, schema, key, d, Frontier.minimum(d), cur_upper)
        sealed = given is not None or d == 1
        seal_to = new_upper if sealed else cur_upper

        def write(written) -> tuple:
            seal = store.write_seal(proto, None, seal_to, written)
            if not sealed:
                return seal, [written.add(name, out_of_core.write_layer(store, proto, spill, lower=cur_upper,
                                                                         upper=cur_upper, seq_lo=-1, seq_hi=-1))]
            seal.layers = [written.add(name, out_of_core.write_layer(store, proto, spill, lower=cur_upper, upper=seal_to,
                                                                      seq_lo=proto.next_seq, seq_hi=proto.next_seq + 1))]
            return seal, []

        store.write_and_commit("ingest", write, lambda s, w: transitions.ingest(s, proto, existing, w[0], seal_to,
                                                                                w[1], files), merge=[name])
    finally:
        spill.close()
    return IngestResult(name, spill.total_rows(), list(files), skipped, seal_to, existing is None,
                        store.committed.traces.get(name))
