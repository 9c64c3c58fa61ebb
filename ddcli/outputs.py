"""Where a command's output goes: stdout, a local file or an ``s3://`` object, never into a store.

Every command writes through :func:`opened` (ddcli/render.py formats what goes in), after
:func:`check` refused, before the command did any work, a target it must not write. A
new command (``changes``, say) gets all of this by passing its ``--output`` to
:mod:`ddcli.render`, or to :func:`check` and :func:`opened` directly.

* **A local file is never written in place.** The output goes to a temporary file in the
  target's folder, is fsynced and renamed over the target. A rename replaces the name, not
  the bytes behind it: a file the target was hard-linked to keeps its bytes, and a command
  that fails or is killed leaves the previous file (and no half output). A symbolic link is
  followed: the file it points to is replaced and the link keeps pointing at it. A target
  that is not a regular file (``/dev/stdout``, a named pipe) has no bytes to lose and is
  written as it is.
* **An object** ``s3://bucket/key`` is written with the endpoint and credentials settings
  of S3 stores (storage/blobs/s3.py): the output is spooled to a local temporary file and
  sent as one ``PutObject`` of the complete object, which appears whole or not at all.
* **Refused** (one line, exit 2, nothing written): a target inside a store (under a folder
  holding a store's log, through a symbolic link, or under an S3 store's prefix); the same
  file (device and inode) as a file of the command's store, whatever its name; a directory;
  a missing folder; a bucket that does not exist or credentials the object store refuses.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
import uuid
from typing import IO, Iterator


class OutputError(Exception):
    """A target the output may not or cannot be written to (one line, exit code 2)."""


def _is_object(output: str) -> bool:
    return output.startswith("s3://")


def check(output: str | None, option: str = "--output", store: str | None = None) -> None:
    """Refuse ``output`` before the command does any work (see the module docstring).
    ``store`` is the command's own store, whose files may have other names outside it."""
    if output is None:
        return
    if _is_object(output):
        _check_object(output, option)
    else:
        _check_file(output, option, store)


def _check_file(output: str, option: str, store: str | None) -> None:
    from storage.store_paths import enclosing_store, same_file_in
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise OutputError(f"cannot write {option} {output}: no directory {parent}")
    if os.path.isdir(output):
        raise OutputError(f"cannot write {option} {output}: it is a directory")
    inside = enclosing_store(output)
    if inside is not None:
        raise OutputError(f"cannot write {option} {output}: it is inside the store {inside} "
                          f"(whose files only ddcli writes); write it outside the store")
    if store is not None and not _is_object(store):
        twin = same_file_in(output, store)
        if twin is not None:
            raise OutputError(f"cannot write {option} {output}: it is the file {os.path.relpath(twin, store)} "
                              f"of the store {os.path.realpath(store)} under another name (a hard link); "
                              f"write it elsewhere")


def _check_object(output: str, option: str) -> None:
    from storage.errors import StoreUnreachable
    from storage.store_paths import enclosing_object_store
    bucket, _, key = output[len("s3://"):].partition("/")
    if not bucket or not key or key.endswith("/"):
        raise OutputError(f"cannot write {option} {output}: name an object, s3://bucket/key")
    try:
        _object_store(output).check()
        inside = enclosing_object_store(output)
    except StoreUnreachable as e:
        raise OutputError(f"cannot write {option} {output}: {e}") from None
    if inside is not None:
        raise OutputError(f"cannot write {option} {output}: it is inside the store {inside} "
                          f"(whose objects only ddcli writes); write it outside the store")


def _object_store(url: str):
    from storage.blobs.resolve import for_path
    return for_path(url)


@contextlib.contextmanager
def opened(output: str | None, *, binary: bool = False) -> Iterator[IO]:
    """A file to write the output into: stdout (None), a local path or an ``s3://`` URL.

    The output lands only when the ``with`` block ends without an error; an error inside
    it leaves the target as it was. Text is UTF-8 with the newlines written as given."""
    if output is None:
        sys.stdout.flush()
        yield sys.stdout.buffer if binary else sys.stdout
        sys.stdout.flush()
    elif _is_object(output):
        with _object(output, binary) as fh:
            yield fh
    else:
        with _file(output, binary) as fh:
            yield fh


def _open(path: str, mode: str, binary: bool, output: str) -> IO:
    try:
        if binary:
            return open(path, mode + "b")
        return open(path, mode, encoding="utf-8", newline="")
    except OSError as e:
        raise OutputError(f"cannot write --output {output}: {e.strerror or e}") from None


@contextlib.contextmanager
def _file(output: str, binary: bool) -> Iterator[IO]:
    real = os.path.realpath(output)
    try:
        old = os.stat(real)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        with _open(real, "w", binary, output) as fh:  # a device or a pipe: nothing to replace
            yield fh
        return
    folder, name = os.path.split(real)
    tmp = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
    fh = _open(tmp, "x", binary, output)
    try:
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _object(output: str, binary: bool) -> Iterator[IO]:
    from storage.errors import Ambiguous, StoreUnreachable
    fd, spool = tempfile.mkstemp(prefix="ddcli-output-")
    os.close(fd)
    try:
        with _open(spool, "w", binary, output) as fh:
            yield fh
        with open(spool, "rb") as whole:
            try:
                _object_store(output).upload(output, whole)
            except (StoreUnreachable, Ambiguous) as e:
                raise OutputError(f"cannot write --output {output}: {e}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(spool)
