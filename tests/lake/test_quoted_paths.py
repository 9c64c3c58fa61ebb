"""A store in a folder whose name holds a quote: every DuckDB read names its files as
SQL string literals (storage/sql/duck.py), so a quote in a path must not end one.

Each read is compared with a plain-Python fold of the updates the test wrote.
"""

from __future__ import annotations

import pyarrow as pa

from ops.operators.keyed_reads import duckdb_keyed_read
from storage.sql import query as Q
from storage.store import Store
from tests.helpers.delta_reader import storage_options
from tests.helpers.store_refs import fold, make_output, seal, write_updates

A = [((k, "a'b" if k % 2 else "c"), (0,), 1) for k in range(6)]
B = [((1, "a'b"), (1,), -1), ((7, "d"), (1,), 2)]


def _collection(table: pa.Table) -> dict:
    return {(r["k"], r["v"]): r["count"] for r in table.to_pylist()}


def test_every_read_of_a_store_whose_path_holds_a_quote(tmp_path):
    from deltalake import DeltaTable
    folder = tmp_path / "it's a store"
    store = Store(str(folder))
    make_output(store, "out", write_updates(str(tmp_path / "a.parquet"), A, 1))
    seal(store, "out", write_updates(str(tmp_path / "b.parquet"), B, 1), 2)
    assert _collection(Q.as_of(store, "out", (1,))) == fold(A + B, (1,))
    got = Q.sql(store, "SELECT k, v, SUM(diff) AS count FROM out WHERE time <= 1 GROUP BY k, v HAVING SUM(diff) <> 0")
    assert _collection(got) == fold(A + B, (1,))

    uri = store.blobs.join(store.path, "tables", "out")  # the current-state table, brought up incrementally
    table = pa.table(DeltaTable(uri, storage_options=storage_options(uri)).to_pyarrow_table())
    assert _collection(table) == fold(A + B, (1,))

    store.ingest("raw", [write_updates(str(tmp_path / "r.parquet"), A, 1)])
    retract = [((2, "c"), (1,), -1), ((3, "a'b"), (1,), -1)]  # the retraction check reads the stored rows
    store.ingest("raw", [write_updates(str(tmp_path / "r2.parquet"), retract, 1)])
    assert _collection(Q.as_of(store, "raw", (1,))) == fold(A + retract, (1,))

    files = store.read_paths(store.trace("raw"))
    keyed = duckdb_keyed_read(files, pa.table({"k": [2, 3, 4]}), ["k"])
    sums: dict = {}
    for r in keyed.to_pylist():
        sums[(r["k"], r["v"])] = sums.get((r["k"], r["v"]), 0) + r["diff"]
    want = {kv: n for kv, n in fold(A + retract, (1,)).items() if kv[0] in (2, 3, 4)}
    assert {kv: n for kv, n in sums.items() if n} == want
