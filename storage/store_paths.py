"""Is a path inside a store, or another name of one of its files? Outputs must never land there.

A store is recognised by its metadata log (``log/v000000000001.json`` …, see
storage/log/commit.py), whatever ``--store`` a command was given: ``query --output`` onto a
layer, a log version or any new file inside a store is refused, for every store, local
(:func:`enclosing_store`) or on an object store (:func:`enclosing_object_store`).
Symbolic links are resolved first, so a link pointing into a store is refused too. A hard
link has no target to resolve: it is the same file (device and inode) under another name,
found by :func:`same_file_in` among the files of a store.
"""

from __future__ import annotations

import os
import re
import stat

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


def same_file_in(path: str, directory: str) -> str | None:
    """A file under ``directory`` that is the very file ``path`` names (same device and
    inode: a hard link, maybe reached through symbolic links), or None.

    A file with a single link has no other name, so only files linked more than once are
    looked for (a path inside ``directory`` itself is :func:`enclosing_store`'s to refuse).
    """
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2 or os.stat(directory).st_dev != st.st_dev:
            return None
    except OSError:
        return None
    pending = [directory]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                pending.append(e.path)
            elif (e.inode() == st.st_ino and e.is_file(follow_symlinks=False)
                  and e.stat(follow_symlinks=False).st_dev == st.st_dev):
                return e.path
    return None


def enclosing_object_store(url: str) -> str | None:
    """The store on an object store whose prefix holds the key of ``url``
    (``s3://bucket/key``), or None: one small listing per level of the key."""
    from storage.blobs.resolve import for_path
    blobs = for_path(url)
    bucket, _, key = url[len("s3://"):].partition("/")
    parts = key.split("/")[:-1]
    for n in range(len(parts), -1, -1):
        root = "/".join([f"s3://{bucket}"] + parts[:n])
        if blobs.any_under(f"{root}/log/v0"):
            return root
    return None
