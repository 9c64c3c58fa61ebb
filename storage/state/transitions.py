"""The store's metadata and every change to it, as named pure functions.

A :class:`State` is one committed version of the metadata: every trace and every
pipeline's record. Each change a command makes (ingest files, seal, advance, merge layers,
append a run, drop a pipeline, hold or release a trace) is one function here that takes
the newest state and returns the next one, or raises :class:`Conflict` when something it
depends on changed since the command read the store. None of them reads or writes a file:
the one commit path (:meth:`storage.store.Store.write_and_commit`) writes the layers a
change adds, checks they are still there, applies the change to the newest state and
commits the result with a put-if-absent (storage/log/commit.py). See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field

from storage.errors import Conflict, CorruptionError, StoreError
from storage.lattice import Frontier, format_frontier
from storage.layer import ROW_GROUP_ROWS, Layer
from storage.state import history
from storage.state import ingested as ingested_record
from storage.state.trace import Hold, Trace


class Traces(MutableMapping):
    """A state's traces by name, each parsed from its JSON the first time it is read: a
    command reads a few of a store's hundreds of traces (a pipeline's state traces are
    most of them), and parsing them all at every read and commit cost more than a small
    run's work. A trace never read goes back to JSON as it came."""

    def __init__(self, entries: dict, version: int = 0):
        self._entries = entries  # name -> Trace, or its JSON while not read
        self._version = version

    def __getitem__(self, name: str) -> Trace:
        t = self._entries[name]
        if isinstance(t, dict):
            t = self._entries[name] = _trace(self._version, name, t)
        return t

    def __setitem__(self, name: str, t: Trace) -> None:
        self._entries[name] = t

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self):
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name) -> bool:
        return name in self._entries

    def copy(self) -> "Traces":
        return Traces(dict(self._entries), self._version)

    def to_json(self) -> dict:
        return {n: (t if isinstance(t, dict) else t.to_json()) for n, t in self._entries.items()}


def _trace(version: int, name: str, raw: dict) -> Trace:
    try:
        return Trace.from_json(name, raw)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, StoreError) as e:
        raise _malformed(version, e) from None


def _malformed(version: int, e: Exception) -> CorruptionError:
    """A version whose content is not a state (a key or value a damaged version lost)."""
    detail = " ".join(f"{type(e).__name__}: {e}".split())[:200]
    return CorruptionError(f"metadata version {version} of the store is malformed ({detail}); the store is "
                           f"damaged, run 'ddcli check' (retrying will not help)")


@dataclass
class State:
    version: int
    traces: Traces
    pipelines: dict[str, dict]

    def __post_init__(self):
        if not isinstance(self.traces, Traces):
            self.traces = Traces(dict(self.traces), self.version)

    @classmethod
    def from_json(cls, version: int, v: dict | None) -> "State":
        """The state a version holds; :class:`CorruptionError` when its content is not one
        (a key or value a damaged version lost; a trace's when it is first read), never
        an error of the code reading it."""
        if not v:
            return cls(version, Traces({}, version), {})
        try:
            if not isinstance(v["traces"], dict) or not all(isinstance(t, dict) for t in v["traces"].values()):
                raise ValueError("the traces are not a mapping of records")
            traces = Traces(dict(v["traces"]), version)
            pipelines = dict(v.get("pipelines", {}))
            for name, record in pipelines.items():
                _check_record(record)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, StoreError) as e:
            raise _malformed(version, e) from None
        return cls(version, traces, pipelines)

    def to_json(self) -> dict:
        return {"version": self.version, "traces": self.traces.to_json(), "pipelines": self.pipelines}

    def with_traces(self, changed: dict[str, Trace | None]) -> "State":
        """A new state with these traces replaced (None: removed)."""
        traces = self.traces.copy()
        for name, t in changed.items():
            if t is None:
                traces.pop(name, None)
            else:
                traces[name] = t
        return State(self.version, traces, dict(self.pipelines))


def _check_record(record: dict) -> None:
    """Raise ``ValueError`` unless a pipeline's record has the fields readers use, typed."""
    ok = (isinstance(record, dict) and isinstance(record.get("runs", 0), int)
          and isinstance(record.get("d", 1), int) and isinstance(record.get("inputs") or {}, dict)
          and all(isinstance(v, dict) and isinstance(v.get("seq", 0), int) for v in (record.get("inputs") or {}).values())
          and all(isinstance(record.get(k) or [], list) for k in ("outputs", "state")))
    if not ok:
        raise ValueError(f"a pipeline record is not one: {str(record)[:80]}")
    if "frontier" in record:
        Frontier.from_json(record["frontier"], record.get("d", 1))
    for v in (record.get("inputs") or {}).values():
        if "upper" in v:
            Frontier.from_json(v["upper"], record.get("d", 1))


# ---------------------------------------------------------------- seal


@dataclass
class Sealed:
    """The layers a seal wrote: the sealed updates of ``[upper, new upper)``, and the
    pending layers it replaced (``replaced_pending``, ids) by the part still beyond the new
    upper (``kept_pending``). ``moves_upper``: the seal moves the upper (it counts a seal)."""

    layers: list[Layer] = field(default_factory=list)
    replaced_pending: list[str] | None = None
    kept_pending: list[Layer] = field(default_factory=list)
    moves_upper: bool = False

    def written(self) -> list[Layer]:
        """Every layer file the seal wrote."""
        return list(self.layers) + list(self.kept_pending)


def seal_point(t: Trace) -> tuple:
    """What a write that seals times or adds updates depends on: upper, seal count, pending."""
    return (t.upper, t.next_seq, tuple(l.id for l in t.pending))


def seal(t: Trace, sealed: Sealed, new_upper: Frontier) -> Trace:
    """``t`` with the sealed layers appended, its pending layers replaced and its upper moved."""
    layers = list(t.layers) + list(sealed.layers)
    pending = list(t.pending)
    if sealed.replaced_pending is not None:
        pending = [l for l in pending if l.id not in sealed.replaced_pending] + list(sealed.kept_pending)
    next_seq = t.next_seq + (1 if sealed.moves_upper else 0)
    return t.with_(layers=layers, pending=pending, upper=new_upper, next_seq=next_seq)


def check_holds_allow(cur: Trace, layers: list[Layer]) -> None:
    """Refuse layers whose times were advanced further than the trace now allows (a reader
    put a hold on it since they were written)."""
    eff = cur.effective_since()
    for l in layers:
        if not (l.since.is_empty() or eff.dominates(l.since)):
            raise Conflict(f"a reader put a hold on trace {cur.name!r} at {format_frontier(eff)} meanwhile; "
                           f"nothing was changed, retry")


def ingest(s: State, proto: Trace, existing: Trace | None, sealed: Sealed, seal_to: Frontier,
           pending: list[Layer], files: dict[str, str]) -> State:
    """Append ingested updates to trace ``proto.name`` (created from ``proto`` when
    ``existing`` is None): seal them (and any pending updates) up to ``seal_to``, keep
    ``pending`` beyond the upper, remember ``files`` (path -> signature) as ingested."""
    name = proto.name
    t = s.traces.get(name)
    if existing is None:
        if t is not None:
            raise Conflict(f"trace {name!r} was created by another command at the same time; "
                           f"nothing was ingested, retry")
        t = proto
    elif t is None:
        raise Conflict(f"trace {name!r} was removed while ingesting; nothing was ingested")
    elif seal_point(t) != seal_point(existing):
        raise Conflict(f"trace {name!r} changed while ingesting (another command wrote to it; "
                       f"its upper is now {format_frontier(t.upper)}); nothing was ingested, retry")
    now = ingested_record.keys(t.ingested)
    again = [path for path, sig in files.items() if set(ingested_record.entry_keys(sig)) & now]
    if again:
        raise Conflict(f"{again[0]} was ingested into trace {name!r} by another command at the same time; "
                       f"nothing was ingested by this one")
    check_holds_allow(t, sealed.written() + pending)
    t = seal(t, sealed, seal_to)
    t = t.with_(pending=t.pending + pending, ingested=ingested_record.add(t.ingested, list(files.values())))
    return s.with_traces({name: t})


def took_lake_table(s: State, name: str, source: str, before: dict | None, after: dict) -> State:
    """Remember that trace ``name`` took lake table ``source`` up to ``after`` (a Delta
    version, an Iceberg snapshot: storage/sources/), in the same commit as the updates it
    took; only while the record still says ``before``, so no version is taken twice."""
    t = s.traces.get(name)
    if t is None:
        raise Conflict(f"trace {name!r} was removed while ingesting; nothing was ingested")
    if t.sources.get(source) != before:
        raise Conflict(f"{source} was ingested into trace {name!r} by another command at the same time; "
                       f"nothing was ingested by this one")
    return s.with_traces({name: t.with_(sources={**t.sources, source: dict(after)})})


def advance(s: State, seen: Trace, sealed: Sealed | None, upper: Frontier | None,
            since: Frontier | None) -> State:
    """Move trace ``seen.name``'s upper (with the layers ``sealed`` wrote) and/or its since."""
    name = seen.name
    cur = s.traces.get(name)
    if cur is None:
        raise Conflict(f"trace {name!r} was removed")
    if sealed is not None:
        if seal_point(cur) != seal_point(seen):
            raise Conflict(f"trace {name!r} changed while advancing (another command wrote to it); "
                           f"nothing was changed, retry")
        check_holds_allow(cur, sealed.written())
        cur = seal(cur, sealed, upper)
    if since is not None:
        cur = cur.with_(since=since if since.dominates(cur.since) else cur.since)
    return s.with_traces({name: cur})


# ---------------------------------------------------------------- holds and merges


def with_hold(t: Trace, holder: str, since: Frontier, seq: int) -> Trace:
    """``t`` held by ``holder``: compacted no further than ``since``, never merged across ``seq``."""
    holds = dict(t.holds)
    holds[holder] = Hold(since, seq)
    return t.with_(holds=holds)


def without_hold(t: Trace, holder: str) -> Trace:
    """``t`` released by ``holder``."""
    holds = dict(t.holds)
    holds.pop(holder, None)
    return t.with_(holds=holds)


def _hold_seqs(t: Trace) -> set[int]:
    return {h.seq for h in t.holds.values()}


def _held_apart(older: Layer, newer: Layer, barriers: set[int]) -> bool:
    """True when a hold's seq lies between two adjacent layers. Seals that wrote no layer
    leave gaps in the seq numbers, so the hold may sit anywhere in ``[older.seq_hi, newer.seq_lo]``."""
    return any(older.seq_hi <= n <= newer.seq_lo for n in barriers)


def _crosses_hold(group: list[Layer], barriers: set[int]) -> bool:
    """True when merging ``group`` would join layers on both sides of a hold's seq."""
    return any(_held_apart(a, b, barriers) for a, b in zip(group, group[1:]))


#: ``patient`` merging leaves layers of fewer rows than one row group alone until a trace
#: holds this many of them in a row
SMALL_LAYER_ROWS, PATIENT_LAYERS = ROW_GROUP_ROWS, 8


def plan_merges(t: Trace, full: bool, patient: bool = False) -> list[list[Layer]]:
    """Groups of adjacent layers to merge (each group becomes one layer).

    Geometric rule: merge neighbours whose sizes are within a factor of two, so every
    update is rewritten O(log n) times and a trace keeps O(log n) layers; ``full`` merges
    every run of layers. Layers are never merged across a reader's hold, so readers can
    still tell old from new. ``patient`` (after a pipeline's run, whose every refresh adds
    a small layer to each trace it writes): a group of small layers only is merged once
    :data:`PATIENT_LAYERS` of them lie side by side — a read of a few more small files
    costs less than a merge, its write and its commit at every run.
    """
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
        groups.extend(g for g in stack if len(g) > 1 and not (patient and _waits(g, seg)))
    return groups


def _waits(group: list[Layer], segment: list[Layer]) -> bool:
    """Whether a patient merge leaves ``group`` alone: it holds small layers only, and
    its segment fewer than :data:`PATIENT_LAYERS` small ones in a row."""
    if any(l.rows >= SMALL_LAYER_ROWS for l in group):
        return False
    run = longest = 0
    for l in segment:
        run = run + 1 if l.rows < SMALL_LAYER_ROWS else 0
        longest = max(longest, run)
    return longest < PATIENT_LAYERS


def _rows(group: list[Layer]) -> int:
    return sum(l.rows for l in group)


def merge(s: State, name: str, replaced: list[list[str]], merged: list[Layer]) -> State:
    """Replace each run of adjacent layers (ids in ``replaced``) by its merge."""
    cur = s.traces.get(name)
    if cur is None:
        raise Conflict(f"trace {name!r} was removed while compacting")
    layers = list(cur.layers)
    barriers = _hold_seqs(cur)
    for ids, new in zip(replaced, merged):
        pos = [i for i, l in enumerate(layers) if l.id in ids]
        if len(pos) != len(ids) or pos != list(range(pos[0], pos[0] + len(ids))):
            raise Conflict(f"layers of trace {name!r} changed while compacting; the merge backs off")
        if _crosses_hold(layers[pos[0]:pos[-1] + 1], barriers):
            raise Conflict(f"a reader put a hold on trace {name!r} while compacting; the merge backs off")
        layers[pos[0]:pos[-1] + 1] = [new]
    check_holds_allow(cur, merged)
    return s.with_traces({name: cur.with_(layers=layers)})


# ---------------------------------------------------------------- pipelines


def loop_frontier(f: Frontier, depth: int) -> Frontier:
    """A frontier of outer times moved into loops: iteration coordinates stay at 0."""
    return Frontier([t + (0,) * depth for t in f], f.d + depth)


@dataclass
class RunCommit:
    """What one run of a pipeline commits (see :func:`append_run`)."""

    pipeline: str
    runs: int  # the runs the pipeline had when this one started
    record: dict  # the pipeline's new record
    frontier: Frontier  # the pipeline's new frontier
    d: int  # the pipeline's time dimension
    inputs: dict[str, int]  # input trace -> the sequence number consumed up to
    targets: dict[str, bool]  # trace written -> is it operator state (else an output)
    protos: dict[str, Trace]  # trace written -> the trace as the run found (or created) it
    written: dict[str, Layer | None]  # trace written -> its new sealed layer
    held: dict[str, Layer | None]  # output -> its changes beyond the frontier, pending
    unheld: list[str]  # inputs the pipeline did not hold before (their history may be compacted)
    rebuild: bool = False  # state and outputs of an earlier version are replaced
    reads: dict[str, list[str]] | None = None  # output -> the unheld inputs it was computed from (None: all)
    released: list[str] = field(default_factory=list)  # outputs the new version no longer writes
    figures: dict | None = None  # the run's figures, for the pipeline's history (storage/state/history.py)
    history_runs: int = history.DEFAULT_RUNS  # the runs the history keeps


def append_run(s: State, run: RunCommit) -> State:
    """A run of a pipeline: its layers appended to its outputs and state, its inputs held
    at its frontier and consumed position, its record updated.

    A rebuild (of an edited pipeline) also removes the state traces the new record does not
    name, releases the traces the new version no longer reads, and leaves the outputs it no
    longer writes as ordinary traces."""
    cur = s.pipelines.get(run.pipeline)
    if (cur["runs"] if cur else 0) != run.runs:
        raise Conflict(f"another run of pipeline {run.pipeline!r} committed first; nothing was written by this one")
    changed: dict[str, Trace | None] = {}
    compacted_to = {}  # how far each input's history may be compacted now (before our hold)
    for n, seq in run.inputs.items():
        t = s.traces.get(n)
        if t is None:
            raise Conflict(f"input trace {n!r} was removed during the run")
        compacted_to[n] = t.effective_since()
        if any(l.seq_lo < seq < l.seq_hi for l in t.layers):
            raise Conflict(f"input trace {n!r} was compacted across this run's position; run again")
        changed[n] = with_hold(t, run.pipeline, run.frontier, seq)
    for tname, is_state in run.targets.items():
        changed[tname] = _run_target(s.traces.get(tname), tname, is_state, run, compacted_to)
    if run.rebuild:  # state of the old version that the new one does not have
        kept = set(run.record.get("state", ()))
        changed.update({n: None for n, t in s.traces.items()
                        if t.owner == run.pipeline and "." in n and n not in run.targets and n not in kept})
        changed.update({n: without_hold(t, run.pipeline) for n, t in s.traces.items()
                        if run.pipeline in t.holds and n not in run.inputs and n not in changed})
        for o in run.released:
            t = s.traces.get(o)
            if t is not None and t.owner == run.pipeline and o not in changed:
                changed[o] = t.with_(owner=None, pending=[])  # what waited for the pipeline never comes
    out = s.with_traces(changed)
    record = dict(run.record)
    if run.figures is not None:  # kept across runs (and rebuilds); bounded
        kept = cur.get(history.HISTORY_KEY) if cur else None
        record[history.HISTORY_KEY] = history.with_run(kept, run.record["runs"], run.figures, run.history_runs)
    out.pipelines[run.pipeline] = record
    return out


def _run_target(t: Trace | None, tname: str, is_state: bool, run: RunCommit, compacted_to: dict) -> Trace:
    """An output or state trace of a run, with the run's layer appended."""
    if t is not None and run.rebuild and t.owner == run.pipeline:
        t = None  # replaced by its recomputation
    if t is None:
        t = run.protos[tname]
    elif t.owner != run.pipeline or t.next_seq != run.protos[tname].next_seq:
        raise Conflict(f"trace {tname!r} changed during the run; run again")
    layer = run.written[tname]
    depth = t.d - run.d
    t = t.with_(layers=t.layers + ([layer] if layer else []), upper=loop_frontier(run.frontier, depth),
                next_seq=t.next_seq + 1)
    if is_state:
        return t.with_(since=loop_frontier(run.frontier, depth))
    if [l.id for l in t.pending] != [l.id for l in run.protos[tname].pending]:
        raise Conflict(f"trace {tname!r} changed during the run; run again")
    if tname in run.held:
        t = t.with_(pending=[run.held[tname]] if run.held[tname] else [])
    for n in run.unheld:  # an output never answers a time its inputs cannot tell apart
        if run.reads is None or n in run.reads.get(tname, ()):
            t = t.with_(since=t.since.join(compacted_to[n]))
    return t


def drop(s: State, name: str, outputs: list[str], keep_outputs: bool) -> State:
    """Forget pipeline ``name``: release its holds, remove its state traces and (unless
    ``keep_outputs``, which makes them ordinary traces) its ``outputs``."""
    if not isinstance(s.pipelines.get(name), dict):
        known = ", ".join(sorted(s.pipelines)) or "none"
        raise StoreError(f"unknown pipeline {name!r} (pipelines: {known})")
    changed: dict[str, Trace | None] = {}
    for t in s.traces.values():
        if name in t.holds:
            changed[t.name] = without_hold(t, name)
        if t.owner == name and "." in t.name:
            changed[t.name] = None  # state
    for o in outputs:
        t = changed.get(o, s.traces.get(o))
        if t is None or t.owner != name:
            continue
        if keep_outputs:
            changed[o] = t.with_(owner=None, pending=[])  # what waited for the pipeline never comes
        elif any(h != name for h in t.holds):
            raise StoreError(f"output {o!r} of pipeline {name!r} got a reader meanwhile; nothing was dropped")
        else:
            changed[o] = None
    out = s.with_traces(changed)
    del out.pipelines[name]
    return out
