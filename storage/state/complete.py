"""Is the collection at a time complete? Only at times not beyond the trace's upper.

Updates may still arrive at any time beyond the upper, so the collection there is a
partial answer that can change. ``ddcli query --as-of T`` still answers (exit 0) but says
so on stderr, or refuses with ``--strict``.
"""

from __future__ import annotations

from storage.lattice import Time, format_frontier, format_time
from storage.state.trace import Trace


def incomplete(trace: Trace, t: Time) -> str | None:
    """Why the collection of ``trace`` at ``t`` is not complete yet, or None when it is."""
    if not trace.upper.beyond(t):
        return None
    return (f"time {format_time(t)} is not complete yet: trace {trace.name!r} has upper "
            f"{format_frontier(trace.upper)}, so updates at {format_time(t)} may still arrive and the "
            f"answer may change")
