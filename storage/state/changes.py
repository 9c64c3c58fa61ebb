"""What a commit changed, in words: the difference between two states of the store.

The metadata log keeps states, not the commands that made them; a report of recent
commits reads what changed from two consecutive states: a pipeline that ran (its run
number moved), a pipeline dropped, traces created or removed, and for every other trace
the rows its new layers brought, layers merged, its upper, since and holds moved. Pure:
two :class:`~storage.state.transitions.State` values in, one line out.
"""

from __future__ import annotations

from storage.lattice import format_frontier

SHOWN = 4  # trace changes named in one line; the rest are counted


def describe(old, new) -> str:
    """One line saying what turned state ``old`` (None: an empty store) into ``new``."""
    if old is None:
        return "the oldest version kept: " + _count(new)
    heads = _pipelines(old, new)
    bits = []
    for name in sorted(set(old.traces) | set(new.traces)):
        b = _trace(name, old.traces.get(name), new.traces.get(name))
        if b:
            bits.append(b)
    shown = bits[:SHOWN] + ([f"{len(bits) - SHOWN} more traces"] if len(bits) > SHOWN else [])
    text = "; ".join(heads) if heads else ""
    if shown:
        text = f"{text}: {', '.join(shown)}" if text else ", ".join(shown)
    return text or "no change to traces or pipelines"


def _count(s) -> str:
    traces, pipelines = len([n for n in s.traces if "." not in n]), len(s.pipelines)
    return f"{traces} trace{'s' if traces != 1 else ''}, {pipelines} pipeline{'s' if pipelines != 1 else ''}"


def _pipelines(old, new) -> list[str]:
    heads = []
    for name in sorted(set(old.pipelines) | set(new.pipelines)):
        o, n = old.pipelines.get(name), new.pipelines.get(name)
        if n is None:
            heads.append(f"drop pipeline {name}")
        elif o != n and isinstance(n, dict):
            runs = n.get("runs")
            before = o.get("runs") if isinstance(o, dict) else 0
            heads.append(f"run {runs} of pipeline {name}" if runs != before else f"pipeline {name} changed")
    return heads


def _trace(name: str, o, n) -> str:
    if o is None:
        return f"{name} created" + (f" (+{n.rows():,} rows)" if n.rows() else "")
    if n is None:
        return f"{name} removed"
    if o == n:
        return ""
    bits = []
    old_ids, new_ids = {l.id for l in o.all_layers()}, {l.id for l in n.all_layers()}
    added = [l for l in n.all_layers() if l.id not in old_ids]
    gone = [l for l in o.all_layers() if l.id not in new_ids]
    if added and gone and sum(l.rows for l in gone) >= sum(l.rows for l in added) and n.upper == o.upper:
        bits.append(f"{len(gone)} layers merged into {len(added)}")
    elif added:
        bits.append(f"+{sum(l.rows for l in added):,} rows")
    if n.upper != o.upper:
        bits.append(f"upper {format_frontier(n.upper)}")
    if n.since != o.since:
        bits.append(f"since {format_frontier(n.since)}")
    for h in sorted(set(o.holds) | set(n.holds)):
        if h not in n.holds:
            bits.append(f"released by {h}")
        elif o.holds.get(h) != n.holds[h]:
            bits.append(f"held by {h} at {format_frontier(n.holds[h].since)}")
    return f"{name} {', '.join(bits)}" if bits else f"{name} changed"
