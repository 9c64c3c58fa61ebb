"""Layer files are what the log says they are, or the reader says the store is damaged.

At commit the log records, for every layer file, its size, the SHA-256 of its bytes and
the SHA-256 of its Parquet footer (the last ``8 + footer length`` bytes: schema, row
group offsets, min/max statistics). Layers are written with Parquet page checksums
(CRC32 of every data page).

* **Every read** (:func:`check_read`): the file exists and has the recorded size and
  footer (a ``stat`` and a few kilobytes), then its whole-file SHA-256 (about 1.5 GB/s
  on one core), once per process and file version. On an object store the file is
  fetched once per process into a local copy, hashed as it arrives, and readers read
  that copy: the bytes checked are the bytes read. The hash is needed because DuckDB
  2.0 verifies no page checksums: flipping one byte in each of 40 places of a 100 kB
  layer gave 29 silently wrong ``query`` answers with size and footer checked alone.
* **Every pyarrow read** (merges, seals, ``ddcli check``) verifies the page checksums
  too, and so does Spark (``parquet.page.verify-checksum.enabled``).
* **``ddcli check``** (:func:`check_full`): all of the above plus the row count.

Layers written before checksums were recorded have none: only their size is checked.
Damage is a :class:`CorruptionError` (exit code 5): retrying cannot help, unlike a
conflict (exit 3).
"""

from __future__ import annotations

from storage.blobs.checksums import footer_sha256_of, sha256_of
from storage.blobs.resolve import for_path, read_table
from storage.errors import CorruptionError


def footer_sha256(path: str) -> str | None:
    """SHA-256 of the Parquet footer and its 8-byte trailer; None if there is none."""
    with for_path(path).open_read(path) as fh:
        fh.seek(0, 2)
        return footer_sha256_of(fh, fh.tell())


def _where(trace: str, path: str) -> str:
    return f"layer file {path} of trace {trace!r}"


def _advice() -> str:
    return "the store is damaged; run 'ddcli check' for the full list (retrying will not help)"


def check_cheap(trace: str, path: str, lf) -> None:
    """Size and footer against the log's record of ``lf`` (a LayerFile)."""
    try:
        size = for_path(path).stat(path).size
    except FileNotFoundError:
        raise CorruptionError(f"{_where(trace, path)} is missing although the newest version of the "
                              f"store refers to it; {_advice()}") from None
    _check_size_and_footer(trace, path, lf, size, path)


def _check_size_and_footer(trace: str, path: str, lf, size: int, footer_of: str) -> None:
    """``path``'s size and the footer of the file holding its bytes (itself or a local copy)."""
    if size != lf.bytes:
        raise CorruptionError(f"{_where(trace, path)} has {size:,} bytes, the log recorded {lf.bytes:,}; "
                              f"{_advice()}")
    if lf.footer_sha256 is not None and footer_sha256(footer_of) != lf.footer_sha256:
        raise CorruptionError(f"{_where(trace, path)}: its Parquet footer differs from the checksum "
                              f"recorded at commit; {_advice()}")


def _check_sha(trace: str, path: str, lf, sha: str) -> None:
    if lf.sha256 is not None and sha != lf.sha256:
        raise CorruptionError(f"{_where(trace, path)}: its SHA-256 differs from the one recorded at commit; "
                              f"{_advice()}")


_verified: dict[str, tuple] = {}  # path -> (inode, size, mtime, ctime) whose hash matched


def forget_verified() -> None:
    """Forget which files this process has checked: the next read hashes them again, as a
    new process would."""
    _verified.clear()


def check_read(trace: str, path: str, lf) -> str:
    """What every read checks: :func:`check_cheap`, then the whole-file SHA-256; both
    skipped when this process already verified this very file (same identity and change
    stamp: inode, size, mtime and ctime, which any write changes). A missing file is a
    CorruptionError. Returns the path readers read: ``path`` itself, or where the storage
    reads through a local copy (an object store, see :meth:`Blobs.local_copy`) that copy,
    checked from the very bytes it holds, so a layer is fetched once and never trusted
    unhashed."""
    blobs = for_path(path)
    try:
        copy = blobs.local_copy(path)
    except FileNotFoundError:
        raise CorruptionError(f"{_where(trace, path)} is missing although the newest version of the "
                              f"store refers to it; {_advice()}") from None
    if copy is not None:
        local, size, sha = copy
        try:
            _check_size_and_footer(trace, path, lf, size, local)
            _check_sha(trace, path, lf, sha)
        except CorruptionError:
            blobs.forget_copy(path)  # fetched again by the next read, in case it was the transfer
            raise
        return local
    try:
        st = blobs.stat(path)
    except FileNotFoundError:
        st = None
    sig = None if st is None else (st.ident, st.changed)
    if sig is not None and _verified.get(path) == sig:
        return path
    check_cheap(trace, path, lf)
    if lf.sha256 is None:
        return path
    _check_sha(trace, path, lf, file_sha256(path))
    _verified[path] = sig
    return path


def file_sha256(path: str) -> str:
    with for_path(path).open_read(path) as fh:
        return sha256_of(fh)


def check_full(trace: str, path: str, lf) -> None:
    """Everything: size and footer, whole-file SHA-256, every page checksum."""
    import pyarrow as pa
    check_cheap(trace, path, lf)
    if lf.sha256 is not None and file_sha256(path) != lf.sha256:
        raise CorruptionError(f"{_where(trace, path)}: its SHA-256 differs from the one recorded at commit; "
                              f"{_advice()}")
    try:
        t = read_table(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        raise CorruptionError(f"{_where(trace, path)} cannot be read: {' '.join(str(e).split())[:200]}; "
                              f"{_advice()}") from None
    if t.num_rows != lf.rows:
        raise CorruptionError(f"{_where(trace, path)} holds {t.num_rows:,} rows, the log recorded "
                              f"{lf.rows:,}; {_advice()}")


def unreadable(trace: str, path: str, error: Exception) -> CorruptionError:
    """A layer file that pyarrow could not read (e.g. a page checksum that does not match)."""
    return CorruptionError(f"{_where(trace, path)} cannot be read: {' '.join(str(error).split())[:200]}; "
                           f"{_advice()}")


def check_store(store, trace: str | None = None) -> dict:
    """``ddcli check``: every layer file of every trace (or of ``trace``) fully checked,
    and the metadata log read. Returns ``{"traces", "files", "bytes", "problems"}``, each
    problem a dict ``{"trace", "file", "problem"}``; raises nothing for damage."""
    state = store.state()
    problems = []
    if store.log.damaged:
        problems.append({"trace": "", "file": store.log.path(store.log.damaged[0]),
                         "problem": store.log.damage_note()})
    traces = [store.trace(trace, state)] if trace is not None else [state.traces[n] for n in sorted(state.traces)]
    files = size = 0
    for t in traces:
        tdir = store.trace_dir(t.name)
        for layer in t.all_layers():
            for lf in layer.files:
                path = store.blobs.join(tdir, lf.name)
                files += 1
                size += lf.bytes
                try:
                    check_full(t.name, path, lf)
                except CorruptionError as e:
                    problems.append({"trace": t.name, "file": path, "problem": str(e).split("; the store is")[0]})
    return {"traces": len(traces), "files": files, "bytes": size, "problems": problems}
