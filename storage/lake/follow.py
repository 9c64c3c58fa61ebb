"""The Delta logs follow ddcli's log, never lead it.

ddcli's own log is the source of truth: one run commits many traces at once, and Delta
commits one table at a time. So every change is committed to ddcli's log first; only then
does :class:`Follower` write the Delta versions of the traces it changed
(storage/lake/table.py). A command killed in between leaves the Delta tables one step
behind, never ahead, and the next command that changes the store (or ``ddcli compact``)
catches them up.

How the next command knows: ``STORE/_delta_synced.json`` records a ddcli log version
``M`` such that every trace's Delta table shows that trace as of version ``M`` or later.
A command whose commits went from version ``S`` to ``E`` reads it: with ``M = S`` only the
traces its own commits changed need a Delta version; with ``M < S`` (a command died before
its Delta commits, or another writer's are not done) every trace is checked; with ``M >= E``
others did the work. The record is written only once every table is brought up to ``E``;
a record that goes back (two writers finishing out of order) only costs a check later.

A failure to write a Delta version is a warning, never an error: the ddcli commit stands.

Settings: ``DDCLI_DELTA=off`` stops writing Delta logs (the default is on; turned on again,
the next change brings every table up to date). Fault points ``delta.before_commit`` and
``delta.after_commit`` (storage/faults.py): before each table's Delta version, and after
the last one (before the record is written).
"""

from __future__ import annotations

import json
import os

from storage import faults
from storage.lake.retention import retention_seconds
from storage.lake.table import publish, storage_options
from storage.state.trace import Trace

MARKER = "_delta_synced.json"
_WATCHED = ("layers", "since", "upper", "schema", "d")  # what a trace's Delta table shows


def enabled() -> bool:
    """Whether this process writes Delta logs (``DDCLI_DELTA``, default on)."""
    return os.environ.get("DDCLI_DELTA", "on").strip().lower() not in ("off", "0", "false", "no")


def public(name: str) -> bool:
    """Traces users name get a Delta table; a pipeline's operator state (``pipe.node``) does not."""
    return "." not in name


class Follower:
    """What the commits of one command changed, and the Delta versions that follow them."""

    def __init__(self, store):
        self.store = store
        self._reset()

    def _reset(self) -> None:
        self.start: int | None = None      # the version before this command's first commit
        self.end = 0                       # this command's newest version
        self.end_state: dict | None = None
        self.changed: dict[str, bool] = {}  # trace -> its since or upper moved
        self.gap = False                   # another writer committed between our commits

    def committed(self, before: dict | None, after: dict) -> None:
        """Note one commit of ddcli's log: ``before`` the state it changed, ``after`` the new one."""
        old_version = before.get("version", 0) if before else 0
        if self.start is None:
            self.start = old_version
        elif old_version != self.end:
            self.gap = True
        self.end, self.end_state = after["version"], after
        old = (before or {}).get("traces", {})
        new = after.get("traces", {})
        for name in set(old) | set(new):
            if not public(name):
                continue
            a, b = old.get(name), new.get(name)
            if a is None or b is None or any(a.get(k) != b.get(k) for k in _WATCHED):
                moved = a is None or b is None or a.get("since") != b.get("since") or a.get("upper") != b.get("upper")
                self.changed[name] = self.changed.get(name, False) or moved

    def follow(self) -> None:
        """Write the Delta versions of what this command committed (after its commits)."""
        if self.start is None:
            return
        start, end, state, changed, gap = self.start, self.end, self.end_state, self.changed, self.gap
        self._reset()
        marker = self._marker()
        if marker >= end:
            return
        if marker == start and not gap:
            targets = {n: c for n, c in changed.items()}
        else:
            targets = dict.fromkeys(self._all_tables(state), None)
        self._publish(targets, end, state)

    def catch_up(self) -> None:
        """Bring every Delta table up to the newest ddcli version if the record says they
        lag (``ddcli compact``: a command died between its commit and its Delta ones)."""
        self._reset()
        version, raw = self.store.log.latest()
        if version == 0 or self._marker() >= version:
            return
        state = dict(raw, version=version)
        self._publish(dict.fromkeys(self._all_tables(state), None), version, state)

    def _publish(self, targets: dict[str, bool | None], version: int, state: dict) -> None:
        store = self.store
        options = storage_options(store.blobs)
        keep = retention_seconds()
        done = True
        for name in sorted(targets):
            faults.point("delta.before_commit")
            raw = state.get("traces", {}).get(name)
            trace = Trace.from_json(name, raw) if raw is not None else None
            try:
                publish(store.trace_dir(name), name, trace, version, options=options,
                        retention_seconds=keep, frontiers_changed=targets[name])
            except Exception as e:  # noqa: BLE001 - the ddcli commit stands whatever Delta does
                done = False
                store.warn(f"trace {name!r}: writing its Delta Lake log failed ({type(e).__name__}: "
                           f"{' '.join(str(e).split())[:200]}); ddcli's commit stands, the next command "
                           f"that changes the store brings the Delta table up to date")
        faults.point("delta.after_commit")
        if done:
            self._set_marker(version)

    def _all_tables(self, state: dict) -> set[str]:
        """Every trace of ``state`` and every trace folder that may hold a Delta table."""
        names = {n for n in state.get("traces", {}) if public(n)}
        blobs = self.store.blobs
        names |= {n for n in blobs.list_folders(blobs.join(self.store.path, "traces")) if public(n)}
        return names

    def _marker_path(self) -> str:
        return self.store.blobs.join(self.store.path, MARKER)

    def _marker(self) -> int:
        """The recorded version (0 for a store that never had a trace; -1 when unknown)."""
        try:
            v = json.loads(self.store.blobs.get(self._marker_path())).get("version")
            return v if isinstance(v, int) else -1
        except FileNotFoundError:
            return -1
        except (OSError, ValueError, AttributeError):
            return -1

    def _set_marker(self, version: int) -> None:
        try:
            self.store.blobs.replace(self._marker_path(), json.dumps({"version": version}).encode())
        except OSError as e:
            self.store.warn(f"could not record how far the Delta Lake logs are ({e}); the next command checks them all")
