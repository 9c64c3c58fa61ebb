"""Where update files come from: the SOURCE arguments of ``ddcli ingest`` to the objects
they name.

A source is a local path, a local glob (``'data/*.csv'``, ``**`` for any depth), an
``s3://bucket/key`` or an S3 glob (``s3://lake/raw/day=*/*.csv.gz``, ``s3://b/**/*.parquet``).
S3 sources use the settings of S3 stores (endpoint, region, credentials, timeouts:
storage/blobs/s3.py). A glob is matched in the shell's way: ``*`` and ``?`` stay within one
path segment, ``**`` crosses segments, ``[abc]`` is a class, as Python's ``glob`` matches
local files; objects come in sorted order.

Each S3 object carries the version the listing saw (its ETag, read back with If-Match,
storage/files/streams.py), and that URL and version are what the trace records as
ingested (storage/writes/ingest.py), so a glob run again reads only objects it has not seen.
A local file is recognised by its content instead (its hash). An object named by two
sources (overlapping globs) is read once, and a glob never matches the store's own files.
A glob that matches nothing, a missing object or bucket, refused credentials: one line,
and nothing is read.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from storage.errors import UpdateFileError

_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class UpdateObject:
    """One update file: a local path or an ``s3://`` URL, with the object's version."""

    url: str
    size: int | None = None
    etag: str | None = None  # S3: the version read (If-Match); None for local files

    @property
    def on_s3(self) -> bool:
        return self.url.startswith("s3://")

    def version(self) -> str | None:
        """An S3 object's URL and version, ``url#ETag:size``, as the ingested-file record
        keeps it (storage/state/ingested.py); None for a local file, known by its content."""
        if not self.on_s3:
            return None
        return f"{self.url}#{(self.etag or '').strip(chr(34))}:{self.size}"


def expand_sources(sources: list, store: str | None = None) -> list[UpdateObject]:
    """Every object the sources name, in order, each once; ``UpdateObject`` items pass.
    A glob never matches the files of ``store`` (its layers are Parquet files too)."""
    out: dict[str, UpdateObject] = {}
    for source in sources:
        if isinstance(source, UpdateObject):
            found = [source]
        else:
            source = os.fspath(source)
            found = _s3_objects(source, store) if source.startswith("s3://") else _local_objects(source, store)
        for obj in found:
            out.setdefault(obj.url, obj)
    return list(out.values())


def is_glob(source: str) -> bool:
    return bool(_GLOB_CHARS.search(source))


def _local_objects(source: str, store: str | None) -> list[UpdateObject]:
    if not is_glob(source) or os.path.lexists(source):
        return [UpdateObject(source)]  # the reader says if it is missing or not a file
    inside = None if store is None or store.startswith("s3://") else os.path.realpath(store) + os.sep
    paths = sorted(p for p in glob.glob(source, recursive=True)
                   if os.path.isfile(p) and not (inside and os.path.realpath(p).startswith(inside)))
    if not paths:
        raise UpdateFileError(source, "no file matches this glob")
    return [UpdateObject(p) for p in paths]


def _s3_objects(source: str, store: str | None) -> list[UpdateObject]:
    from storage.blobs.resolve import for_path
    bucket, _, key = source[len("s3://"):].partition("/")
    if not bucket:
        raise UpdateFileError(source, "no bucket named (write s3://bucket/key or s3://bucket/prefix/*.csv)")
    blobs = for_path(source)
    blobs.check()  # a missing bucket or refused credentials, said as such
    if not is_glob(key):
        if not key or key.endswith("/"):
            raise UpdateFileError(source, f"names a prefix, not an object; to read the objects under it "
                                          f"use a glob such as {source.rstrip('/')}/*.csv")
        try:
            st = blobs.stat(source)
        except FileNotFoundError:
            raise UpdateFileError(source, f"no such object in bucket {bucket!r}") from None
        return [UpdateObject(source, st.size, st.ident[0])]  # an S3 object's ident is (ETag, mtime)
    literal = _GLOB_CHARS.split(key, 1)[0]
    pattern = glob_pattern(key)
    inside = store.rstrip("/") + "/" if store and store.startswith("s3://") else None
    found = [UpdateObject(url, size, etag) for url, size, etag in blobs.list_objects(f"s3://{bucket}/{literal}")
             if not url.endswith("/") and pattern.fullmatch(url[len(f"s3://{bucket}/"):])
             and not (inside and url.startswith(inside))]
    if not found:
        raise UpdateFileError(source, f"no object matches this glob in bucket {bucket!r}")
    return sorted(found, key=lambda o: o.url)


def glob_pattern(pattern: str) -> re.Pattern:
    """A glob as a regular expression over '/'-separated keys, as Python's ``glob`` matches
    files: ``*`` and ``?`` within a segment, ``**`` across segments (``a/**/b`` also
    matches ``a/b``), ``[...]`` a class (``[!...]`` its complement)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and _class_end(pattern, i) > 0:
            j = _class_end(pattern, i)
            body = pattern[i + 1:j].replace("\\", "\\\\").replace("[", "\\[").replace("^", "\\^")
            if body[0] == "!":
                body = "^" + body[1:]
            out.append("[" + body + "]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.S)


def _class_end(pattern: str, i: int) -> int:
    """Where the class ``[...]`` opened at ``i`` closes (-1: the '[' is a plain character)."""
    j = i + 1
    if pattern[j:j + 1] == "!":
        j += 1
    if pattern[j:j + 1] == "]":
        j += 1
    return pattern.find("]", j)
