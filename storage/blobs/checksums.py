"""The checksums a layer file is recorded with at commit: the SHA-256 of its bytes and of
its Parquet footer (the last ``8 + footer length`` bytes: schema, row group offsets,
min/max statistics).

Pure functions over bytes and open file handles: where the file lives is the caller's
business (a backend hashes what it just wrote through its own handle; storage/integrity.py
hashes what a reader is about to read).
"""

from __future__ import annotations

import hashlib
import io
import struct

CHUNK = 1 << 22  # bytes read at a time while hashing


def sha256_of(fh) -> str:
    """The SHA-256 (hex) of everything ``fh`` holds from its current position."""
    h = hashlib.sha256()
    while chunk := fh.read(CHUNK):
        h.update(chunk)
    return h.hexdigest()


def footer_sha256_of(fh, size: int) -> str | None:
    """The SHA-256 of a Parquet file's footer and its 8-byte trailer (``fh`` holds the
    file, ``size`` bytes long); None if the bytes end in no Parquet footer."""
    if size < 12:
        return None
    fh.seek(size - 8)
    trailer = fh.read(8)
    (length,) = struct.unpack("<I", trailer[:4])
    if trailer[4:] != b"PAR1" or length + 8 > size:
        return None
    fh.seek(size - 8 - length)
    return hashlib.sha256(fh.read(length + 8)).hexdigest()


def handle_checksums(fh) -> dict:
    """``{"sha256": …, "footer_sha256": …}`` of the whole file ``fh`` holds (hex digests)."""
    fh.seek(0, 2)
    size = fh.tell()
    fh.seek(0)
    return {"sha256": sha256_of(fh), "footer_sha256": footer_sha256_of(fh, size)}


def bytes_checksums(data: bytes) -> dict:
    """:func:`handle_checksums` of a file's bytes held in memory (an object-store write)."""
    return handle_checksums(io.BytesIO(data))
