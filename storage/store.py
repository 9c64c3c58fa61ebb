"""The store: a folder (or an object-store prefix) of traces whose metadata lives in one
versioned log. Every file access goes through :attr:`Store.blobs` (storage/blobs/base.py).

Layout::

    STORE/log/v000000000001.json    committed metadata versions (see storage/log/commit.py)
    STORE/log/_last_checkpoint.json  where the newest full-state version is (a hint)
    STORE/traces/<trace>/<id>.parquet  immutable layer files (see storage/layer.py)

Every method that changes the store writes its new files first, then commits one pure
change of the metadata. Readers take the newest version and read the files it names.
Ingest lives in storage/writes/ingest.py, garbage collection and log retention in storage/writes/gc.py.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterable

import pyarrow as pa

from storage import faults, integrity
from storage.blobs.base import open_store
from storage.lattice import Frontier, beyond_mask, format_frontier, time_columns
from storage.layer import Layer, consolidate, empty_updates, read_layer_files, write_layer_file
from storage.files.limits import DiffOverflow
from storage.log.commit import Conflict, Log
from storage.state.trace import Hold, StoreError, Trace

DEFAULT_GRACE_SECONDS = 3600.0


class LayerVanished(Conflict):
    """A layer file a reader's version named was collected after a newer version replaced
    it: nothing is wrong, read again from the newest version."""


@dataclass
class State:
    version: int
    traces: dict[str, Trace]
    pipelines: dict[str, dict]

    @classmethod
    def from_json(cls, version: int, v: dict | None) -> "State":
        if not v:
            return cls(version, {}, {})
        return cls(version, {n: Trace.from_json(n, t) for n, t in v["traces"].items()},
                   dict(v.get("pipelines", {})))

    def to_json(self) -> dict:
        return {"version": self.version, "traces": {n: t.to_json() for n, t in self.traces.items()},
                "pipelines": self.pipelines}


@dataclass
class IngestResult:
    trace: str
    rows: int
    files: list[str]
    skipped: list[str]
    upper: Frontier
    created: bool


class Store:
    def __init__(self, path: str, on_warning: Callable[[str], None] | None = None,
                 log_retention: float | None = None):
        self.blobs, self.path = open_store(path)
        self.blobs.check()  # a missing bucket or refused credentials: one line, here
        self.log = Log(self.path, log_retention)
        self.warnings: list[str] = []  # what went wrong but did not stop the command
        self._on_warning = on_warning

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
            if self._on_warning is not None:
                self._on_warning(message)

    # ------------------------------------------------------------ reading

    def state(self) -> State:
        v, s = self.log.latest()
        note = self.log.damage_note()
        if note:
            self.warn(note)
        return State.from_json(v, s)

    def trace(self, name: str, state: State | None = None) -> Trace:
        state = state or self.state()
        if name not in state.traces:
            known = ", ".join(sorted(n for n in state.traces if "." not in n)) or "none"
            raise StoreError(f"unknown trace {name!r} in store {self.path} (traces: {known})")
        return state.traces[name]

    def trace_dir(self, name: str) -> str:
        return self.blobs.join(self.path, "traces", name)

    def layer_paths(self, trace: Trace, layers: Iterable[Layer] | None = None) -> list[str]:
        layers = trace.all_layers() if layers is None else layers
        d = self.trace_dir(trace.name)
        return [self.blobs.join(d, f.name) for l in layers for f in l.files]

    def read_paths(self, trace: Trace, layers: Iterable[Layer] | None = None, *, local: bool = False) -> list[str]:
        """:meth:`layer_paths` for a reader: each file checked against the log (size,
        footer and hash, see storage/integrity.py). A file that a compaction removed meanwhile is
        :class:`LayerVanished` (read again from the newest version); one that the newest
        version still names is missing: a :class:`CorruptionError`.

        ``local``: for a reader in this process (DuckDB, pyarrow), the paths of the
        checked local copies where the storage reads through them (an object store);
        a Spark task, maybe on another host, needs the store's own paths (the default)."""
        layers = trace.all_layers() if layers is None else list(layers)
        tdir = self.trace_dir(trace.name)
        paths = []
        for l in layers:
            for f in l.files:
                p = self.blobs.join(tdir, f.name)
                try:
                    readable = integrity.check_read(trace.name, p, f)
                except integrity.CorruptionError:
                    if not self.blobs.exists(p) and not self._names_file(trace.name, f.name):
                        raise LayerVanished(f"layer file {p} of trace {trace.name!r} was removed by a "
                                            f"compaction while it was being read; retry") from None
                    raise
                paths.append(readable if local else p)
        return paths

    def _names_file(self, trace: str, file_name: str) -> bool:
        t = self.state().traces.get(trace)
        return t is not None and any(f.name == file_name for l in t.all_layers() for f in l.files)

    def check_layers(self, trace: Trace, *, full: bool = True) -> None:
        """Raise :class:`CorruptionError` for the first layer file of ``trace`` that is not
        what the log recorded (``full``: whole-file hash and page checksums too)."""
        tdir = self.trace_dir(trace.name)
        check = integrity.check_full if full else integrity.check_cheap
        for l in trace.all_layers():
            for f in l.files:
                check(trace.name, self.blobs.join(tdir, f.name), f)

    def read_updates(self, trace: Trace, layers: Iterable[Layer] | None = None) -> pa.Table:
        """All updates of the given layers (default: all, pending included) as one table."""
        paths = self.read_paths(trace, layers, local=True)
        schema = empty_updates(trace.schema, trace.d).schema
        if not paths:
            return empty_updates(trace.schema, trace.d)
        return read_layer_files(paths, schema=schema)

    # ------------------------------------------------------------ the one commit path

    def commit(self, change: Callable[[State], State]) -> State:
        """Apply a pure change to the newest state and commit it (see storage/log/commit.py)."""
        def apply(raw: dict | None) -> dict:
            v = raw["version"] if raw else 0
            return change(State.from_json(v, raw)).to_json()
        version, raw = self.log.commit(apply)
        return State.from_json(version, raw)

    # ------------------------------------------------------------ writing layers

    def write_layer(self, trace: Trace, table: pa.Table, *, lower: Frontier, upper: Frontier,
                    seq_lo: int, seq_hi: int, consolidated: bool = False) -> Layer:
        since = trace.effective_since()
        if not consolidated:
            table = consolidate(table, trace.data_columns, trace.key, trace.d, since)
        f = write_layer_file(table, self.trace_dir(trace.name), key=trace.key, lower=lower,
                             upper=upper, since=since)
        return Layer(uuid.uuid4().hex[:16], [f], lower, upper, since, seq_lo, seq_hi, f.rows, f.bytes)

    def discard(self, trace_name: str, layers: Iterable[Layer]) -> None:
        """Remove files of layers that never got committed."""
        for l in layers:
            for f in l.files:
                self.blobs.delete(self.blobs.join(self.trace_dir(trace_name), f.name))

    # ------------------------------------------------------------ ingest

    def ingest(self, name: str, paths: list[str], **options) -> IngestResult:
        """Validate every file, then write one layer and commit it; or change nothing
        (storage/writes/ingest.py has the options)."""
        from storage.writes.ingest import ingest
        return ingest(self, name, paths, **options)

    def _seal(self, trace: Trace, table: pa.Table | None, new_upper: Frontier) -> dict:
        """Write the layer that seals ``[trace.upper, new_upper)``: new updates plus any
        pending ones not beyond the new upper. Returns what :func:`_apply_seal` commits."""
        out = {"layers": [], "pending": None, "seal": new_upper != trace.upper}
        try:
            return self._seal_files(trace, table, new_upper, out)
        except BaseException:
            self.discard(trace.name, _written_layers(out))  # e.g. a full disk: no stray files
            raise

    def _seal_files(self, trace: Trace, table: pa.Table | None, new_upper: Frontier, out: dict) -> dict:
        parts = [] if table is None else [table]
        keep: list[Layer] = []
        if trace.pending and out["seal"]:
            pend = self.read_updates(trace, trace.pending)
            late = beyond_mask([pend.column(c).to_numpy() for c in time_columns(trace.d)], new_upper)
            parts.append(pend.filter(pa.array(~late)))
            rest = pend.filter(pa.array(late))
            out["pending"] = ([l.id for l in trace.pending], keep)
            if rest.num_rows:
                keep.append(self.write_layer(trace, rest, lower=new_upper, upper=new_upper, seq_lo=-1, seq_hi=-1))
        if parts or out["seal"]:
            tab = pa.concat_tables(parts) if parts else None
            if tab is not None and tab.num_rows:
                out["layers"] = [self.write_layer(trace, tab, lower=trace.upper, upper=new_upper,
                                                  seq_lo=trace.next_seq, seq_hi=trace.next_seq + 1)]
        return out

    # ------------------------------------------------------------ advance

    def advance(self, name: str, *, upper: str | Frontier | None = None,
                since: str | Frontier | None = None) -> Trace:
        """Seal times (move ``upper``) and/or allow compaction (move ``since``), then compact."""
        from storage.lattice import parse_frontier
        t = self.trace(name)
        if t.owner and (upper is not None or "." in name):
            # a pipeline seals its outputs with its runs and compacts its own state; giving
            # up an output's history (--since) is the reader's choice, as for any trace
            what = "its upper moves with its runs" if "." not in name else "its state is compacted by its runs"
            raise StoreError(f"trace {name!r} is written by pipeline {t.owner!r}; {what}")
        if upper is None and since is None:
            raise StoreError("give --upper and/or --since")
        if isinstance(upper, str):
            upper = parse_frontier(upper, t.d)
        if isinstance(since, str):
            since = parse_frontier(since, t.d)
        for what, f, cur in (("--upper", upper, t.upper), ("--since", since, t.since)):
            if f is None:
                continue
            if f.d != t.d:
                raise StoreError(f"{what} {format_frontier(f)} has {f.d} coordinate(s); trace {name!r} has {t.d}")
            if not f.dominates(cur):
                raise StoreError(f"{what} {format_frontier(f)} is behind the current {format_frontier(cur)} of trace {name!r}; frontiers only move forward")
        written = self._seal(t, None, upper) if upper is not None else None

        def change(s: State) -> State:
            cur = s.traces.get(name)
            if cur is None:
                raise Conflict(f"trace {name!r} was removed")
            if written is not None:
                if _seal_point(cur) != _seal_point(t):
                    raise Conflict(f"trace {name!r} changed while advancing (another command wrote to it); "
                                   f"nothing was changed, retry")
                _check_new_layers(self, cur, _written_layers(written))
                cur = _apply_seal(cur, written, upper)
            if since is not None:
                cur = cur.with_(since=since if since.dominates(cur.since) else cur.since)
            s.traces[name] = cur
            return s

        try:
            faults.point("advance.before_commit")
            self.commit(change)
        except BaseException:
            if written:
                self._discard_unless_committed(name, _written_layers(written))
            raise
        faults.point("advance.after_commit")
        self._maintain_quietly(name)
        return self.trace(name)

    # ------------------------------------------------------------ holds

    @staticmethod
    def with_hold(trace: Trace, holder: str, since: Frontier, seq: int) -> Trace:
        holds = dict(trace.holds)
        holds[holder] = Hold(since, seq)
        return trace.with_(holds=holds)

    @staticmethod
    def without_hold(trace: Trace, holder: str) -> Trace:
        holds = dict(trace.holds)
        holds.pop(holder, None)
        return trace.with_(holds=holds)

    # ------------------------------------------------------------ compaction

    def compact(self, name: str | None = None, *, full: bool = False,
                grace_seconds: float = DEFAULT_GRACE_SECONDS,
                progress: Callable[[str], None] | None = None) -> dict:
        """Merge layers (geometrically, or all with ``full``), advance times, collect garbage.

        A merge that loses a race with another writer is planned again a few times; if the
        trace keeps changing the merge backs off (counted in ``conflicts``), nothing lost.
        """
        state = self.state()
        names = [name] if name else sorted(state.traces)
        if name:
            self.trace(name, state)
        merged = conflicts = 0
        for n in names:
            if progress:
                progress(n)
            for attempt in range(3):
                try:
                    merged += self.merge_layers(n, full=full)
                    break
                except Conflict:
                    if attempt == 2:
                        conflicts += 1
        removed = self.collect_garbage(grace_seconds)
        return {"traces": len(names), "merges": merged, "removed_files": removed, "conflicts": conflicts}

    def merge_layers(self, name: str, *, full: bool = False) -> int:
        """One commit that replaces runs of adjacent layers by their merge.

        Geometric rule: merge neighbours whose sizes are within a factor of two, so every
        update is rewritten O(log n) times and a trace keeps O(log n) layers. Layers are
        never merged across a reader's hold, so readers can still tell old from new.
        Raises :class:`Conflict` (having removed its new files) when another writer
        replaced the same layers, or added a hold the merge would violate.
        """
        t = self.trace(name)
        groups = plan_merges(t, full)
        if not groups:
            return 0
        new_layers, replaced = [], []
        try:
            for g in groups:
                table = self.read_updates(t, g)
                new_layers.append(self.write_layer(t, table, lower=g[0].lower, upper=g[-1].upper,
                                                   seq_lo=g[0].seq_lo, seq_hi=g[-1].seq_hi))
                replaced.append([l.id for l in g])
        except DiffOverflow as e:
            self.discard(name, new_layers)
            raise DiffOverflow(f"merging layers of trace {name!r}: {e}; the layers stay as they are") from None
        except BaseException:
            self.discard(name, new_layers)
            raise
        faults.point("compact.before_commit")

        def change(s: State) -> State:
            cur = s.traces.get(name)
            if cur is None:
                raise Conflict(f"trace {name!r} was removed while compacting")
            layers = list(cur.layers)
            barriers = _hold_seqs(cur)
            for ids, new in zip(replaced, new_layers):
                pos = [i for i, l in enumerate(layers) if l.id in ids]
                if len(pos) != len(ids) or pos != list(range(pos[0], pos[0] + len(ids))):
                    raise Conflict(f"layers of trace {name!r} changed while compacting; the merge backs off")
                if _crosses_hold(layers[pos[0]:pos[-1] + 1], barriers):
                    raise Conflict(f"a reader put a hold on trace {name!r} while compacting; the merge backs off")
                layers[pos[0]:pos[-1] + 1] = [new]
            _check_new_layers(self, cur, new_layers)
            s.traces[name] = cur.with_(layers=layers)
            return s

        try:
            self.commit(change)
        except BaseException:
            self._discard_unless_committed(name, new_layers)
            raise
        faults.point("compact.after_commit")
        return len(new_layers)

    def _maintain_quietly(self, name: str) -> None:
        """Geometric merging after a write that is already committed.

        Losing a race only postpones it; any other failure (a full disk) is a warning in
        :attr:`warnings`, not an error: the write itself is committed, and the next write
        or ``ddcli compact`` merges again.
        """
        try:
            self.merge_layers(name)
        except Conflict:
            pass
        except integrity.CorruptionError as e:
            raise integrity.CorruptionError(f"the write was committed, but merging afterwards found damage: {e}") from None
        except Exception as e:  # noqa: BLE001 - the committed write stands whatever merging does
            self.warn(f"trace {name!r}: merging layers after the commit failed "
                                 f"({type(e).__name__}: {e}); the updates are committed, "
                                 f"the merge is retried by the next write or 'ddcli compact'")

    def _discard_unless_committed(self, name: str, layers: list[Layer]) -> None:
        """After a failed commit: remove the new files, unless the version naming them was
        committed after all (an error after the link, e.g. fsync of the log folder)."""
        try:
            t = self.state().traces.get(name)
        except Exception:  # noqa: BLE001 - unreadable state: keep the files, compact collects them
            return
        referenced = {l.id for l in t.all_layers()} if t is not None else set()
        self.discard(name, [l for l in layers if l.id not in referenced])

    def collect_garbage(self, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> int:
        """Remove files and log versions no reader can still need (storage/writes/gc.py)."""
        from storage.writes.gc import collect_garbage
        return collect_garbage(self, grace_seconds)


def _written_layers(written: dict) -> list[Layer]:
    """Every layer file a seal wrote: sealed layers and re-written pending ones."""
    out = list(written["layers"])
    if written.get("pending"):
        out += list(written["pending"][1])
    return out


def _seal_point(t: Trace) -> tuple:
    """What a write that seals times or adds updates depends on: upper, seal count, pending."""
    return (t.upper, t.next_seq, tuple(l.id for l in t.pending))


def _check_new_layers(store: "Store", cur: Trace, layers: list[Layer]) -> None:
    """Refuse to commit layers whose times were advanced further than the trace now allows
    (a reader put a hold meanwhile) or whose files are gone (collected as garbage)."""
    eff = cur.effective_since()
    for l in layers:
        if not (l.since.is_empty() or eff.dominates(l.since)):
            raise Conflict(f"a reader put a hold on trace {cur.name!r} at {format_frontier(eff)} meanwhile; "
                           f"nothing was changed, retry")
        for p in store.layer_paths(cur, [l]):
            if not store.blobs.exists(p):
                raise Conflict(f"layer file {p} was removed before it was committed (garbage collection "
                               f"with a short grace period?); nothing was changed, retry")


def _hold_seqs(t: Trace) -> set[int]:
    return {h.seq for h in t.holds.values()}


def _held_apart(older: Layer, newer: Layer, barriers: set[int]) -> bool:
    """True when a hold's seq lies between two adjacent layers. Seals that wrote no layer
    leave gaps in the seq numbers, so the hold may sit anywhere in ``[older.seq_hi, newer.seq_lo]``."""
    return any(older.seq_hi <= n <= newer.seq_lo for n in barriers)


def _crosses_hold(group: list[Layer], barriers: set[int]) -> bool:
    """True when merging ``group`` would join layers on both sides of a hold's seq."""
    return any(_held_apart(a, b, barriers) for a, b in zip(group, group[1:]))


def _apply_seal(t: Trace, written: dict, new_upper: Frontier) -> Trace:
    layers = list(t.layers) + list(written["layers"])
    pending = list(t.pending)
    if written.get("pending"):
        gone, keep = written["pending"]
        pending = [l for l in pending if l.id not in gone] + list(keep)
    next_seq = t.next_seq + (1 if written["seal"] else 0)
    return t.with_(layers=layers, pending=pending, upper=new_upper, next_seq=next_seq)


def plan_merges(t: Trace, full: bool) -> list[list[Layer]]:
    """Groups of adjacent layers to merge (each group becomes one layer)."""
    barriers = _hold_seqs(t)
    segments: list[list[Layer]] = [[]]
    for l in t.layers:
        if segments[-1] and _held_apart(segments[-1][-1], l, barriers):
            segments.append([])
        segments[-1].append(l)
    groups: list[list[Layer]] = []
    for seg in segments:
        if not seg:
            continue
        if full:
            if len(seg) > 1 or seg[0].since != t.effective_since():
                groups.append(seg)
            continue
        # a stack of groups whose sizes decrease by more than 2x from left to right
        stack: list[list[Layer]] = []
        for l in seg:
            stack.append([l])
            while len(stack) >= 2 and _rows(stack[-2]) <= 2 * _rows(stack[-1]):
                top = stack.pop()
                stack[-1] = stack[-1] + top
        groups.extend(g for g in stack if len(g) > 1)
    return groups


def _rows(group: list[Layer]) -> int:
    return sum(l.rows for l in group)
