"""Keyed reads: the stored updates of the keys a change touches, from an arrangement's layers.

A refresh reads the old updates of the keys its change touches from each arrangement's
key-sorted layers (``ops/operators/arrangement.py``). DuckDB does that by scanning the key
column of each layer (:func:`keyed_read_sql`): 15-100 ms per read of a trace of millions of
rows, however few the keys, since a refresh's keys fall in nearly every row group. The
warm engine runs the same pipelines over the same traces command after command, and a
layer file never changes once written; so it can keep the layers it reads decoded, sorted
by the key, and find a key's rows by binary search: a few milliseconds a read where DuckDB
took tens (docs/architecture.md, "The warm engine").

* **Which layers.** Only in the warm engine (:func:`enable`), only local files, only by a
  key whose first column is an integer, date or timestamp without nulls in the layer (the
  others are read by DuckDB, as everywhere else). A layer is known by its device, inode,
  size and modification time, so a file replaced under the same name is read again.
* **How much.** At most ``DDCLI_HELD_MEMORY`` decoded bytes in all; none unless it is set:
  the engine's first refresh pays for decoding every layer it reads (some 12 s for 2 GB at
  TPC-H's scale factor 1) and a refresh after it saves about a sixth, so it pays only where
  refreshes follow each other within the engine's idle time. A layer that
  does not fit after the layers no command used lately are dropped is read by DuckDB: the
  layers held stay held rather than take turns, which would decode each layer once per
  command and gain nothing.
* **What a read returns.** The candidate rows whose first key column is among the touched
  keys' (exactly the touched keys' rows for a one-column key); the caller's SQL finishes a
  longer key with the same semi-join DuckDB's read uses (:func:`keyed_source`).
"""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage.sql.duck import file_list, quote

_lock = threading.Lock()
_enabled = False
_held: dict[tuple, "HeldLayer"] = {}
_refused: set[tuple] = set()  # layers whose key cannot be searched: never decoded again
_sizes: dict[tuple, int] = {}  # layers' decoded sizes as their footers say (read once)
_unfit: set[tuple] = set()  # layers found not to fit in this command: room only shrinks until the next
_command = 0  # counts the commands of the process: which layers were used lately
_names = itertools.count()


@dataclass
class HeldLayer:
    table: pa.Table  # the layer's rows, sorted by ``first``
    first: np.ndarray  # the first key column, as int64
    first_type: pa.DataType  # its type in the layer (touched keys are cast to it first)
    nbytes: int
    used: int  # the last command that read it


def enable() -> None:
    """This process is a warm engine: the layers it reads by key are worth holding."""
    global _enabled
    _enabled = True


def command_started() -> None:
    """A new command: layers read before it are candidates for dropping."""
    global _command
    _command += 1
    _unfit.clear()


def forget() -> None:
    with _lock:
        _held.clear()
        _refused.clear()
        _sizes.clear()
        _unfit.clear()


def held_bytes() -> int:
    return sum(h.nbytes for h in _held.values())


def held_summary() -> str:
    """What is held, for the service's log."""
    return f"{len(_held)} layers held decoded, {held_bytes() / 2**20:.0f} MiB"


def memory() -> int:
    from storage.files.limits import size_setting
    raw = os.environ.get("DDCLI_HELD_MEMORY", "").strip()
    return 0 if raw in ("", "0") else size_setting("DDCLI_HELD_MEMORY", 0)


def keyed_source(con, files: list[str], keys: pa.Table, key: list[str]) -> str:
    """SQL of the updates of ``files`` whose key is in ``keys`` (registered on ``con`` as
    ``touched_keys``): the held layers' rows registered on ``con``, and DuckDB's keyed read
    of the others."""
    held, rest = split(files, key)
    rows = _candidate_rows(held, keys, key) if held else None
    if rows is None:
        return keyed_read_sql(files, keys, key)
    name = f"held_rows_{next(_names)}"
    con.register(name, rows)
    part = f"SELECT * FROM {name}"
    if len(key) > 1:
        cond = " AND ".join(f"h.{quote(k)} IS NOT DISTINCT FROM t.{quote(k)}" for k in key)
        part = f"SELECT h.* FROM {name} h SEMI JOIN touched_keys t ON {cond}"
    if not rest:
        return part
    return f"({part}) UNION ALL BY NAME ({keyed_read_sql(rest, keys, key)})"


def keyed_read_sql(files: list[str], keys: pa.Table, key: list[str]) -> str:
    """DuckDB SQL for the updates of ``files`` whose key is in the registered table
    ``touched_keys`` (``keys``)."""
    files_sql = file_list(files)
    if not key:  # a reduce over all rows (no key): every update is of the one key touched
        return f"SELECT u.* FROM read_parquet({files_sql}) u"
    cond = " AND ".join(f"u.{quote(k)} IS NOT DISTINCT FROM t.{quote(k)}" for k in key)
    # an IN-list on a single key lets DuckDB prune row groups by min/max statistics
    if len(key) == 1:
        k = quote(key[0])
        q = f"SELECT u.* FROM read_parquet({files_sql}) u WHERE u.{k} IN (SELECT {k} FROM touched_keys)"
        if keys.column(key[0]).null_count:
            q += f" OR u.{k} IS NULL"
        return q
    return f"SELECT u.* FROM read_parquet({files_sql}) u SEMI JOIN touched_keys t ON {cond}"


def duckdb_keyed_read(files: list[str], keys: pa.Table, key: list[str]) -> pa.Table:
    from storage.blobs.resolve import duckdb_connect

    con = duckdb_connect(files)  # the files may be on an object store
    try:
        if key:  # (DuckDB registers no table without columns; no key needs none)
            con.register("touched_keys", keys)
        return con.sql(keyed_source(con, files, keys, key)).to_arrow_table()
    finally:
        con.close()


def split(files: list[str], key: list[str]) -> tuple[list[HeldLayer], list[str]]:
    """The layers of ``files`` held (decoded now where they fit), and the other files."""
    if not (_enabled and key and files) or memory() <= 0:
        return [], list(files)
    held, rest = [], []
    with _lock:
        for f in files:
            h = _hold(f, tuple(key))
            if h is None:
                rest.append(f)
            else:
                h.used = _command
                held.append(h)
    return held, rest


def _identity(path: str, key: tuple) -> tuple | None:
    if "://" in path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, key


def _hold(path: str, key: tuple) -> HeldLayer | None:
    ident = _identity(path, key)
    if ident is None or ident in _refused or ident in _unfit:
        return None
    h = _held.get(ident)
    if h is not None:
        return h
    if ident not in _sizes:
        meta = pq.read_metadata(path)
        if key[0] not in meta.schema.names:
            _refused.add(ident)
            return None
        _sizes[ident] = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if not _room_for(_sizes[ident]):
        _unfit.add(ident)
        return None
    table = pq.read_table(path).combine_chunks()  # a take from one chunk per column is cheaper
    first = _searchable(table.column(key[0]))
    if first is None:
        _refused.add(ident)
        return None
    if len(first) > 1 and bool(np.any(first[1:] < first[:-1])):
        order = np.argsort(first, kind="stable")
        table, first = table.take(order), first[order]
    h = _held[ident] = HeldLayer(table, first, table.schema.field(key[0]).type, table.nbytes + first.nbytes, _command)
    return h


def _room_for(nbytes: int) -> bool:
    """Whether ``nbytes`` more fit, after dropping what the last two commands did not read."""
    limit, total = memory(), held_bytes()
    if total + nbytes <= limit:
        return True
    for ident, h in sorted(_held.items(), key=lambda kv: kv[1].used):
        if h.used >= _command - 1:
            break
        del _held[ident]
        total -= h.nbytes
        if total + nbytes <= limit:
            return True
    return False


def _searchable(col: pa.ChunkedArray) -> np.ndarray | None:
    """The key column as int64 (None: a type without an integer order, or nulls)."""
    t = col.type
    if col.null_count or not (pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)):
        return None
    if pa.types.is_date32(t):
        col = col.cast(pa.int32())
    elif pa.types.is_date64(t) or pa.types.is_timestamp(t):
        col = col.cast(pa.int64())
    if pa.types.is_uint64(col.type):
        return None  # may not fit an int64
    return col.to_numpy().astype(np.int64, copy=False)


def _candidate_rows(held: list[HeldLayer], keys: pa.Table, key: list[str]) -> pa.Table | None:
    """The held layers' rows whose first key column is one of ``keys``' (None when a touched
    key does not cast to a layer's type exactly, or the layers' schemas do not concatenate:
    DuckDB then reads them all)."""
    touched, probes = keys.column(key[0]).drop_null(), {}
    parts = []
    for h in held:
        if h.first_type not in probes:  # in the layer's type: a date or a unit compares alike
            try:
                probe = _searchable(touched.cast(h.first_type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                probe = None
            probes[h.first_type] = None if probe is None else np.unique(probe)
        probe = probes[h.first_type]
        if probe is None:
            return None
        if not len(probe):
            continue
        if not len(h.first) or probe[-1] < h.first[0] or probe[0] > h.first[-1]:
            continue  # no touched key in the layer's range
        lo = np.searchsorted(h.first, probe, "left")
        hi = np.searchsorted(h.first, probe, "right")
        counts = hi - lo
        total = int(counts.sum())
        if total == 0:
            parts.append(h.table.slice(0, 0))
            continue
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        parts.append(h.table.take(pa.array(np.arange(total) + starts)))
    if not parts:
        return held[0].table.slice(0, 0)
    try:
        return pa.concat_tables(parts, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
