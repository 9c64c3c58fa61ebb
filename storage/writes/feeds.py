"""Change feeds: a named reader reads what changed since it last acknowledged, then acknowledges.

``ddcli changes TRACE --reader NAME`` is :func:`read_changes`, then (``--ack``, once the
output is completely written) :func:`acknowledge`. Exactly once, for a consumer that
acknowledges only after it has the output: a command killed before the acknowledgement
leaves the position where it was (the next read gives the same changes again, and any
sealed since); the acknowledgement moves the position to the upper that was read, never
to a newer one, or fails as a :class:`~storage.errors.Conflict` when the reader moved
meanwhile. The reader, its position and its hold are storage/state/readers.py.
"""

from __future__ import annotations

import pyarrow as pa

from storage.errors import Conflict, LayerVanished, StoreError
from storage.lattice import beyond_mask, time_columns
from storage.layer import consolidate
from storage.state import readers
from storage.state.readers import Reading
from storage.state.trace import Hold, Trace, check_name

_ATTEMPTS = 3  # reads retried when compaction collected the files they were reading


def _followed(store, trace: str, reader: str) -> Trace:
    """The trace ``reader`` may follow: a user trace or a pipeline's output, not state."""
    check_name(reader, "reader")
    t = store.trace(trace)
    if "." in trace:
        raise StoreError(f"trace {trace!r} is a pipeline's internal state; follow the pipeline's outputs instead")
    return t


def read_changes(store, trace: str, reader: str) -> tuple[Reading, pa.Table]:
    """The changes ``reader`` has not acknowledged: the updates ``(data, time, diff)`` at
    times beyond its position and not beyond the trace's upper, consolidated, ordered by
    time then data. A new reader is created first (one commit); until it acknowledges,
    it reads every sealed update, times advanced to the trace's since at its creation."""
    _followed(store, trace, reader)
    if readers.hold_key(reader) not in store.trace(trace).holds:
        store.write_and_commit("reader", lambda written: None,
                               lambda s, _: readers.add_reader(s, trace, reader))
    for _ in range(_ATTEMPTS):
        t = store.trace(trace)
        if readers.hold_key(reader) not in t.holds:
            raise Conflict(f"reader {reader!r} of trace {trace!r} was dropped meanwhile; nothing was read")
        reading = readers.reading(t, reader)
        try:
            return reading, unread_updates(store, t, reading)
        except LayerVanished:
            continue
    raise Conflict(f"changes of trace {trace!r}: compaction kept removing the layer files being read; retry")


def unread_updates(store, t: Trace, reading: Reading) -> pa.Table:
    """The updates of the layers ``reading`` names, times advanced to ``reading.since``
    (so they do not depend on which layers compaction merged yet), beyond the reader's
    position, consolidated."""
    table = consolidate(store.read_updates(t, reading.layers), t.data_columns, t.key, t.d, reading.since)
    tcols = time_columns(t.d)
    if reading.hold.position is not None and table.num_rows:
        keep = beyond_mask([table.column(c).to_numpy() for c in tcols], reading.hold.position)
        table = table.filter(pa.array(keep))
    if table.num_rows:
        table = table.sort_by([(c, "ascending") for c in tcols + t.data_columns])
    return table


def acknowledge(store, reading: Reading) -> bool:
    """Move the reader to the upper ``reading`` read (one commit); False when it is there
    already. A :class:`Conflict` when the reader moved or was dropped meanwhile."""
    t = store.trace(reading.trace)
    if readers.acknowledged(t, reading) == reading.hold:
        return False
    store.write_and_commit("ack", lambda written: None, lambda s, _: readers.ack_reader(s, reading))
    return True


def drop_reader(store, trace: str, reader: str) -> Hold:
    """Forget ``reader`` and release its hold on ``trace`` (one commit); returns the hold."""
    t = _followed(store, trace, reader)
    hold = readers.check_known(t, reader)
    store.write_and_commit("reader", lambda written: None, lambda s, _: readers.drop_reader(s, trace, reader))
    return hold
