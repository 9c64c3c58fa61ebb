"""The commit protocol: a versioned metadata log with put-if-absent commits.

Version ``N`` of the store's metadata is the file ``log/v{N}.json`` holding the whole
state (every trace and pipeline). A commit writes the next version to a temporary file,
fsyncs it and *hard-links* it to its final name: ``link`` fails if the name exists, so of
two writers racing for version ``N+1`` exactly one wins, and a crash at any point leaves
version ``N`` as the newest complete one. Readers take the newest version and never lock.

Every change of durable state is a pure function ``old state -> new state`` applied by
:func:`Log.commit`; nothing else writes metadata. When another writer got in first the
function is applied again to the newer state; it raises :class:`Conflict` when what it
read no longer holds.

Every version carries the random ``commit_id`` of the commit that wrote it. A link that
ends ambiguously (``EEXIST`` after a network filesystem retried a link that had in fact
succeeded) is resolved by reading the version back: if it holds our commit id, the
commit won. Without that, the writer would treat its own version as a rival's, and
clean up files its own committed version references.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from typing import Callable

from storage import faults
from storage.integrity import CorruptionError

_VERSION_RE = re.compile(r"^v(\d{12})\.json$")


class Conflict(Exception):
    """Another writer changed what this change depends on; nothing was written. Safe to retry."""


class Log:
    def __init__(self, root: str):
        self.dir = os.path.join(root, "log")
        self.damaged: list[int] = []  # unreadable versions newer than the last one read

    def exists(self) -> bool:
        return os.path.isdir(self.dir)

    def _versions(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _VERSION_RE.match(n)))

    def path(self, version: int) -> str:
        return os.path.join(self.dir, f"v{version:012d}.json")

    def _read(self, version: int) -> dict | None:
        """The state of ``version``, or None when the file is unreadable (emptied by
        :meth:`prune`, or damaged)."""
        try:
            with open(self.path(version), encoding="utf-8") as fh:
                state = json.load(fh)
            return state if isinstance(state, dict) else None
        except (FileNotFoundError, ValueError):  # JSONDecodeError and UnicodeDecodeError
            return None

    def latest(self) -> tuple[int, dict | None]:
        """The newest committed version and its state (``(0, None)`` for a new store).

        A newest version that stays unreadable is damaged (a commit writes it whole before
        it gets its name): the newest intact version before it is returned instead, and
        :attr:`damaged` names the damaged ones (:meth:`commit` then refuses to write).
        """
        for _ in range(100):
            versions = self._versions()
            if not versions:
                return 0, None
            v = versions[-1]
            state = self._read(v)
            if state is not None:
                self.damaged = []
                return v, state
            # only a version that a newer one superseded is ever emptied (see prune):
            # look again and take the newer one
            time.sleep(0.001)
            if self._versions()[-1] != v:
                continue
            for older in reversed(versions[:-1]):
                state = self._read(older)
                if state is not None:
                    self.damaged = [x for x in versions if x > older]
                    return older, state
            raise CorruptionError(f"no metadata version in {self.dir} can be read (the newest, "
                                  f"{self.path(v)}, is damaged); the store cannot be opened")
        raise Conflict(f"cannot read the newest metadata version in {self.dir}; retry")

    def damage_note(self) -> str | None:
        """What to do about damaged newest versions found by the last :meth:`latest`."""
        if not self.damaged:
            return None
        first = self.path(self.damaged[0])
        return (f"metadata version {first} is damaged (unreadable); reading the previous intact version "
                f"{self.damaged[0] - 1}. To write again, move the damaged file(s) aside after checking them, "
                f"e.g. mv {first} {first}.damaged")

    def commit(self, change: Callable[[dict | None], dict], *, retries: int = 20) -> tuple[int, dict]:
        """Apply ``change`` to the newest state and commit the result as the next version.

        ``change`` must be pure: it may be called again on a newer state when another
        writer won the race. It raises :class:`Conflict` when it cannot apply any more.
        """
        from storage.layer import ensure_dir
        ensure_dir(self.dir)
        for attempt in range(retries):
            version, state = self.latest()
            if self.damaged:
                raise CorruptionError(f"nothing was written: {self.damage_note()}")
            new_state = change(state)
            new_state["version"] = version + 1
            new_state["commit_id"] = uuid.uuid4().hex
            if self._put_if_absent(version + 1, new_state):
                return version + 1, new_state
            time.sleep(0.005 * (attempt + 1))
        raise Conflict("the store kept changing under this command; try again")

    def _put_if_absent(self, version: int, state: dict) -> bool:
        tmp = os.path.join(self.dir, f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(state, fh, separators=(",", ":"))
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            try:
                os.unlink(tmp)  # e.g. a full disk: leave no partial version behind
            except OSError:
                pass
            raise
        try:
            faults.point("log.before_link")
            os.link(tmp, self.path(version))
        except FileExistsError:
            if not self._holds_commit(version, state.get("commit_id")):
                return False
        finally:
            os.unlink(tmp)
        _fsync_dir(self.dir)
        faults.point("log.after_link")
        return True

    def _holds_commit(self, version: int, commit_id: str | None) -> bool:
        """True when version ``version`` on disk was written by the commit ``commit_id``."""
        if commit_id is None:
            return False
        try:
            with open(self.path(version), encoding="utf-8") as fh:
                return json.load(fh).get("commit_id") == commit_id
        except (FileNotFoundError, json.JSONDecodeError):
            return False

    def live_versions(self, since: float) -> list[int]:
        """Versions that were the newest at some moment at or after ``since`` (epoch seconds).

        Version ``v`` was the newest from its own commit until the commit of the next one,
        so it counts when the *next* version was committed at or after ``since``; the
        newest version always counts. A reader that took a version less than a grace
        period ago still finds every file it names.
        """
        versions = self._versions()
        live = []
        for i, v in enumerate(versions):
            if i == len(versions) - 1:
                live.append(v)
                continue
            try:
                if os.stat(self.path(versions[i + 1])).st_mtime >= since:
                    live.append(v)
            except FileNotFoundError:
                live.append(v)
        return live

    def prune(self, keep_after: float) -> int:
        """Empty old versions: those that stopped being the newest before ``keep_after``.

        Old versions are truncated, not removed, so their names stay taken and no stale
        writer can ever commit under them.
        """
        live = set(self.live_versions(keep_after))
        pruned = 0
        for v in self._versions():
            if v in live:
                continue
            p = self.path(v)
            try:
                if os.stat(p).st_size:
                    os.truncate(p, 0)
                    pruned += 1
            except FileNotFoundError:
                continue
        return pruned

    def recent_states(self, newer_than: float) -> list[dict]:
        """States of the versions that were the newest at some moment after ``newer_than``
        (for garbage collection: a reader may still be reading any of them)."""
        out = []
        for v in self.live_versions(newer_than):
            try:
                with open(self.path(v), encoding="utf-8") as fh:
                    out.append(json.load(fh))
            except (FileNotFoundError, json.JSONDecodeError):
                continue
        return out

    def stray_tmp_files(self) -> list[str]:
        try:
            return [os.path.join(self.dir, n) for n in os.listdir(self.dir) if n.startswith(".tmp-")]
        except FileNotFoundError:
            return []


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
