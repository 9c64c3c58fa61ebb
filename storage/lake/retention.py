"""What garbage collection must keep for Delta readers, and for how long.

A Delta reader may still be reading any version of a trace's table that was the newest at
some moment within the retention (``DDCLI_DELTA_RETENTION`` seconds; by default the grace
period of the garbage collection at hand, one hour unless ``ddcli compact --grace`` says
otherwise, so a Delta reader gets the time a ddcli reader gets). The files those versions
name are the newest version's files plus every file a later version removed within the
retention: a version stops being the newest when the next one is committed, and the files
it named but the newest does not were removed by one of the commits since. Each commit's
time is its log file's modification time, read from the same clock garbage collection
uses for layer files.

The Delta tables declare the same window (``delta.deletedFileRetentionDuration``): time
travel to an older version of a table finds its files gone.
"""

from __future__ import annotations

import json
import os

_COMMIT = "{:020d}.json"


def retention_seconds(grace_seconds: float | None = None) -> float:
    """``DDCLI_DELTA_RETENTION`` if set, else ``grace_seconds`` (default: one hour)."""
    raw = os.environ.get("DDCLI_DELTA_RETENTION")
    if raw:
        try:
            return max(float(raw), 0.0)
        except ValueError:
            pass
    return 3600.0 if grace_seconds is None else grace_seconds


def log_folder(store, name: str) -> str:
    return store.blobs.join(store.trace_dir(name), "_delta_log")


def has_table(store, name: str) -> bool:
    return bool(store.blobs.list(log_folder(store, name)))


def kept_files(store, name: str, cutoff: float) -> set[str] | None:
    """Names of the layer files of trace ``name`` that a Delta version newer than
    ``cutoff`` (epoch seconds) names; None when the table cannot be read (keep them all)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from storage.lake.table import storage_options
    blobs = store.blobs
    try:
        table = DeltaTable(store.trace_dir(name), storage_options=storage_options(blobs))
    except TableNotFoundError:
        return set()
    except Exception:  # noqa: BLE001 - a damaged table: keep every file it may name
        return None
    keep = _named_within(blobs, store.trace_dir(name), table, cutoff, ("remove",))
    return {p.rsplit("/", 1)[-1] for p in keep}


def remove_dead_table(store, name: str, cutoff: float) -> None:
    """Delete the Delta log of a trace that no longer exists, once its last version (the
    one that emptied it) is older than ``cutoff``: nothing is left for a reader to find."""
    blobs = store.blobs
    folder = log_folder(store, name)
    names = blobs.list(folder)
    if not names:
        return
    try:
        if max(blobs.stat(blobs.join(folder, n)).mtime for n in names) >= cutoff:
            return
        if kept_files(store, name, cutoff):
            return
    except FileNotFoundError:
        return
    # checkpoints first, then the commits from the oldest: the table stops being readable
    # at once instead of showing an older version whose files are gone
    for n in sorted(names, key=lambda n: (n.endswith(".json") and not n.startswith("_"), n)):
        blobs.delete(blobs.join(folder, n))
    blobs.remove_folder(folder)


def vacuum_table(blobs, uri: str, cutoff: float) -> int:
    """Delete the data and change-data files of a written table (a current-state table,
    storage/lake/current.py) that neither its newest version nor a commit newer than
    ``cutoff`` names, and that are older than ``cutoff``: Delta's VACUUM, without the
    commits delta-rs's own would add to the log. Returns the files deleted."""
    from deltalake import DeltaTable

    from storage.lake.table import storage_options
    table = DeltaTable(uri, storage_options=storage_options(blobs))
    keep = _named_within(blobs, uri, table, cutoff, ("remove", "cdc"))
    deleted = 0
    for sub in ("", "_change_data"):
        where = blobs.join(uri, sub) if sub else uri
        for n in blobs.list(where):
            rel = f"{sub}/{n}" if sub else n
            if not n.endswith(".parquet") or rel in keep:
                continue
            path = blobs.join(where, n)
            try:
                if blobs.stat(path).mtime < cutoff and blobs.delete(path):
                    deleted += 1
            except FileNotFoundError:
                pass
    return deleted


def _named_within(blobs, uri: str, table, cutoff: float, kinds: tuple[str, ...]) -> set[str]:
    """The paths the newest version of ``table`` (at ``uri``) adds, and those the actions
    of ``kinds`` name in every commit newer than ``cutoff``: the files some version that
    was the newest within the retention names."""
    import pyarrow as pa
    keep = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
    folder = blobs.join(uri, "_delta_log")
    for v in range(table.version(), -1, -1):
        path = blobs.join(folder, _COMMIT.format(v))
        try:
            if blobs.stat(path).mtime < cutoff:
                break
            lines = blobs.get(path).decode().splitlines()
        except FileNotFoundError:
            break  # cleaned up behind a checkpoint: older than any retention
        for line in lines:
            action = json.loads(line) if line.strip() else {}
            for kind in kinds:
                if kind in action:
                    keep.add(action[kind]["path"])
    return keep
