"""Every sum of a row's diffs that a reader or a compaction can form stays within int64.

A query sums a row's updates over the times up to the one it asks about (over the
product order when ``d >= 2``), ``changes`` over a range of times, compaction over the
times it merges, an upsert negates a row's count: between them, almost any subset of a
row's updates gets summed, and a sum beyond int64 makes the trace unreadable. So an
ingest keeps, for every row (the values of all data columns), its positive diffs
summing to at most ``2**63 - 1`` and its negative diffs to at least ``-(2**63 - 1)``,
counting the updates the trace holds: then every partial sum, and its negation, fits.
Compaction only lowers both (it adds positives and negatives together), so the store
never reaches a state its own reads refuse.

The check costs nothing for ordinary data: the rows of every layer times its largest
``|diff|`` (recorded in the log, or read from the footer's statistics for layers written
before) bound every sum; only past that bound does it look the touched rows up in the
layers (DuckDB, reading the row groups that can hold their keys).
"""

from __future__ import annotations

import pyarrow as pa

from storage.errors import DiffOverflow
from storage.files.limits import INT64_MAX
from storage.layer import diff_max
from storage.state.trace import Trace
from storage.writes.retractions import with_stored_updates


def check_diff_sums(store, name: str, existing: Trace | None, updates: pa.Table, data_columns: list[str]) -> None:
    """Raise :class:`DiffOverflow` (nothing written) when ``updates``, with the updates
    trace ``name`` holds, would let a row's positive or negative diffs sum beyond int64."""
    if not updates.num_rows:
        return
    if within_bound(store, existing, updates.num_rows * diff_max(updates)):
        return
    row, positive, negative = _worst_row(store, existing, updates, data_columns)
    if row is None:
        return
    shown = ", ".join(f"{k}={'NULL' if v is None else repr(v)}" for k, v in row.items())
    which, total = ("additions", positive) if positive > INT64_MAX else ("retractions", -negative)
    counting = "this ingest's updates and those the trace holds" if existing is not None else "this ingest's updates"
    raise DiffOverflow(f"trace {name!r}: the {which} of the row {shown[:200]} would add up to {total:,}, counting "
                       f"{counting}, beyond the int64 range of a count (±{INT64_MAX:,}); every "
                       f"partial sum of a row's diffs must fit, so its additions and its retractions are each "
                       f"bounded; nothing was ingested")


def within_bound(store, existing: Trace | None, bound: int) -> bool:
    """Whether new updates whose diffs' sums are at most ``bound`` in size, with those
    trace ``existing`` holds, keep every sum within int64 (no row need be looked up)."""
    for lf, path in _files(store, existing):
        if bound > INT64_MAX:
            break
        bound += lf.rows * _file_diff_max(lf, path)
    return bound <= INT64_MAX


def _files(store, trace: Trace | None) -> list:
    if trace is None:
        return []
    tdir = store.trace_dir(trace.name)
    return [(f, store.blobs.join(tdir, f.name)) for layer in trace.all_layers() for f in layer.files]


def _file_diff_max(lf, path: str) -> int:
    """The largest |diff| of a layer file: from the log, else from the footer's statistics
    (``INT64_MAX``, so the exact check runs, when the footer has none)."""
    if lf.diff_max is not None:
        return lf.diff_max
    import pyarrow.parquet as pq

    from storage.blobs.resolve import for_path
    fs, p = for_path(path).arrow(path)
    md = pq.read_metadata(p, filesystem=fs) if fs is not None else pq.read_metadata(p)
    col = md.schema.names.index("diff")
    biggest = 0
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(col).statistics
        if st is None or not st.has_min_max:
            return INT64_MAX
        biggest = max(biggest, abs(st.min), abs(st.max))
    return biggest


def _worst_row(store, existing: Trace | None, updates: pa.Table, data_columns: list[str]):
    """``(row, positive sum, negative sum)`` of a row whose diffs, new and stored, leave
    int64 (``(None, 0, 0)`` when none does)."""
    from storage.sql.duck import quote
    cols = ", ".join(quote(c) for c in data_columns)
    pos = "SUM(CASE WHEN diff > 0 THEN CAST(diff AS HUGEINT) ELSE 0 END)"
    neg = "SUM(CASE WHEN diff < 0 THEN CAST(diff AS HUGEINT) ELSE 0 END)"
    found = with_stored_updates(store, existing, updates, data_columns, "",
                                f"SELECT {cols}, CAST({pos} AS VARCHAR) AS __pos, CAST({neg} AS VARCHAR) AS __neg "
                                f"FROM every GROUP BY ALL HAVING {pos} > {INT64_MAX} OR {neg} < -{INT64_MAX} "
                                f"ORDER BY ALL LIMIT 1")
    if not found.num_rows:
        return None, 0, 0
    row = found.to_pylist()[0]
    return {c: row[c] for c in data_columns}, int(row["__pos"]), int(row["__neg"])
