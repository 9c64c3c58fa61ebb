"""The ingested-file record: which update files a trace already took.

Re-ingesting a file is a no-op, so a scheduler can simply retry. The record maps each
file's signature (content hash, plus ``@time`` when ``--time`` gave one) to the order it
was ingested in, and keeps only the newest :data:`WINDOW` signatures per trace: the
record, and so every checkpoint of the metadata log, stays bounded however many files a
trace takes over months. An object, not a list, so a commit's delta adds and drops single
keys (storage/log/delta.py).

A file older than the window is no longer recognised. With ``d = 1`` (and whenever its
times are sealed) re-ingesting it is still refused, as times not beyond the upper; only a
file whose times are all still beyond the upper (``d >= 2`` without ``--upper``, ``--time``
ahead of the upper) would be taken again once more than :data:`WINDOW` newer files came.
"""

from __future__ import annotations

WINDOW = 1000


def from_json(v) -> dict[str, int]:
    """The record as stored; a list (stores written before the window existed) becomes
    an object numbered in its order, trimmed to the window."""
    if isinstance(v, dict):
        return {str(k): int(n) for k, n in v.items()}
    return trim({str(s): i for i, s in enumerate(v or [])})


def add(record: dict[str, int], sigs: list[str]) -> dict[str, int]:
    """A new record with ``sigs`` remembered as the newest, trimmed to the window."""
    out = dict(record)
    n = max(out.values(), default=-1)
    for s in sigs:
        n += 1
        out[s] = n
    return trim(out)


def trim(record: dict[str, int]) -> dict[str, int]:
    if len(record) <= WINDOW:
        return record
    cut = sorted(record.values())[-WINDOW]
    return {s: n for s, n in record.items() if n >= cut}


def forgotten_note(record: dict[str, int], path: str) -> str:
    """A hint for a refused file, when the record is full (it may be an old file)."""
    if len(record) < WINDOW:
        return ""
    return (f" (if {path} was ingested before, it is older than the last {WINDOW} files "
            f"the trace remembers; it is refused all the same)")
