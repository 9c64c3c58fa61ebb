"""The bytes of one update file, streamed whatever its size: a local file or an S3 object,
plain or compressed (``.gz``, ``.zst``), hashed as they arrive.

Nothing here holds a whole file. CSV and JSON Lines readers pull blocks through a
:class:`ByteStream` (storage/files/sources.py); Parquet, which needs random access, is read
in place when it is a plain local file and otherwise spooled to a temporary local file
first (:func:`local_parquet`: disk, not memory). Decompression is pyarrow's (gzip with
several members, zstd with several frames; a truncated stream is an error, never a short
file). The hash is of the bytes as stored (compressed, if they are) and identifies a local
file's content in the ingested-file record (storage/state/ingested.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import time
import weakref
from typing import Callable, Iterator

import pyarrow as pa

from storage.errors import ObjectChanged, UpdateFileError, one_line
from storage.files.locations import UpdateObject

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_PIECE = 1 << 20  # bytes moved at a time where nothing parses them (hashing, spooling)


def compression_of(url: str) -> str | None:
    return COMPRESSIONS.get(os.path.splitext(url)[1].lower())


def without_compression(url: str) -> str:
    """The name whose extension says the format: ``a.csv.gz`` -> ``a.csv``."""
    root, ext = os.path.splitext(url)
    return root if ext.lower() in COMPRESSIONS else url


class _Hashed:
    """A raw byte stream (a local file, an S3 response body), hashed as it is read."""

    closed = False

    def __init__(self, raw):
        self.raw = raw
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n if n is not None and n >= 0 else -1)
        self.sha.update(data)
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True

    def finish(self) -> str:
        """The hash of every byte, after reading what the decoder left unread."""
        while self.read(_PIECE):
            pass
        return self.sha.hexdigest()


_READER_TAIL = 0.05  # seconds a failed reader's read-ahead thread is given after letting go


class _Handle:
    """What pyarrow holds of a :class:`ByteStream`: its methods, and nothing that anyone
    else references, so that a weak reference to it tells when pyarrow let go."""

    __slots__ = ("_stream", "__weakref__")

    def __init__(self, stream: "ByteStream"):
        self._stream = stream

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class ByteStream:
    """The (decompressed) bytes of one update file, as a Python file object that pyarrow
    reads through ``pa.PythonFile``. :meth:`head` looks at the start without consuming it;
    ``quotes`` counts the ``"`` characters read (an odd count: a quote never closed).

    pyarrow's streaming CSV reader calls :meth:`read` from a read-ahead thread of its own,
    which goes on reading after the reader stopped (an error in the first block of a
    20 GB file): :meth:`stop` ends the stream for it and waits until that thread is out,
    so it never calls into Python while the process exits (which aborts the process)."""

    closed = False

    def __init__(self, obj: UpdateObject, raw):
        self._lock = threading.Condition()
        self._stopped = False
        self._reading = 0  # reads in progress
        self._ended = False  # a read returned the end of the stream
        self.path = obj.url
        self._raw = raw
        self._hashed = _Hashed(raw)
        codec = compression_of(obj.url)
        inner = pa.PythonFile(self._hashed, mode="r")
        self._decoded = pa.CompressedInputStream(inner, codec) if codec else inner
        self._codec = codec
        self._head = b""
        self._head_used = 0
        self.quotes = 0
        self._handles: list[weakref.ref] = []  # what pyarrow was given to read (python_file)

    def _read_decoded(self, n: int) -> bytes:
        try:
            return self._decoded.read(n) if n >= 0 else self._decoded.read()
        except (OSError, pa.ArrowException) as e:
            if self._codec is None:
                raise
            raise UpdateFileError(self.path, f"is not valid {self._codec} data ({one_line(str(e))[:120]})") from None

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes (fewer if the file is shorter), still to be read."""
        while len(self._head) < n:
            more = self._read_decoded(n - len(self._head))
            if not more:
                break
            self._head += more
        return self._head[:n]

    def read(self, n: int = -1) -> bytes:
        with self._lock:
            if self._stopped:
                self._ended = True
                self._lock.notify_all()
                return b""
            self._reading += 1
        try:
            data = self._read(n)
        finally:
            with self._lock:
                self._reading -= 1
                self._lock.notify_all()
        if not data and n != 0:
            self._ended = True
        return data

    def stop(self, quiet: float = 1.0, most: float = 10.0) -> None:
        """End the stream for every later read, and return once no read is in progress and
        the read-ahead thread was told the stream ended (or stayed away for ``quiet``
        seconds: it waits, its queue of read-ahead blocks full, for a consumer that will not
        come; a thread that is only slow, on a loaded machine, comes back within it)."""
        end = time.monotonic() + most
        with self._lock:
            self._stopped = True
            while not self._ended and time.monotonic() < end:
                if not self._lock.wait_for(lambda: self._reading == 0, timeout=end - time.monotonic()):
                    break
                if not self._lock.wait_for(lambda: self._ended or self._reading > 0, timeout=quiet):
                    break

    def python_file(self) -> pa.PythonFile:
        """This stream for pyarrow to read; :meth:`wait_released` tells when it let go."""
        handle = _Handle(self)
        self._handles.append(weakref.ref(handle))
        return pa.PythonFile(handle, mode="r")

    def wait_released(self, most: float = 10.0, tail: float = _READER_TAIL) -> None:
        """Return once pyarrow let go of every :meth:`python_file` (or after ``most``
        seconds), and its read-ahead thread had a moment to finish. After a reader failed
        (an over-long line in the first block), that thread goes on in C++ for a while: should
        the process exit meanwhile, it aborts ("terminate called without an active
        exception", exit -6 instead of the refusal's 2: 1 in 7 refusals; none in 40 with this)."""
        end = time.monotonic() + most
        while any(h() is not None for h in self._handles) and time.monotonic() < end:
            time.sleep(0.002)
        time.sleep(tail)

    def _read(self, n: int) -> bytes:
        n = -1 if n is None else n
        data = b""
        if self._head_used < len(self._head):
            end = len(self._head) if n < 0 else min(len(self._head), self._head_used + n)
            data = self._head[self._head_used:end]
            self._head_used = end
        if n < 0 or len(data) < n:
            data += self._read_decoded(n - len(data) if n >= 0 else -1)
        self.quotes += data.count(b'"')
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True

    def pieces(self, size: int) -> Iterator[bytes]:
        while True:
            data = self.read(size)
            if not data:
                return
            yield data

    def finish(self) -> str:
        """The sha256 of the file's stored bytes (call once everything was read)."""
        return self._hashed.finish()


@contextlib.contextmanager
def open_stream(obj: UpdateObject) -> Iterator[ByteStream]:
    """A :class:`ByteStream` of ``obj``; a missing or unreadable file is one line."""
    raw = _open_raw(obj)
    try:
        yield ByteStream(obj, raw)
    finally:
        raw.close()


def _open_raw(obj: UpdateObject):
    if obj.on_s3:
        from storage.blobs.resolve import for_path
        try:
            return for_path(obj.url).open_object(obj.url, obj.etag)
        except FileNotFoundError:
            raise UpdateFileError(obj.url, "the object is gone (it was deleted after it was listed)") from None
        except ObjectChanged:
            raise UpdateFileError(obj.url, "the object was replaced after it was listed; run the ingest "
                                           "again to read its new version") from None
    try:
        if os.path.isdir(obj.url):
            raise IsADirectoryError(21, "Is a directory")
        return open(obj.url, "rb")
    except OSError as e:
        raise UpdateFileError(obj.url, f"cannot read the file: {e.strerror or e}") from None


@contextlib.contextmanager
def local_parquet(obj: UpdateObject, most: int, too_big: Callable[[int], Exception]) -> Iterator[tuple[str, str]]:
    """``(local path, sha256 of the stored bytes)`` of a Parquet file: the file itself when
    it is a plain local file, else a temporary copy of its decompressed bytes. A file of
    more than ``most`` bytes (its size known before reading: a local file, a listed
    object) is ``too_big(size)`` before it is hashed or copied; a copy stops there."""
    size = obj.size if obj.on_s3 else _local_size(obj.url)
    if compression_of(obj.url) is None and size is not None and size > most:
        raise too_big(size)
    if not obj.on_s3 and compression_of(obj.url) is None:
        with open_stream(obj) as stream:
            yield obj.url, stream.finish()
        return
    folder = tempfile.mkdtemp(prefix="ddcli-update-")
    try:
        copy = os.path.join(folder, "update.parquet")
        with open_stream(obj) as stream, open(copy, "wb") as out:
            copied = 0
            while piece := stream.read(_PIECE):
                copied += len(piece)
                if copied > most:
                    raise too_big(copied)
                out.write(piece)
            digest = stream.finish()
        yield copy, digest
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _local_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None  # the reader says what is wrong with it
