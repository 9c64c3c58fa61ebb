"""What the commits of one command span in ddcli's log, for the tables that follow it.

The Delta logs of the traces (storage/lake/follow.py) and the current-state tables of the
outputs (storage/lake/outputs.py) are written after ddcli's own commits, from the same
account of them: the log version before the command's first commit (``start``), its newest
one (``end``, with that version's state), whether another writer committed in between
(``gap``: then the follower checks every table) and each trace the commits changed.
"""

from __future__ import annotations


class CommitSpan:
    """The commits of one command as a follower of the log notes them; a subclass says
    which traces it follows (:meth:`follows`) and what about them it shows (``watched``)."""

    watched: tuple[str, ...] = ()  # the trace metadata a follower's table shows

    def __init__(self, store):
        self.store = store
        self._reset()

    def _reset(self) -> None:
        self.start: int | None = None  # the version before this command's first commit
        self.end = 0  # this command's newest version
        self.end_state: dict | None = None
        self.changed: dict[str, bool] = {}  # trace -> its since or upper moved
        self.old: dict[str, dict | None] = {}  # trace -> its metadata before this command changed it
        self.gap = False  # another writer committed between our commits

    def follows(self, name: str, before: dict | None, after: dict | None) -> bool:
        """Whether this follower writes a table for trace ``name`` (``None``: absent)."""
        return True

    def committed(self, before: dict | None, after: dict) -> None:
        """Note one commit of ddcli's log: ``before`` the state it changed, ``after`` the new one."""
        old_version = before.get("version", 0) if before else 0
        if self.start is None:
            self.start = old_version
        elif old_version != self.end:
            self.gap = True
        self.end, self.end_state = after["version"], after
        old, new = (before or {}).get("traces", {}), after.get("traces", {})
        for name in set(old) | set(new):
            a, b = old.get(name), new.get(name)
            if not self.follows(name, a, b):
                continue
            if a is None or b is None or any(a.get(k) != b.get(k) for k in self.watched):
                moved = a is None or b is None or a.get("since") != b.get("since") or a.get("upper") != b.get("upper")
                self.changed[name] = self.changed.get(name, False) or moved
                self.old.setdefault(name, a)
