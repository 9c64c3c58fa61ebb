"""Named readers: consumers outside the store that follow a trace's changes (``ddcli changes``).

A reader has a *position*, the upper it last acknowledged. Its unread changes are the
updates of the sealed layers after that position: the times beyond the position and not
beyond the trace's upper. A new reader has no position yet: it starts at the trace's
since when it was created (its ``start``), and until it acknowledges it reads the whole
sealed history with times advanced to that start. It holds the trace as a pipeline does,
with a :class:`Hold` under the key ``reader:NAME`` in the trace's holds (the prefix keeps
reader and pipeline names apart):

* ``seq``: layers are never merged across it, so the layers it has not read stay apart
  from the ones it has (it reads the layers whose ``seq_lo >= seq``);
* ``since``: compaction advances times no further than it. For a reader at position
  ``P`` it lies *just below* ``P`` (:func:`hold_frontier`), not at ``P``: advancing a time
  the reader acknowledged to ``P`` itself would move an old update onto a time the reader
  has not read. So the unread updates are also exactly those at times beyond ``P``, and a
  merge that joins read and unread layers while a reader acknowledges is harmless. A new
  reader holds at its start, and no further than just below the upper it was created at,
  so its hold only moves forward.

Everything here is a pure function of the metadata (the changes follow the conventions of
storage/state/transitions.py); reading and committing is storage/writes/feeds.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from storage.errors import Conflict, StoreError
from storage.lattice import Frontier, format_frontier
from storage.layer import Layer
from storage.state.trace import Hold, Trace, check_name
from storage.state.transitions import State

PREFIX = "reader:"

READER_COLUMNS = [("trace", "string"), ("reader", "string"), ("position", "string"), ("upper", "string"),
                  ("behind", "bool"), ("layers", "int64"), ("updates", "int64"), ("behind_by", "int64"),
                  ("holds_since", "string")]


def hold_key(reader: str) -> str:
    """The key of ``reader``'s hold in a trace's holds."""
    return PREFIX + reader


def reader_of(key: str) -> str | None:
    """The reader a hold key belongs to (None: a pipeline's hold)."""
    return key[len(PREFIX):] if key.startswith(PREFIX) else None


def describe_holder(key: str) -> str:
    """A hold's owner for a message: ``pipeline 'wc'`` or ``reader 'etl' (ddcli changes)``."""
    reader = reader_of(key)
    return f"pipeline {key!r}" if reader is None else f"reader {reader!r} (ddcli changes)"


def readers(t: Trace) -> dict[str, Hold]:
    """The named readers of a trace and their holds, by reader name."""
    return {r: h for k, h in sorted(t.holds.items()) if (r := reader_of(k)) is not None}


def hold_frontier(position: Frontier) -> Frontier:
    """Where compaction may advance times while a reader sits at ``position``.

    Advancing to a frontier moves each coordinate up to the frontier's meet (see
    storage/lattice.py), so this is one time ``c`` with ``c_i = meet(position)_i - 1``: a time
    ``t`` not beyond the position has, for every element ``p``, a coordinate ``j`` with
    ``t_j < p_j``; ``max(t_j, c_j)`` stays below ``p_j``, so ``join(t, c)`` is not beyond the
    position either. No larger ``c_i`` works: a time equal to ``meet_i - 1`` in coordinate
    ``i`` and huge in the others is not beyond the position, its advance would be. Times
    are never negative, so ``c`` stops at 0. Times beyond the position are beyond ``c``
    and never move. The empty position (a trace sealed for all times) holds nothing back.
    """
    m = position.meet_time()
    if m is None:
        return Frontier.empty(position.d)
    return Frontier([tuple(max(c - 1, 0) for c in m)], position.d)


def unread_layers(t: Trace, hold: Hold) -> list[Layer]:
    """The sealed layers a reader holding ``t`` with ``hold`` has not read (pending ones,
    beyond the upper, wait until a seal)."""
    return [l for l in t.layers if l.seq_lo >= hold.seq]


@dataclass(frozen=True)
class Reading:
    """What one ``ddcli changes`` read: ``layers`` of trace ``trace`` for ``reader``, whose
    hold was ``hold``, while the trace's upper was ``upper`` and its next seal ``seq``;
    the times read are advanced to ``since``."""

    trace: str
    reader: str
    hold: Hold
    upper: Frontier
    seq: int
    layers: tuple[Layer, ...]
    since: Frontier


def reading(t: Trace, reader: str) -> Reading:
    """What ``reader`` reads of ``t`` now: the unread layers; times advanced to its start
    for a new reader (where the trace's since had moved them, or may have), else to its
    hold (where they are exact)."""
    h = t.holds[hold_key(reader)]
    return Reading(t.name, reader, h, t.upper, t.next_seq, tuple(unread_layers(t, h)),
                   h.start if h.position is None else h.since)


# ---------------------------------------------------------------- the changes


def _trace(s: State, trace: str) -> Trace:
    t = s.traces.get(trace)
    if t is None:
        raise Conflict(f"trace {trace!r} was removed meanwhile; nothing was changed")
    return t


def add_reader(s: State, trace: str, reader: str) -> State:
    """A new reader of ``trace``, starting at its since: it has read nothing (``seq`` 0
    separates nothing) and holds the trace at that since, and no further than just below
    the upper (where its first acknowledgement will hold it at the earliest). A reader
    that another command created meanwhile stays as it is."""
    check_name(reader, "reader")
    t = _trace(s, trace)
    if hold_key(reader) in t.holds:
        return s
    hold = Hold(t.since.meet(hold_frontier(t.upper)), 0, None, t.since)
    return s.with_traces({trace: t.with_(holds={**t.holds, hold_key(reader): hold})})


def acknowledged(t: Trace, reading: Reading) -> Hold:
    """The hold of a reader that acknowledged what ``reading`` read: at the upper it read
    (never a newer one), its since just below it.

    Normally ``seq`` is the seal the reading stopped before. A merge that committed since
    the reading may have joined a read layer with an unread one; then ``seq`` goes to the
    start of that layer, and the times tell read from unread (a reading keeps only times
    beyond its position). That needs every read update at a time not beyond the new
    position: true for a reader that acknowledged before (its hold kept them there), and
    for a new one when its start lies below the new hold (the trace's since may have moved
    its history up to the start); otherwise the acknowledgement is a :class:`Conflict`.
    """
    seq = reading.seq
    since = hold_frontier(reading.upper)
    cut = [l for l in t.layers if l.seq_lo < seq < l.seq_hi]
    if cut:
        if reading.hold.position is None and not since.dominates(reading.hold.start):
            raise Conflict(f"trace {t.name!r} was compacted across what the new reader {reading.reader!r} "
                           f"read; nothing was acknowledged, read again")
        seq = cut[0].seq_lo
    return Hold(since, seq, reading.upper)


def ack_reader(s: State, reading: Reading) -> State:
    """Move the reader to the upper ``reading`` read, if its hold is still the one read."""
    t = _trace(s, reading.trace)
    key = hold_key(reading.reader)
    h = t.holds.get(key)
    if h is None:
        raise Conflict(f"reader {reading.reader!r} of trace {t.name!r} was dropped meanwhile; "
                       f"nothing was acknowledged")
    if h != reading.hold:
        raise Conflict(f"reader {reading.reader!r} of trace {t.name!r} moved meanwhile (another "
                       f"'ddcli changes --ack'); nothing was acknowledged, read again")
    return s.with_traces({t.name: t.with_(holds={**t.holds, key: acknowledged(t, reading)})})


def drop_reader(s: State, trace: str, reader: str) -> State:
    """Forget ``reader`` of ``trace`` and release its hold."""
    t = _trace(s, trace)
    check_known(t, reader)
    holds = dict(t.holds)
    del holds[hold_key(reader)]
    return s.with_traces({trace: t.with_(holds=holds)})


def check_known(t: Trace, reader: str) -> Hold:
    """The hold of ``reader`` of ``t``; a one-line error naming the readers if none."""
    h = t.holds.get(hold_key(reader))
    if h is None:
        known = ", ".join(readers(t)) or "none"
        raise StoreError(f"unknown reader {reader!r} of trace {t.name!r} (readers: {known})")
    return h


# ---------------------------------------------------------------- status


def reader_rows(state: State, trace: str | None = None) -> list[dict]:
    """One row per named reader: its position (empty for a new reader), the trace's upper,
    whether it is behind, the layers and updates it has not read (``updates`` counts the
    rows of those layers), ``behind_by`` the distance to the upper (one-dimensional times)
    and the frontier its hold keeps the trace's history at."""
    rows = []
    for name, t in sorted(state.traces.items()):
        if trace is not None and name != trace:
            continue
        for reader, h in readers(t).items():
            unread = unread_layers(t, h)
            at = h.position if h.position is not None else h.start
            by = None
            if t.d == 1 and not at.is_empty() and not t.upper.is_empty():
                by = t.upper.elements[0][0] - at.elements[0][0]
            rows.append({
                "trace": name, "reader": reader,
                "position": format_frontier(h.position) if h.position is not None else None,
                "upper": format_frontier(t.upper),
                "behind": bool(unread) or h.position != t.upper,
                "layers": len(unread), "updates": sum(l.rows for l in unread), "behind_by": by,
                "holds_since": format_frontier(h.since),
            })
    return rows


def reader_table(state: State, trace: str | None = None) -> pa.Table:
    """:func:`reader_rows` as an Arrow table (an empty one has the same columns)."""
    schema = pa.schema([(n, pa.type_for_alias(t)) for n, t in READER_COLUMNS])
    return pa.Table.from_pylist(reader_rows(state, trace), schema=schema)
