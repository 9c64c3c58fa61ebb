"""The newest commits of a store, as a report shows them: when, what changed, and how far
each pipeline was behind its inputs after each (storage/state/lag.py).

Read from the versions the log still keeps (old ones are pruned behind a retention
window, storage/log/commit.py), so the figures reach as far back as the log does.
"""

from __future__ import annotations

from datetime import datetime, timezone

from storage.state import changes
from storage.state.lag import lag_rows
from storage.state.transitions import State


def recent_commits(log, n: int = 30) -> list[dict]:
    """The newest ``n`` commits, newest first: ``version``, ``when`` (ISO 8601, UTC),
    ``change`` (one line) and ``lag`` (pipeline -> sealed input updates its next run reads)."""
    found = log.newest(n + 1)  # one more: the state before the oldest shown
    out = []
    before = State.from_json(0, None) if found and found[0][0] == 1 else None  # version 1: from an empty store
    for i, (version, when, raw) in enumerate(found):
        state = State.from_json(version, raw)
        if i > 0 or len(found) <= n:
            lag: dict[str, int] = {}
            for r in lag_rows(state):
                lag[r["pipeline"]] = lag.get(r["pipeline"], 0) + r["updates"]
            stamp = datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds") if when else None
            out.append({"version": version, "when": stamp, "change": changes.describe(before, state), "lag": lag})
        before = state
    return out[::-1]
