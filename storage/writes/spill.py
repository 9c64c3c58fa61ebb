"""Out-of-core ingest: updates bigger than ``DDCLI_INGEST_MEMORY`` become one layer
through files on disk instead of memory.

An ingest holds its updates in memory until it writes its layer (storage/writes/ingest.py);
past its budget it reads its files again in chunks (storage/files/read.py,
``read_update_chunks``), each validated and written to a private temporary Parquet file.
DuckDB then sums the diffs of equal rows, drops the zeros and sorts, within a memory
limit well under the budget and spilling to the temporary folder; the sorted rows are
written as one layer file by the layer writer (storage/layer.py, ``write_layer_parts``), so
the file is the one an in-memory ingest writes. Nothing is visible before the commit,
and the temporary folder goes whatever happens.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from storage.lattice import Frontier, time_columns
from storage.layer import ROW_GROUP_ROWS, Layer, key_value, sort_columns, update_schema, updates_table, write_layer_parts
from storage.sql.duck import file_list

_SORTED_GROUP = 8 * ROW_GROUP_ROWS  # row groups of the sorted intermediate file


class Spill:
    """The validated updates of an ingest on disk, file by file, in a private folder."""

    def __init__(self, memory: int):
        self.memory = memory
        self.folder = tempfile.mkdtemp(prefix="ddcli-ingest-")
        self.parts: dict[str, list[str]] = {}  # update file -> its chunks on disk
        self.rows: dict[str, int] = {}
        self.diff_max: dict[str, int] = {}
        self.top: dict[str, int] = {}  # the largest first time coordinate (d = 1: the upper after)
        self.retracts = False  # whether a diff is negative

    def add(self, path: str, table: pa.Table, d: int) -> None:
        """Keep a validated chunk of ``path`` (data, ``d`` time columns, diff)."""
        if not table.num_rows:
            return
        name = os.path.join(self.folder, f"{uuid.uuid4().hex}.parquet")
        pq.write_table(table, name, compression="lz4")
        self.parts.setdefault(path, []).append(name)
        self.rows[path] = self.rows.get(path, 0) + table.num_rows
        import pyarrow.compute as pc
        mm = pc.min_max(table.column("diff"))
        self.retracts = self.retracts or mm["min"].as_py() < 0
        self.diff_max[path] = max(self.diff_max.get(path, 0), abs(mm["min"].as_py()), abs(mm["max"].as_py()))
        t = pc.max(table.column(time_columns(d)[0])).as_py()
        self.top[path] = max(self.top.get(path, t), t)

    def drop(self, path: str) -> None:
        """Forget the chunks of ``path`` (a file already taken)."""
        for name in self.parts.pop(path, []):
            os.remove(name)
        self.rows.pop(path, None)
        self.diff_max.pop(path, None)
        self.top.pop(path, None)

    def total_rows(self) -> int:
        return sum(self.rows.values())

    def bound(self) -> int:
        """What no sum of a row's diffs can exceed."""
        return sum(self.rows[p] * self.diff_max[p] for p in self.rows)

    def dataset(self):
        """The updates kept, as a ``pyarrow.dataset`` (DuckDB scans it without loading it)."""
        import pyarrow.dataset as ds
        return ds.dataset([p for parts in self.parts.values() for p in parts], format="parquet")

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def chunk_table(batch, d: int, schema: pa.Schema | None) -> pa.Table:
    """A validated chunk as updates, its data cast to the trace's ``schema``."""
    data = batch.data if schema is None or batch.data.schema == schema else batch.data.cast(schema)
    return updates_table(data, batch.times, batch.diff, d)


def write_layer(store, trace, spill: Spill, *, lower: Frontier, upper: Frontier, seq_lo: int, seq_hi: int) -> Layer:
    """The spilled updates consolidated and sorted (DuckDB, out of core) and written as
    one layer file of ``trace`` (not committed)."""
    target = update_schema(trace.schema, trace.d)
    sorted_path = os.path.join(spill.folder, "sorted.parquet")
    rows, dmax, ends = _consolidate(trace, spill, target, sorted_path)
    since = trace.effective_since()

    def parts():
        if not rows:
            yield target.empty_table()
            return
        with pq.ParquetFile(sorted_path) as pf:
            yield from _in_row_groups(pf.iter_batches(batch_size=ROW_GROUP_ROWS))

    f = write_layer_parts(parts, target, store.trace_dir(trace.name), key=trace.key, lower=lower, upper=upper,
                          since=since, rows=rows, key_ends=ends, dmax=dmax)
    return Layer(uuid.uuid4().hex[:16], [f], lower, upper, since, seq_lo, seq_hi, f.rows, f.bytes)


def _consolidate(trace, spill: Spill, target: pa.Schema, out: str) -> tuple[int, int, tuple]:
    """Write the summed, non-zero, sorted updates to ``out``; their rows, largest |diff|
    and first and last key values."""
    import duckdb
    import pyarrow.compute as pc

    def q(c: str) -> str:
        return '"' + c.replace('"', '""') + '"'

    group = trace.data_columns + time_columns(trace.d)
    order = ", ".join(f"{q(c)} ASC NULLS LAST" for c in sort_columns(trace.data_columns, trace.key, trace.d))
    files = [p for parts in spill.parts.values() for p in parts]
    sql = (f"SELECT {', '.join(q(c) for c in group)}, CAST(SUM(diff) AS BIGINT) AS diff "
           f"FROM read_parquet({file_list(files)}) GROUP BY ALL HAVING SUM(diff) <> 0 ORDER BY {order}")
    duck = os.path.join(spill.folder, "duckdb")
    con = duckdb.connect(config={"memory_limit": f"{max(spill.memory // 4, 64 << 20) >> 20}MB",
                                 "temp_directory": duck, "preserve_insertion_order": False, "threads": 2})
    rows, dmax, first, last = 0, 0, None, None
    try:
        reader = con.sql(sql).to_arrow_reader(ROW_GROUP_ROWS)
        with pq.ParquetWriter(out, target, compression="lz4") as writer:
            for batch in reader:
                if not batch.num_rows:
                    continue
                batch = pa.Table.from_batches([batch]).cast(target)
                if not rows and trace.key:
                    first = key_value(batch.column(trace.key[0]), 0)
                if trace.key:
                    last = key_value(batch.column(trace.key[0]), -1)
                mm = pc.min_max(batch.column("diff"))
                dmax = max(dmax, abs(mm["min"].as_py()), abs(mm["max"].as_py()))
                rows += batch.num_rows
                writer.write_table(batch, row_group_size=_SORTED_GROUP)
    finally:
        con.close()
    return rows, dmax, (first, last)




def _in_row_groups(batches):
    """Tables of exactly :data:`ROW_GROUP_ROWS` rows (the last one fewer)."""
    held, count = [], 0
    for b in batches:
        held.append(b)
        count += b.num_rows
        if count >= ROW_GROUP_ROWS:
            t = pa.Table.from_batches(held)
            cut = count - count % ROW_GROUP_ROWS
            yield t.slice(0, cut)
            held, count = ([t.slice(cut).combine_chunks().to_batches()[0]] if count > cut else []), count - cut
    if held:
        yield pa.Table.from_batches(held)
