"""The Delta logs follow ddcli's log, never lead it.

ddcli's own log is the source of truth: one run commits many traces at once, and Delta
commits one table at a time. So every change is committed to ddcli's log first; only then
does :class:`Follower` write the Delta versions of the traces it changed
(storage/lake/table.py). A command killed in between leaves the Delta tables behind, never
ahead, and the next command that changes the store (or ``ddcli compact``) catches them up.

How the next command knows: the record ``STORE/_delta_synced.json`` holds a ddcli log
version ``M`` and, for each table, its newest Delta version and the ddcli log version that
version shows (``M`` or older: the trace has not changed since). A command whose commits
went from version ``S`` to ``E`` reads it:

* ``M = S``: only the traces its own commits changed need a Delta version, and the record
  says what their tables hold, so each gets one JSON commit appended without loading the
  table (:func:`storage.lake.table.append`); should another writer have taken that Delta
  version, the table is loaded and compared instead (:func:`storage.lake.table.publish`);
* ``M < S`` (a command died before its Delta commits, another writer's are not done, or
  the record is missing): every table is loaded and brought up to ``E``;
* ``M >= E``: others did the work.

The record is rewritten only once every table is brought up to ``E``. A record that goes
back (two writers finishing out of order) or names an old Delta version costs a check
later, never a wrong commit: an appended commit is created with put-if-absent, so a stale
record makes it fail, and a table showing a ddcli version newer than ``S`` is never
appended to.

A failure to write a Delta version is a warning, never an error: the ddcli commit stands.

Settings: ``DDCLI_DELTA=off`` stops writing Delta logs (the default is on; turned on again,
the next change brings every table up to date). Fault points (storage/faults.py):
``delta.before_commit`` before each table's Delta version, ``delta.after_commit`` after the
last one, before the record is written.
"""

from __future__ import annotations

import json
import os

from storage import faults
from storage.lake.retention import retention_seconds
from storage.lake.span import CommitSpan
from storage.lake.table import Published, append, publish, storage_options
from storage.state.trace import Trace

RECORD = "_delta_synced.json"


def enabled() -> bool:
    """Whether this process writes Delta logs (``DDCLI_DELTA``, default on)."""
    return os.environ.get("DDCLI_DELTA", "on").strip().lower() not in ("off", "0", "false", "no")


def public(name: str) -> bool:
    """Traces users name get a Delta table; a pipeline's operator state (``pipe.node``) does not."""
    return "." not in name


def _appendable(entry: list | None, before: dict | None, after: dict | None, start: int) -> bool:
    """Whether a trace's change from ``before`` to ``after`` (None: dropped) can be appended
    to its table as the record's ``entry`` describes it: the table shows the trace as of
    ddcli version ``start`` or older (the trace unchanged since), with the same columns."""
    if entry is None or before is None or entry[1] > start:
        return False
    return after is None or (after["schema"], after["d"]) == (before["schema"], before["d"])


class Follower(CommitSpan):
    """What the commits of one command changed, and the Delta versions that follow them."""

    watched = ("layers", "since", "upper", "schema", "d")  # what a trace's Delta table shows

    def follows(self, name: str, before: dict | None, after: dict | None) -> bool:
        return public(name)

    def follow(self) -> None:
        """Write the Delta versions of what this command committed (after its commits)."""
        if self.start is None:
            return
        start, end, state, changed, old, gap = self.start, self.end, self.end_state, self.changed, self.old, self.gap
        self._reset()
        record = self._record()
        if record["version"] >= end:
            return
        if record["version"] == start and not gap:
            tables = dict(record["tables"])
            done = self._appended(changed, old, start, end, state, tables)
        else:
            tables, done = self._everything(end, state)
        faults.point("delta.after_commit")
        if done:
            self._write_record(end, state, tables)

    def catch_up(self) -> None:
        """Bring every Delta table up to the newest ddcli version if the record says they
        lag (``ddcli compact``: a command died between its commit and its Delta ones)."""
        self._reset()
        version, raw = self.store.log.latest(shared=True)
        if version == 0 or self._record()["version"] >= version:
            return
        state = dict(raw, version=version)
        tables, done = self._everything(version, state)
        if done:
            self._write_record(version, state, tables)

    # ------------------------------------------------------------ the two ways

    def _appended(self, changed: dict, old: dict, start: int, end: int, state: dict, tables: dict) -> bool:
        """The traces this command changed, one appended JSON commit each where the record
        says what the table holds; ``tables`` is updated in place."""
        done = True
        for name in sorted(changed):
            faults.point("delta.before_commit")
            raw = state.get("traces", {}).get(name)
            entry, before = tables.get(name), old.get(name)
            try:
                if _appendable(entry, before, raw, start):
                    new = Trace.from_json(name, raw) if raw is not None else None
                    if append(self.store.blobs, self.store.trace_dir(name), name, Trace.from_json(name, before),
                              new, end, entry[0]):
                        tables[name] = [entry[0] + 1, end]
                        continue
                self._note(tables, name, self._publish(name, raw, end, changed[name]))
            except Exception as e:  # noqa: BLE001 - the ddcli commit stands whatever Delta does
                done = False
                self._warn(name, e)
        return done

    def _everything(self, version: int, state: dict) -> tuple[dict, bool]:
        """Every table loaded and brought up to ``version``: the new record's tables."""
        tables: dict = {}
        done = True
        for name in sorted(self._all_tables(state)):
            faults.point("delta.before_commit")
            try:
                self._note(tables, name, self._publish(name, state.get("traces", {}).get(name), version, None))
            except Exception as e:  # noqa: BLE001 - the ddcli commit stands whatever Delta does
                done = False
                self._warn(name, e)
        return tables, done

    def _publish(self, name: str, raw: dict | None, version: int, moved: bool | None) -> Published:
        trace = Trace.from_json(name, raw) if raw is not None else None
        return publish(self.store.trace_dir(name), name, trace, version, options=storage_options(self.store.blobs),
                       retention_seconds=retention_seconds(), frontiers_changed=moved)

    @staticmethod
    def _note(tables: dict, name: str, p: Published) -> None:
        if p.version is None:
            tables.pop(name, None)
        else:
            tables[name] = [p.version, p.txn if p.txn is not None else -1]

    def _warn(self, name: str, e: Exception) -> None:
        self.store.warn(f"trace {name!r}: writing its Delta Lake log failed ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:200]}); ddcli's commit stands, the next command "
                        f"that changes the store brings the Delta table up to date")

    def _all_tables(self, state: dict) -> set[str]:
        """Every trace of ``state`` and every trace folder that may hold a Delta table."""
        names = {n for n in state.get("traces", {}) if public(n)}
        blobs = self.store.blobs
        names |= {n for n in blobs.list_folders(blobs.join(self.store.path, "traces")) if public(n)}
        return names

    # ------------------------------------------------------------ the record

    def _record_path(self) -> str:
        return self.store.blobs.join(self.store.path, RECORD)

    def _record(self) -> dict:
        """The record (version -1 when missing or unreadable: check everything)."""
        try:
            rec = json.loads(self.store.blobs.get(self._record_path()))
            if isinstance(rec.get("version"), int) and isinstance(rec.get("tables"), dict):
                return rec
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError):
            pass
        return {"version": -1, "tables": {}}

    def _write_record(self, version: int, state: dict, tables: dict) -> None:
        live = {n: v for n, v in tables.items() if n in state.get("traces", {})}
        try:
            self.store.blobs.replace_hint(self._record_path(), json.dumps({"version": version, "tables": live}).encode())
        except OSError as e:
            self.store.warn(f"could not record how far the Delta Lake logs are ({e}); the next command checks them all")
