"""The store: a folder (or an object-store prefix) of traces whose metadata lives in one
versioned log. Every file access goes through :attr:`Store.blobs` (storage/blobs/base.py).

Layout::

    STORE/log/v000000000001.json    committed metadata versions (see storage/log/commit.py)
    STORE/log/_last_checkpoint.json  where the newest full-state version is (a hint)
    STORE/traces/<trace>/<id>.parquet  immutable layer files (see storage/layer.py)

Every change goes through one method, :meth:`Store.write_and_commit`: it writes the
change's new layer files, commits one named pure change of the metadata
(storage/state/transitions.py) and removes the files again if the commit fails. Readers
take the newest version and read the files it names. Ingest lives in
storage/writes/ingest.py, garbage collection and log retention in storage/writes/gc.py.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Callable, ContextManager, Iterable, Iterator, TypeVar

import pyarrow as pa

from storage import faults, integrity
from storage.blobs import durability
from storage.blobs.resolve import open_store
from storage.errors import Conflict, CorruptionError, DiffOverflow, LayerVanished, StoreError
from storage.key_ranges import file_keys, files_in_range, range_bounds, range_filter
from storage.lake import follow as delta_follow
from storage.lake import outputs as current_tables
from storage.lattice import Frontier, beyond_mask, format_frontier, parse_frontier, time_columns
from storage.layer import Layer, consolidate, empty_updates, read_layer_files, write_layer_file
from storage.log.commit import Log
from storage.state import transitions
from storage.state.trace import Trace
from storage.state.transitions import Sealed, State, plan_merges
from storage.writes.gc import collect_garbage
from storage.writes.ingest import IngestResult, ingest

W = TypeVar("W")

DEFAULT_GRACE_SECONDS = 3600.0
#: Rows a merge of layers holds at once (``DDCLI_MERGE_ROWS``): some 0.5 GB at its peak
#: (read, consolidated, written); a larger merge goes one range of keys at a time.
MERGE_ROWS = 1 << 22


def merge_rows() -> int:
    return max(1, int(os.environ.get("DDCLI_MERGE_ROWS") or MERGE_ROWS))


class Store:
    def __init__(self, path: str, on_warning: Callable[[str], None] | None = None,
                 log_retention: float | None = None, delta: bool | None = None):
        self.blobs, self.path = open_store(path)
        self.blobs.check()  # a missing bucket or refused credentials: one line, here
        self.log = Log(self.path, log_retention)
        self.warnings: list[str] = []  # what went wrong but did not stop the command
        self.committed: State | None = None  # the newest state this process committed
        self._on_warning = on_warning
        # every trace is also a Delta Lake table whose log follows this one (storage/lake/)
        self.delta = delta_follow.Follower(self) if (delta_follow.enabled() if delta is None else delta) else None
        # and every pipeline output has a current-state Delta table under tables/ (storage/lake/outputs.py)
        self.tables = current_tables.Tables(self) if (current_tables.enabled() if delta is None else delta) else None
        self._writing = 0  # depth of write_and_commit: the Delta logs follow the outermost one

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
            if self._on_warning is not None:
                self._on_warning(message)

    # ------------------------------------------------------------ reading

    def state(self, *, to_write: bool = False) -> State:
        """The newest intact state. A damaged newest version is a warning for a reader (it
        reads the version before); for a command that will write (``to_write``) it is a
        :class:`CorruptionError` before any work, as the commit would refuse it anyway."""
        v, s = self.log.latest(shared=True)  # read into objects, never changed
        note = self.log.damage_note()
        if note and to_write:
            raise CorruptionError(f"nothing was written: {note}")
        if note:
            self.warn(note)
        return State.from_json(v, s)

    def trace(self, name: str, state: State | None = None, *, to_write: bool = False) -> Trace:
        state = state or self.state(to_write=to_write)
        if name not in state.traces:
            known = ", ".join(sorted(n for n in state.traces if "." not in n)) or "none"
            raise StoreError(f"unknown trace {name!r} in store {self.path} (traces: {known})")
        return state.traces[name]

    def exchange_folder(self) -> str | None:
        """Where the tasks of a resident loop exchange rows: a folder of the store, which
        every executor of a cluster sees; None when the store is not a filesystem folder."""
        return self.blobs.join(self.path, "exchange") if self.blobs.is_folder else None

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
                except CorruptionError:
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
        before: list[dict | None] = [None]

        def apply(raw: dict | None) -> dict:
            v = raw["version"] if raw else 0
            before[0] = raw
            return change(State.from_json(v, raw)).to_json()
        version, raw = self.log.commit(apply, in_place=False)  # a state is read into objects, not changed
        for follower in (self.delta, self.tables):
            if follower is not None:
                follower.committed(before[0], raw)
        self.committed = State.from_json(version, raw)
        return self.committed

    def write_and_commit(self, name: str, write: Callable[[Written], W], change: Callable[[State, W], State], *,
                         merge: Iterable[str] = (), patient: bool = False,
                         guard: Callable[[], ContextManager] | None = None) -> W:
        """The one way the store changes: write layers, commit one named change, discard on failure.

        ``write(written)`` writes the change's layer files and registers each with
        ``written``; its result goes to ``change(state, result)``, a pure change of the
        metadata (storage/state/transitions.py) applied to the newest state and committed.
        Just before, every registered file is checked to be still there. If anything fails,
        the registered files are removed (unless the newest state names them: a commit that
        landed after all). ``name`` names the fault points ``NAME.before_commit`` and
        ``NAME.after_commit``; the traces in ``merge`` have their layers merged geometrically
        after the commit (``patient``: small layers wait, see ``plan_merges``); the commit
        and those merges run inside ``guard()`` when given.
        Then the Delta logs of the traces it changed follow (storage/lake/follow.py).
        Returns what ``write`` returned.
        """
        written = Written()
        try:
            with durability.together():  # the new files synced at once, before the commit
                result = write(written)
                durability.make_durable()
        except BaseException:
            self._discard(written)
            raise
        self._writing += 1
        try:
            with guard() if guard is not None else contextlib.nullcontext():
                faults.point(f"{name}.before_commit")
                self.commit(lambda s: change(self._still_there(s, written), result))
                faults.point(f"{name}.after_commit")
                if merge:
                    self.merge_after_commit(*merge, patient=patient)
        except BaseException:
            self._discard_unless_committed(written)
            raise
        finally:
            self._writing -= 1
        if self._writing == 0:
            self.follow_delta()
        return result

    @contextlib.contextmanager
    def following_once(self) -> Iterator[None]:
        """The Delta logs and current-state tables follow the commits made inside once,
        after the last (the pipelines of one ``ddcli run``): the tables an output's several
        commits moved get one version, and each table's log is read once. An error inside
        still has them follow what was committed; an interrupt (Ctrl-C) does not wait for
        them: the next command that changes the store catches up."""
        self._writing += 1
        interrupted = True
        try:
            yield
            interrupted = False
        except Exception:
            interrupted = False
            raise
        finally:
            self._writing -= 1
            if self._writing == 0 and not interrupted:
                self.follow_delta()

    def follow_delta(self, *, catch_up: bool = False) -> None:
        """Write the Delta versions of what this process committed: the traces' logs, then
        the outputs' current-state tables (``catch_up``: of whatever they lag behind).
        Never raises: the commits stand."""
        for follower in (self.delta, self.tables):
            if follower is None:
                continue
            try:
                follower.catch_up() if catch_up else follower.follow()
            except Exception as e:  # noqa: BLE001 - e.g. the object store stopped answering
                self.warn(f"writing the Delta Lake tables failed ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:200]}); ddcli's commit stands, the next command "
                          f"that changes the store catches them up")

    def _still_there(self, state: State, written: Written) -> State:
        """Refuse to commit layers whose files are gone (collected as garbage meanwhile)."""
        for trace, layers in written.by_trace.items():
            for f in (f for l in layers for f in l.files):
                p = self.blobs.join(self.trace_dir(trace), f.name)
                if not self.blobs.exists(p):
                    raise Conflict(f"layer file {p} was removed before it was committed (garbage collection "
                                   f"with a short grace period?); nothing was changed, retry")
        written.committing = True
        return state

    def _discard(self, written: Written) -> None:
        for trace, layers in written.by_trace.items():
            self.discard(trace, layers)

    def _discard_unless_committed(self, written: Written) -> None:
        """After a failed commit: remove the new files, unless the version naming them was
        committed after all (an error after the link, e.g. fsync of the log folder)."""
        if not written.committing:
            self._discard(written)
            return
        try:
            state = self.state()
        except Exception:  # noqa: BLE001 - unreadable state: keep the files, compact collects them
            return
        for trace, layers in written.by_trace.items():
            t = state.traces.get(trace)
            referenced = {l.id for l in t.all_layers()} if t is not None else set()
            self.discard(trace, [l for l in layers if l.id not in referenced])

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

    def write_seal(self, trace: Trace, table: pa.Table | None, new_upper: Frontier, written: Written) -> Sealed:
        """Write the layers that seal ``[trace.upper, new_upper)``: new updates plus any
        pending ones not beyond the new upper (the rest stays pending, rewritten). What
        :func:`storage.state.transitions.seal` commits; every file is registered with ``written``."""
        out = Sealed(moves_upper=new_upper != trace.upper)
        parts = [] if table is None else [table]
        if trace.pending and out.moves_upper:
            pend = self.read_updates(trace, trace.pending)
            late = beyond_mask([pend.column(c).to_numpy() for c in time_columns(trace.d)], new_upper)
            parts.append(pend.filter(pa.array(~late)))
            rest = pend.filter(pa.array(late))
            out.replaced_pending = [l.id for l in trace.pending]
            if rest.num_rows:
                out.kept_pending.append(written.add(trace.name, self.write_layer(
                    trace, rest, lower=new_upper, upper=new_upper, seq_lo=-1, seq_hi=-1)))
        if parts or out.moves_upper:
            tab = pa.concat_tables(parts) if parts else None
            if tab is not None and tab.num_rows:
                out.layers = [written.add(trace.name, self.write_layer(
                    trace, tab, lower=trace.upper, upper=new_upper, seq_lo=trace.next_seq, seq_hi=trace.next_seq + 1))]
        return out

    # ------------------------------------------------------------ the changes

    def ingest(self, name: str, paths: list, **options) -> IngestResult:
        """Validate every file (``paths``: local paths, globs, ``s3://`` objects and globs),
        then write one layer and commit it; or change nothing (storage/writes/ingest.py has
        the options)."""
        return ingest(self, name, paths, **options)

    def advance(self, name: str, *, upper: str | Frontier | None = None,
                since: str | Frontier | None = None) -> Trace:
        """Seal times (move ``upper``) and/or allow compaction (move ``since``), then compact."""
        t = self.trace(name, to_write=True)
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
        self.write_and_commit(
            "advance", lambda written: self.write_seal(t, None, upper, written) if upper is not None else None,
            lambda s, sealed: transitions.advance(s, t, sealed, upper, since), merge=[name])
        return self.trace(name)

    def compact(self, name: str | None = None, *, full: bool = False,
                grace_seconds: float = DEFAULT_GRACE_SECONDS,
                progress: Callable[[str], None] | None = None) -> dict:
        """Merge layers (geometrically, or all with ``full``), advance times, collect garbage.

        A merge that loses a race with another writer is planned again a few times; if the
        trace keeps changing the merge backs off (counted in ``conflicts``), nothing lost.
        """
        state = self.state(to_write=True)
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
        self.follow_delta(catch_up=True)  # Delta logs a killed command left behind
        if self.tables is not None:
            from storage import clock
            from storage.lake.retention import retention_seconds
            self.tables.vacuum(clock.now() - retention_seconds(grace_seconds))
        removed = self.collect_garbage(grace_seconds)
        return {"traces": len(names), "merges": merged, "removed_files": removed, "conflicts": conflicts}

    def merge_layers(self, *names: str, full: bool = False, patient: bool = False) -> int:
        """One commit that replaces runs of adjacent layers of the traces ``names`` by their
        merges (:func:`storage.state.transitions.plan_merges` chooses them); returns the
        layers written. Raises :class:`Conflict` (having removed its new files) when
        another writer replaced the same layers, or added a hold a merge would violate.
        """
        state = self.state()
        traces = {n: self.trace(n, state) for n in names}
        groups = {n: g for n, t in traces.items() if (g := plan_merges(t, full, patient))}
        if not groups:
            return 0

        def write(written: Written) -> dict[str, list[Layer]]:
            out = {}
            for name, gs in groups.items():
                t = traces[name]
                try:
                    out[name] = [written.add(name, self._merged(t, g)) for g in gs]
                except DiffOverflow as e:
                    raise DiffOverflow(f"merging layers of trace {name!r}: {e}; the layers stay as they are") from None
            return out

        def change(s: State, layers: dict[str, list[Layer]]) -> State:
            for name, gs in groups.items():
                s = transitions.merge(s, name, [[l.id for l in g] for g in gs], layers[name])
            return s

        new_layers = self.write_and_commit("compact", write, change)
        return sum(len(ls) for ls in new_layers.values())

    def _merged(self, t: Trace, g: list[Layer]) -> Layer:
        """The merge of the adjacent layers ``g``: one file, or, beyond :func:`merge_rows`,
        one file per range of the first key column, each read, consolidated and written
        alone (storage/key_ranges.py), so a merge holds about one range's rows whatever the
        trace's size. Layers whose keys do not split (one hot key, a key without ranges)
        are merged whole."""
        span = dict(lower=g[0].lower, upper=g[-1].upper, seq_lo=g[0].seq_lo, seq_hi=g[-1].seq_hi)
        rows, limit = sum(l.rows for l in g), merge_rows()
        bounds, keys, paths = None, None, []
        if rows > limit and t.key:
            paths = self.read_paths(t, g, local=True)
            keys = file_keys(paths, t.schema.field(t.key[0]).type, t.key[0])
            bounds = range_bounds(keys, -(-rows // limit)) if keys is not None else None
        if not bounds:
            return self.write_layer(t, self.read_updates(t, g), **span)
        since, files, schema = t.effective_since(), [], empty_updates(t.schema, t.d).schema
        try:
            for i in range(len(bounds) + 1):
                part = read_layer_files([paths[j] for j in files_in_range(keys, bounds, i)], schema=schema,
                                        where=range_filter(t.key[0], bounds, i))
                part = consolidate(part if part is not None else schema.empty_table(), t.data_columns, t.key,
                                   t.d, since)
                if part.num_rows or (i == len(bounds) and not files):  # a layer has at least one file
                    files.append(write_layer_file(part, self.trace_dir(t.name), key=t.key, lower=span["lower"],
                                                  upper=span["upper"], since=since))
        except BaseException:  # the layer was never written: none of its files stays
            for f in files:
                self.blobs.delete(self.blobs.join(self.trace_dir(t.name), f.name))
            raise
        return Layer(uuid.uuid4().hex[:16], files, span["lower"], span["upper"], since, span["seq_lo"],
                     span["seq_hi"], sum(f.rows for f in files), sum(f.bytes for f in files))

    def merge_after_commit(self, *names: str, patient: bool = False) -> None:
        """Geometric merging after a write that is already committed, of every trace
        ``names`` in one commit.

        Losing a race only postpones it; any other failure (a full disk) is a warning in
        :attr:`warnings`, not an error: the write itself is committed, and the next write
        or ``ddcli compact`` merges again.
        """
        try:
            self.merge_layers(*names, patient=patient)
        except Conflict:
            pass
        except CorruptionError as e:
            raise CorruptionError(f"the write was committed, but merging afterwards found damage: {e}") from None
        except Exception as e:  # noqa: BLE001 - the committed write stands whatever merging does
            which = f"trace {names[0]!r}" if len(names) == 1 else f"traces {', '.join(map(repr, names))}"
            self.warn(f"{which}: merging layers after the commit failed "
                      f"({type(e).__name__}: {e}); the updates are committed, "
                      f"the merge is retried by the next write or 'ddcli compact'")

    def collect_garbage(self, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> int:
        """Remove files and log versions no reader can still need (storage/writes/gc.py)."""
        return collect_garbage(self, grace_seconds)


class Written:
    """The layer files one change writes, by trace: removed together unless committed."""

    def __init__(self):
        self.by_trace: dict[str, list[Layer]] = {}
        self.committing = False  # the commit was attempted: a failure may still have landed it

    def add(self, trace: str, layer: Layer | None) -> Layer | None:
        """Register ``layer`` (None: nothing written) as written for ``trace``; returns it."""
        if layer is not None:
            self.by_trace.setdefault(trace, []).append(layer)
        return layer
