"""The layer format: one immutable, sorted, consolidated Parquet file of updates.

Columns: the data columns, ``time`` (d = 1) or ``time_0 … time_{d-1}``, and ``diff``.
Rows are sorted by (key columns, other data columns, time) so that Parquet min/max
statistics let a reader skip row groups by key. The footer's key-value metadata repeats
what the store's log says of the file (lower, upper, since, rows, key range), so a layer
file explains itself even without the log.

Files are written once under a unique name (locally: a temporary name, fsync, rename;
on an object store: one put of the whole object, see storage/blobs/base.py): a crash leaves
either nothing or an orphan that ``compact`` collects; never a torn file under a name
the log refers to.
"""

from __future__ import annotations

import hashlib
import io
import json
import uuid
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.blobs.resolve import for_path, read_schema, read_table
from storage.errors import CorruptionError
from storage.files.limits import check_diff_sums
from storage.lattice import Frontier, advance_columns, time_columns
from storage.row_order import group_sum

ROW_GROUP_ROWS = 32_768  # small enough that a key look-up skips most of a large layer
META_KEY = b"ddcli.layer"

#: a file beside a layer that holds a summary of it (``LAYER.parquet.totals-H-D``: its
#: per-key totals, ops/reduce/summaries/layer_totals.py); it lives exactly as long as its layer
SUMMARY_SUFFIX = ".totals-"


#: a layer of at least this many rows (four row groups) gets the summaries its readers ask for
SUMMARISED_ROWS = 131_072

_kept_summaries: dict[str, str] = {}  # summaries checked in this process: their name without, and with, their digest


def summarised_layer(name: str) -> str | None:
    """The layer file (name or path) whose summary ``name`` is; None if it is none."""
    head, sep, tail = name.rpartition(SUMMARY_SUFFIX)
    return head if sep and tail and "/" not in tail else None


def kept_summary(stem: str, make: Callable[[], pa.Table]) -> str:
    """The path of the summary ``stem-D`` kept beside a layer (``stem``: the layer's path,
    :data:`SUMMARY_SUFFIX` and what it summarises; ``D``: the start of its bytes' SHA-256,
    checked once per process as a layer's bytes are, so a damaged summary is never read):
    the one there if intact, else ``make()`` written now. A layer is immutable, so what is
    summed from it once holds as long as it does; garbage collection keeps its summaries
    exactly as long (storage/writes/gc.py)."""
    if stem in _kept_summaries:
        return _kept_summaries[stem]
    blobs = for_path(stem)
    folder, name = stem.rsplit("/", 1)
    for found in sorted(n for n in blobs.list(folder) if n.startswith(name + "-")):
        path = f"{folder}/{found}"
        if _digest(blobs.get(path)) == found[len(name) + 1:]:
            _kept_summaries[stem] = path
            return path
        blobs.delete(path)  # damaged: summed again below (the same summary may take its name)
    sink = io.BytesIO()
    pq.write_table(make(), sink, row_group_size=ROW_GROUP_ROWS)
    data = sink.getvalue()
    path = f"{stem}-{_digest(data)}"
    if not blobs.put_if_absent(path, data, point="layer.totals") and _digest(blobs.get(path)) != path[-16:]:
        raise CorruptionError(f"the summary {path} kept beside a layer is damaged as soon as written")
    _kept_summaries[stem] = path  # (another process may have written the same bytes first)
    return path


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass
class LayerFile:
    """One Parquet file of a layer (a layer written by Spark may have several parts)."""

    name: str
    rows: int
    bytes: int
    key_min: object = None  # bounds of the first key column, at most KEY_BOUND_CHARS long (see key_bounds)
    key_max: object = None
    # checksums recorded at commit (see storage/integrity.py); None in older stores
    sha256: str | None = None
    footer_sha256: str | None = None
    diff_max: int | None = None  # the largest |diff| in the file; None when not recorded

    def to_json(self) -> dict:
        v = {"name": self.name, "rows": self.rows, "bytes": self.bytes,
             "key_min": self.key_min, "key_max": self.key_max}
        if self.sha256 is not None:
            v.update(sha256=self.sha256, footer_sha256=self.footer_sha256)
        if self.diff_max is not None:
            v["diff_max"] = self.diff_max
        return v

    @classmethod
    def from_json(cls, v: dict) -> "LayerFile":
        return cls(v["name"], v["rows"], v["bytes"], v.get("key_min"), v.get("key_max"),
                   v.get("sha256"), v.get("footer_sha256"), v.get("diff_max"))


@dataclass
class Layer:
    """A batch of updates: all updates of the sequence interval ``[seq_lo, seq_hi)``.

    ``lower``/``upper`` are the time frontiers the batch covers; ``since`` the frontier its
    times were advanced to. ``seq`` numbers count seals of the trace and let a reader
    that consumed up to a point tell old layers from new ones exactly, whatever
    compaction did to their times.
    """

    id: str
    files: list[LayerFile]
    lower: Frontier
    upper: Frontier
    since: Frontier
    seq_lo: int
    seq_hi: int
    rows: int = field(default=0)
    bytes: int = field(default=0)

    def to_json(self) -> dict:
        return {"id": self.id, "files": [f.to_json() for f in self.files],
                "lower": self.lower.to_json(), "upper": self.upper.to_json(),
                "since": self.since.to_json(), "seq": [self.seq_lo, self.seq_hi],
                "rows": self.rows, "bytes": self.bytes}

    @classmethod
    def from_json(cls, v: dict, d: int) -> "Layer":
        return cls(v["id"], [LayerFile.from_json(f) for f in v["files"]],
                   Frontier.from_json(v["lower"], d), Frontier.from_json(v["upper"], d),
                   Frontier.from_json(v["since"], d), v["seq"][0], v["seq"][1],
                   v["rows"], v["bytes"])


def sort_columns(schema_names: list[str], key: list[str], d: int) -> list[str]:
    """The layer sort order: key columns, the other data columns, then time."""
    others = [c for c in schema_names if c not in key]
    return list(key) + others + time_columns(d)


def consolidate(table: pa.Table, data_columns: list[str], key: list[str], d: int,
                since: Frontier | None = None, *, presummed: bool = False) -> pa.Table:
    """Advance times to ``since``, sum diffs of equal (data, time), drop zeros, sort.

    Returns a table with exactly the data columns, the time columns and ``diff``.
    ``presummed``: the caller says no two rows share (data, time) and no diff is 0 (a
    reduce's output): unless advancing moves a time, rows found in strictly ascending
    order already (a reduce's kernel sorts its output) are kept as they are, others are
    sorted and checked for equal neighbours, and summed only if the check fails (the hash
    aggregation costs twice the sort).
    """
    tcols = time_columns(d)
    moved = False
    if since is not None and not since.is_empty() and table.num_rows:
        times = [table.column(c).to_numpy() for c in tcols]
        advanced = advance_columns(times, since)
        moved = any(not np.array_equal(a, b) for a, b in zip(times, advanced))
        for c, arr in zip(tcols, advanced):
            table = table.set_column(table.schema.get_field_index(c), c, pa.array(arr, pa.int64()))
    group = data_columns + tcols
    order = [(c, "ascending") for c in sort_columns(data_columns, key, d)]
    if presummed and not moved and table.num_rows:
        # sorted, equal (data, time) would sit side by side: checked, not trusted
        ordered = table.select(group + ["diff"])
        if strictly_ascending(ordered, [c for c, _ in order]) and not _has_zero_diff(ordered):
            return ordered
        ordered = ordered.sort_by(order)
        if not _needs_summing(ordered, group):
            return ordered
    if table.num_rows:
        check_diff_sums(table, group)
        summed = _summed_integers(table, [c for c, _ in order])
        if summed is not None:
            return summed.select(group + ["diff"])
        agg = table.select(group + ["diff"]).group_by(group, use_threads=False).aggregate([("diff", "sum")])
        # pick columns by name: the position of the aggregate differs between pyarrow versions
        summed = pa.Table.from_arrays([agg.column(c) for c in group] + [agg.column("diff_sum").cast(pa.int64())],
                                      names=group + ["diff"])
        summed = summed.filter(pc.not_equal(summed.column("diff"), 0))
    else:
        summed = table.select(group + ["diff"])
    summed = summed.sort_by(order) if summed.num_rows else summed
    return summed.select(group + ["diff"])


def _summed_integers(table: pa.Table, columns: list[str]) -> pa.Table | None:
    """Rows of equal ``columns`` summed, zeros dropped, sorted by ``columns``, when they are
    all integers without nulls: :func:`storage.row_order.group_sum` (one stable sort of the
    keys packed into an int64, which takes the sorted runs a merge concatenates whole),
    several times faster than a hash aggregation and a sort. None for other columns. The
    diffs' sums are known to fit in int64 (``check_diff_sums``)."""
    if table.column("diff").null_count:
        return None
    keys = []
    for c in columns:
        col = table.column(c)
        typ = col.type
        if not pa.types.is_integer(typ) or col.null_count or (pa.types.is_unsigned_integer(typ) and typ.bit_width == 64):
            return None
        keys.append(np.asarray(col.to_numpy(), np.int64))
    first, sums = group_sum(keys, np.asarray(table.column("diff").to_numpy(), np.int64))
    keep = sums != 0
    out = table.select(columns).take(pa.array(first[keep]))
    return out.append_column("diff", pa.array(sums[keep], pa.int64()))


def _has_zero_diff(table: pa.Table) -> bool:
    return bool(table.num_rows) and bool(pc.any(pc.equal(table.column("diff"), 0)).as_py())


def strictly_ascending(table: pa.Table, columns: list[str]) -> bool:
    """Whether every row is before the next in the order of ``columns`` (ascending, first
    column most significant), none equal to it on all of them: a sort would keep the table
    as it is. False for nulls, NaN and column types Arrow cannot compare (they get sorted)."""
    n = table.num_rows
    if n < 2:
        return True
    before = tied = None  # row i < row i+1 already decided by an earlier column / equal so far
    for c in columns:
        col = table.column(c)
        if col.null_count:
            return False
        a, b = col.slice(0, n - 1), col.slice(1)
        try:
            lt, eq = pc.less(a, b), pc.equal(a, b)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
            return False
        before = lt if before is None else pc.or_(before, pc.and_(tied, lt))
        tied = eq if tied is None else pc.and_(tied, eq)
        if not pc.all(pc.or_(before, tied)).as_py():  # some row is after the next: out of order
            return False
    return bool(pc.all(before).as_py())


def _needs_summing(ordered: pa.Table, group: list[str]) -> bool:
    """Whether a table sorted by ``group`` has a zero diff or two neighbours equal on every
    column of ``group`` (nulls equal to nulls, NaN to NaN, as the aggregation groups them);
    True for column types Arrow cannot compare."""
    if _has_zero_diff(ordered):
        return True
    if ordered.num_rows < 2:
        return False
    same = None
    for c in group:
        col = ordered.column(c)
        a, b = col.slice(1), col.slice(0, len(col) - 1)
        try:
            eq = pc.fill_null(pc.equal(a, b), False)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
            return True
        eq = pc.or_(eq, pc.and_(pc.is_null(a), pc.is_null(b)))
        if pa.types.is_floating(col.type):
            eq = pc.or_(eq, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
        same = eq if same is None else pc.and_(same, eq)
    return bool(pc.any(same).as_py())


KEY_BOUND_CHARS = 256  # the longest key bound the log and footer keep (values belong in the layer)


def _scalar(v):
    """A JSON-able form of a key bound (stats are advisory; anything odd becomes None)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def key_bounds(first, last) -> tuple:
    """The key range the log and the footer record for a file whose first key column goes
    from ``first`` to ``last``: a long lower bound is cut to its first
    :data:`KEY_BOUND_CHARS` characters (a prefix is still a lower bound), a long upper bound
    is dropped (None: unknown), so a 50 MB value never lands in the metadata."""
    lo, hi = _scalar(first), _scalar(last)
    if isinstance(lo, str) and len(lo) > KEY_BOUND_CHARS:
        lo = lo[:KEY_BOUND_CHARS]
    if isinstance(hi, str) and len(hi) > KEY_BOUND_CHARS:
        hi = None
    return lo, hi


def diff_max(table: pa.Table) -> int:
    """The largest |diff| of an update table (0 when empty)."""
    if not table.num_rows:
        return 0
    mm = pc.min_max(table.column("diff"))
    return max(abs(mm["min"].as_py()), abs(mm["max"].as_py()))


def write_layer_file(table: pa.Table, directory: str, *, key: list[str], lower: Frontier,
                     upper: Frontier, since: Frontier, name: str | None = None) -> LayerFile:
    """Write an already consolidated and sorted table as one layer file, once, under a
    unique name (locally tmp → fsync → rename; see storage/blobs/base.py)."""
    ends = (key_value(table.column(key[0]), 0), key_value(table.column(key[0]), -1)) if key and table.num_rows else (None, None)
    return write_layer_parts(lambda: [table], table.schema, directory, key=key, lower=lower, upper=upper,
                             since=since, rows=table.num_rows, key_ends=ends, dmax=diff_max(table), name=name)


def key_value(column, i: int):
    """The value of row ``i`` of a key column, as the log and the footer record it."""
    if pa.types.is_timestamp(column.type) and column.type.tz:
        # the instants in UTC: a zone's local time of one may be beyond Python's years
        column = column.cast(pa.timestamp(column.type.unit, "UTC"))
    return column[i].as_py()


def write_layer_parts(parts, schema: pa.Schema, directory: str, *, key: list[str], lower: Frontier,
                      upper: Frontier, since: Frontier, rows: int, key_ends: tuple, dmax: int,
                      name: str | None = None) -> LayerFile:
    """Write a layer file from ``parts()``, consolidated and sorted tables in order of
    ``schema`` (each but the last a multiple of :data:`ROW_GROUP_ROWS` rows, so the row
    groups are those one table makes), with ``rows`` rows, first and last key values
    ``key_ends`` and largest |diff| ``dmax``: a layer bigger than memory is written as
    one written whole (storage/writes/spill.py)."""
    blobs = for_path(directory)
    name = name or f"{uuid.uuid4().hex}.parquet"
    key_min, key_max = key_bounds(*key_ends) if key and rows else (None, None)
    meta = {"lower": lower.to_json(), "upper": upper.to_json(), "since": since.to_json(),
            "rows": rows, "key": key, "key_min": key_min, "key_max": key_max}
    schema = schema.with_metadata({META_KEY: json.dumps(meta).encode()})

    def write(fh) -> None:
        with pq.ParquetWriter(fh, schema, compression="zstd", write_page_checksum=True) as writer:
            for part in parts():
                writer.write_table(part.replace_schema_metadata(schema.metadata), row_group_size=ROW_GROUP_ROWS)

    done = blobs.write_new(blobs.join(directory, name), write)
    return LayerFile(name, rows, done["bytes"], key_min, key_max, done["sha256"], done["footer_sha256"], dmax)


def read_layer_files(paths: list[str], columns: list[str] | None = None,
                     schema: pa.Schema | None = None, where=None) -> pa.Table | None:
    """Read layer files into one table (memory-mapped); ``None`` when there are no paths.

    With ``schema`` every file is cast to it first, so files written by different writers
    (e.g. ``string`` and ``large_string``) concatenate. ``where``: only the rows that pass
    this ``pyarrow.compute`` filter (row groups its statistics rule out are not read).
    """
    tables = []
    for p in paths:
        try:
            tables.append(read_table(p, columns=columns, page_checksum_verification=True, filters=where))
        except (pa.ArrowException, OSError) as e:
            raise CorruptionError(f"layer file {p} cannot be read: {' '.join(str(e).split())[:200]}; the store "
                                  f"is damaged, run 'ddcli check' (retrying will not help)") from None
    tables = [t.replace_schema_metadata(None) for t in tables]
    if schema is not None:
        tables = [t if t.schema.equals(schema) else t.select(schema.names).cast(schema) for t in tables]
    return pa.concat_tables(tables) if tables else None


def footer_metadata(path: str) -> dict:
    """The layer description written in a file's footer."""
    md = read_schema(path).metadata or {}
    return json.loads(md[META_KEY]) if META_KEY in md else {}


def update_schema(data: pa.Schema, d: int) -> pa.Schema:
    """The schema of a collection's updates: its ``data`` columns, ``d`` time columns, diff."""
    return pa.schema(list(data) + [pa.field(t, pa.int64()) for t in time_columns(d)] + [pa.field("diff", pa.int64())])


def empty_updates(schema: pa.Schema, d: int) -> pa.Table:
    return update_schema(schema, d).empty_table()


def updates_table(data: pa.Table, times: list[np.ndarray], diff: np.ndarray, d: int) -> pa.Table:
    """Assemble data columns, time columns and diff into one update table."""
    cols = list(data.columns) + [pa.array(t, pa.int64()) for t in times] + [pa.array(diff, pa.int64())]
    names = list(data.column_names) + time_columns(d) + ["diff"]
    return pa.Table.from_arrays(cols, names=names)
