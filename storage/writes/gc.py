"""Garbage collection and log retention: remove what no reader can still need.

A reader that took a version less than ``grace_seconds``
ago still finds every layer file it names: files stay while any version that was the
newest within the grace period names them, and the log keeps those versions (and the
checkpoint they are built on) for as long (storage/log/commit.py, ``Log.prune``). Files a
trace's Delta table may still name stay for the Delta retention (storage/lake/retention.py).
"""

from __future__ import annotations

from storage import clock
from storage.errors import CorruptionError
from storage.lake import retention as delta_retention
from storage.layer import summarised_layer
from storage.state.transitions import State
from storage.writes import lease


def collect_garbage(store, grace_seconds: float) -> int:
    """Remove files that no version a reader may still be using references, once
    older than the grace period.

    Also prunes the log behind the same window.

    A file stays while the newest version, or any version that was the newest within
    the grace period, names it (a reader that took such a version may still be reading
    it); files not yet committed stay until they are older than the grace period, so a
    writer has that long to commit what it wrote.
    """
    cutoff = clock.now() - grace_seconds
    store.state()
    if store.log.damaged:  # the damaged version may name files no intact one does: keep them
        raise CorruptionError(f"no garbage collected: {store.log.damage_note()}")
    referenced: set[str] = set()
    live_traces = set()
    states = [store.state()] + [State.from_json(s.get("version", 0), s) for s in store.log.recent_states(cutoff)]
    for st in states:
        for t in st.traces.values():
            live_traces.add(t.name)
            referenced.update(store.layer_paths(t))
    # a log retention shorter than the grace period pruned versions a reader may still
    # hold: their files are unknown, so only never-committed temporary files may go
    known = store.log.covers(cutoff)
    removed = 0
    blobs = store.blobs
    root = blobs.join(store.path, "traces")
    delta_cutoff = clock.now() - delta_retention.retention_seconds(grace_seconds)
    for tname in blobs.list_folders(root):
        removed += _collect_folder(store, tname, referenced, known, cutoff, delta_cutoff)
        if tname not in live_traces:
            delta_retention.remove_dead_table(store, tname, delta_cutoff)
            # only when empty and old: a new trace's writer may have just made it
            blobs.remove_folder(blobs.join(root, tname), older_than=cutoff)
    # temporary files of writers killed before their rename: the log's, and the hints'
    # beside the store's folders (the Delta record, ``Blobs.replace_hint``)
    strays = store.log.stray_tmp_files() + [blobs.join(store.path, n) for n in blobs.list(store.path)
                                             if n.startswith(".tmp-")]
    for p in strays:
        try:
            if blobs.stat(p).mtime < cutoff:
                blobs.delete(p)
                removed += 1
        except FileNotFoundError:
            continue
    removed += lease.collect_dead(blobs, store.path, cutoff)
    store.log.prune(cutoff, listing=True)
    return removed


def _collect_folder(store, tname: str, referenced: set[str], known: bool, cutoff: float, delta_cutoff: float) -> int:
    """Remove the old files of one trace folder that no version names, neither one of
    ddcli's log a reader may still use nor one of the trace's Delta table inside its
    retention (read only when there is something to remove)."""
    blobs = store.blobs
    tdir = blobs.join(store.path, "traces", tname)
    doomed = []
    for fname in blobs.list(tdir):
        p = blobs.join(tdir, fname)
        try:
            needed = p in referenced or summarised_layer(p) in referenced  # a layer's summary lives as long
            if not needed and (known or fname.startswith(".tmp-")) and blobs.stat(p).mtime < cutoff:
                doomed.append((fname, p))
        except FileNotFoundError:
            continue
    if doomed and delta_retention.has_table(store, tname):
        kept = delta_retention.kept_files(store, tname, delta_cutoff)
        if kept is None:
            store.warn(f"trace folder {tdir}: its Delta Lake log cannot be read; none of its files were collected")
            return 0
        doomed = [(fname, p) for fname, p in doomed if fname not in kept]
    for _, p in doomed:
        blobs.delete(p)
    return len(doomed)
