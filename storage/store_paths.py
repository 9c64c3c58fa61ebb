"""Is a path inside a store? Outputs must never land there.

A store is recognised by its metadata log (``log/v000000000001.json`` …, see
storage/log/commit.py), whatever ``--store`` a command was given: ``query --output`` onto a
layer, a log version or any new file inside a store is refused, for every store.
Symbolic links are resolved first, so a link pointing into a store is refused too.
"""

from __future__ import annotations

import os
import re

_VERSION_RE = re.compile(r"^v\d{12}\.json$")


def is_store(directory: str) -> bool:
    log = os.path.join(directory, "log")
    try:
        return any(_VERSION_RE.match(n) for n in os.listdir(log))
    except OSError:
        return False


def enclosing_store(path: str) -> str | None:
    """The store directory holding ``path`` (or being it), or None."""
    d = os.path.realpath(path)
    if not os.path.isdir(d):
        d = os.path.dirname(d)
    while True:
        if is_store(d):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent
