"""Incremental metadata versions: the change between two states, and applying it.

A delta version holds only what a commit changed, so writing it costs the size of the
change, not of the store. States are JSON objects; a delta names paths of object keys:
``{"set": [[path, value], ...], "del": [path, ...]}``. Objects are compared key by key
and recursed into; any other value (a list, a number) is replaced whole, so keep
collections that grow one entry per commit as objects (e.g. a trace's ingested-file
record, storage/state/ingested.py).
"""

from __future__ import annotations

import pickle

# keys that describe a version, not the store's state: never part of a delta
META_KEYS = frozenset({"version", "commit_id", "parent", "checkpoint", "delta"})


def body(doc: dict) -> dict:
    """The state part of a version document (its metadata keys dropped)."""
    return {k: v for k, v in doc.items() if k not in META_KEYS}


def copy_state(state: dict) -> dict:
    """A deep copy of a JSON state (pickle is the fastest deep copy of plain data)."""
    return pickle.loads(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


def diff(old: dict, new: dict) -> dict:
    """The delta that turns state ``old`` into state ``new`` (metadata keys ignored)."""
    sets: list = []
    dels: list = []
    _diff(body(old), body(new), [], sets, dels)
    return {"set": sets, "del": dels}


def _diff(old: dict, new: dict, path: list, sets: list, dels: list) -> None:
    for k, v in new.items():
        if k not in old:
            sets.append([path + [k], v])
            continue
        o = old[k]
        if o == v:
            continue
        if isinstance(o, dict) and isinstance(v, dict):
            _diff(o, v, path + [k], sets, dels)
        else:
            sets.append([path + [k], v])
    for k in old:
        if k not in new:
            dels.append(path + [k])


def apply(state: dict, delta: dict) -> dict:
    """Apply ``delta`` to ``state`` in place and return it. Raises ``KeyError`` or
    ``TypeError`` when the delta does not fit the state (a broken chain)."""
    for path in delta.get("del", []):
        parent = _walk(state, path)
        del parent[path[-1]]
    for path, value in delta.get("set", []):
        parent = _walk(state, path)
        parent[path[-1]] = value
    return state


def _walk(state: dict, path: list) -> dict:
    if not path:
        raise KeyError("empty path in a metadata delta")
    d = state
    for k in path[:-1]:
        d = d[k]
    if not isinstance(d, dict):
        raise TypeError(f"metadata delta path {path!r} does not lead to an object")
    return d
