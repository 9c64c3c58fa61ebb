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


def own_copy(state: dict) -> dict:
    """A copy of a JSON state its holder may change at its first two levels (a version's
    keys, its traces' and pipelines' maps). Nothing deeper is copied: no code changes a
    state's nested objects in place (:func:`apply` copies the path it changes, a state is
    read into objects of its own), so a copy of a store's hundreds of traces costs a few
    dictionaries, not a deep copy of each commit's state."""
    return {k: dict(v) if isinstance(v, dict) else v for k, v in state.items()}


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
    """The state ``delta`` turns ``state`` into: ``state`` is left as it is, and the new
    one shares every object the delta does not change (each object on a changed path is
    copied once). Raises ``KeyError`` or ``TypeError`` when the delta does not fit the
    state (a broken chain)."""
    out = dict(state)
    copied = {id(out)}
    for path in delta.get("del", []):
        parent = _walk(out, path, copied)
        del parent[path[-1]]
    for path, value in delta.get("set", []):
        parent = _walk(out, path, copied)
        parent[path[-1]] = value
    return out


def _walk(state: dict, path: list, copied: set[int]) -> dict:
    """The object holding ``path``'s last key, each object on the way copied (once)."""
    if not path:
        raise KeyError("empty path in a metadata delta")
    d = state
    for k in path[:-1]:
        child = d[k]
        if isinstance(child, dict) and id(child) not in copied:
            child = d[k] = dict(child)
            copied.add(id(child))
        d = child
    if not isinstance(d, dict):
        raise TypeError(f"metadata delta path {path!r} does not lead to an object")
    return d
