"""The current-state tables of pipeline outputs follow ddcli's log, never lead it.

As for the trace tables (storage/lake/follow.py), every change is committed to ddcli's log
first; only then does :class:`Tables` bring the current-state table (storage/lake/current.py)
of each output the command's commits moved up to the newest version. A command killed in
between leaves the tables behind, and the next command that changes the store (or ``ddcli
compact``) catches them up: the record ``STORE/_tables_synced.json`` holds the ddcli log
version ``M`` every table was last brought up to. A command whose commits went from version
``S`` to ``E``:

* ``M = S``: only the outputs its own commits changed need a version;
* ``M < S`` (a command died before its tables were written, or the record is missing): every
  output, and every table whose trace is gone, is brought up to ``E``;
* ``M >= E``: others did the work.

Bringing a table up is idempotent (its ``txn`` names the ddcli version it shows; a table
that already shows the trace's upper gets no version), so a stale record costs a check,
never a wrong or a second version. A failure is a warning, never an error: the ddcli commit
stands.

Settings: ``DDCLI_TABLES=off`` stops writing them (default on; turned on again, the next
change brings every table up to date). ``DDCLI_ICEBERG_OUTPUTS`` names outputs that are also
published to Iceberg tables (storage/lake/iceberg.py) each time their table is brought up. Fault points (storage/faults.py):
``tables.before_commit`` before each table's version, ``tables.after_commit`` after the
last one, before the record is written.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from storage import faults
from storage.lake.current import bring_up, is_output
from storage.lake.span import CommitSpan
from storage.state.trace import Trace

RECORD = "_tables_synced.json"
TABLES_AT_ONCE = 4  # tables brought up at once (delta-rs works outside the GIL)


def enabled() -> bool:
    """Whether this process writes current-state tables (``DDCLI_TABLES``, default on)."""
    return os.environ.get("DDCLI_TABLES", "on").strip().lower() not in ("off", "0", "false", "no")


def iceberg_targets() -> dict[str, str]:
    """Outputs published to Iceberg after each change (``DDCLI_ICEBERG_OUTPUTS``:
    ``OUTPUT=CATALOG_URI#NS.TABLE`` pairs separated by ``;``), as ``ddcli publish`` does."""
    pairs = (p.partition("=") for p in os.environ.get("DDCLI_ICEBERG_OUTPUTS", "").split(";") if p.strip())
    return {name.strip(): target.strip() for name, _, target in pairs}


class Tables(CommitSpan):
    """The outputs the commits of one command changed, and their tables' versions."""

    watched = ("upper", "schema", "d", "owner")  # what the collection at the latest time depends on

    def follows(self, name: str, before: dict | None, after: dict | None) -> bool:
        return is_output(name, before) or is_output(name, after)

    def follow(self) -> None:
        """Write the table versions of what this command committed (after its commits)."""
        if self.start is None:
            return
        start, end, state, changed, gap = self.start, self.end, self.end_state, self.changed, self.gap
        self._reset()
        record = self._record()
        if record >= end:
            return
        names = changed if record == start and not gap else self._all_tables(state)
        if self._bring_up(names, end, state):
            self._write_record(end)

    def catch_up(self) -> None:
        """Bring every table up to the newest ddcli version if the record says they lag."""
        self._reset()
        version, raw = self.store.log.latest(shared=True)
        if version == 0 or self._record() >= version:
            return
        if self._bring_up(self._all_tables(raw), version, raw):
            self._write_record(version)

    def _bring_up(self, names, version: int, state: dict) -> bool:
        """Bring the tables of ``names`` up to ``version`` (``state``), a few at once: each
        is a Delta log of its own, and most of a version's cost is delta-rs reading and
        writing it outside Python. The Iceberg publications follow one by one (their
        catalog may be one SQLite file). Whether every table was brought up."""
        traces = state.get("traces", {})

        def one(name: str) -> tuple[str, Trace | None, bool]:
            faults.point("tables.before_commit")
            raw = traces.get(name)
            trace = Trace.from_json(name, raw) if is_output(name, raw) else None
            try:
                bring_up(self.store, name, trace, version)
                return name, trace, True
            except Exception as e:  # noqa: BLE001 - the ddcli commit stands whatever Delta does
                self._failed(name, e)
                return name, trace, False

        names = sorted(names)
        if len(names) > 1:
            with ThreadPoolExecutor(min(TABLES_AT_ONCE, len(names)), thread_name_prefix="ddcli-tables") as pool:
                results = list(pool.map(one, names))
        else:
            results = [one(n) for n in names]
        done = all(ok for _, _, ok in results)
        targets = iceberg_targets()
        for name, trace, ok in results:
            if ok and trace is not None and name in targets:
                from storage.lake.iceberg import publish
                try:
                    publish(self.store, name, targets[name])
                except Exception as e:  # noqa: BLE001 - as above
                    done = False
                    self._failed(name, e)
        faults.point("tables.after_commit")
        return done

    def _failed(self, name: str, e: Exception) -> None:
        self.store.warn(f"output {name!r}: writing its current-state (or Iceberg) table failed "
                        f"({type(e).__name__}: {' '.join(str(e).split())[:200]}); ddcli's commit stands, "
                        f"the next command that changes the store brings the table up to date")

    def _all_tables(self, state: dict) -> set[str]:
        """Every output of ``state`` and every table folder (whose trace may be gone)."""
        names = {n for n, raw in state.get("traces", {}).items() if is_output(n, raw)}
        blobs = self.store.blobs
        return names | set(blobs.list_folders(blobs.join(self.store.path, "tables")))

    def vacuum(self, cutoff: float) -> None:
        """Delete the files the tables' versions newer than ``cutoff`` (epoch seconds) no
        longer name: merged-away data files and change data (``ddcli compact``), so that
        readers time travel and follow the feed within the retention."""
        from storage.lake.retention import vacuum_table
        blobs = self.store.blobs
        for name in sorted(blobs.list_folders(blobs.join(self.store.path, "tables"))):
            try:
                vacuum_table(blobs, blobs.join(self.store.path, "tables", name), cutoff)
            except Exception as e:  # noqa: BLE001 - garbage stays until the next compact
                self.store.warn(f"output {name!r}: vacuuming its current-state table failed ({type(e).__name__}: "
                                f"{' '.join(str(e).split())[:200]})")

    # ------------------------------------------------------------ the record

    def _record_path(self) -> str:
        return self.store.blobs.join(self.store.path, RECORD)

    def _record(self) -> int:
        """The version every table was brought up to (-1 when unknown: check them all)."""
        try:
            version = json.loads(self.store.blobs.get(self._record_path())).get("version")
            return version if isinstance(version, int) else -1
        except (OSError, ValueError, AttributeError):
            return -1

    def _write_record(self, version: int) -> None:
        try:
            self.store.blobs.replace_hint(self._record_path(), json.dumps({"version": version}).encode())
        except OSError as e:
            self.store.warn(f"could not record how far the current-state tables are ({e}); "
                            f"the next command checks them all")
