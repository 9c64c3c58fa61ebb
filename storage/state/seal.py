"""Sealed traces and the inputs that hold a pipeline back.

A trace whose upper is the *empty* frontier is sealed for all times: every time is
complete, so it never holds back a pipeline that reads it (the pipeline's frontier is the
meet of its inputs' uppers, and the empty frontier is the identity of that meet). That is
what a dimension table wants: ingest it once, ``ddcli advance TRACE --seal``, and joins
with it are complete as far as their other inputs are. Upper only moves forward, so a
sealed trace takes no more updates; a new version of the table is a new trace.
"""

from __future__ import annotations

from storage.errors import StoreError
from storage.lattice import Frontier
from storage.state.trace import Trace


def is_sealed(trace: Trace) -> bool:
    return trace.upper.is_empty()


def check_open(trace: Trace) -> None:
    """Refuse new updates for a sealed trace: one line saying why and what to do."""
    if is_sealed(trace):
        raise StoreError(f"trace {trace.name!r} is sealed for all times (ddcli advance {trace.name} --seal): "
                         f"it takes no more updates; ingest a new version of it into a new trace")


def sealed_frontier(trace: Trace) -> Frontier:
    """The upper of a trace sealed for all times: the empty frontier."""
    return Frontier.empty(trace.d)


def hold_back(uppers: dict[str, Frontier]) -> dict[str, tuple[bool, int | None]]:
    """Which inputs of a pipeline hold it back, and by how much.

    The pipeline is complete up to the meet of its inputs' uppers, so an input holds it
    back when another input's upper is strictly ahead of its own. For one-dimensional
    times ``by`` is the distance to the furthest (unsealed) upper ahead; with tuple times
    there is no single distance and ``by`` is None.
    """
    out = {}
    for name, u in uppers.items():
        ahead = [v for n, v in uppers.items()
                 if n != name and not v.is_empty() and v != u and v.dominates(u)]
        by = None
        if ahead and u.d == 1 and not u.is_empty():
            by = max(v.elements[0][0] for v in ahead) - u.elements[0][0]
        out[name] = (bool(ahead), by)
    return out

