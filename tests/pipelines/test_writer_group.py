"""Several traces written by one Spark job (a run's small outputs and states).

Each trace's layers must hold exactly its updates, consolidated and advanced to its
since, split at its upper when asked, sorted by its key; and the whole write is one job.
The reference is a plain fold over the rows given.
"""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq


def _fold(rows: list[tuple], since: int) -> Counter:
    """(data..., time, diff) rows: times advanced to ``since``, equal (data, time) summed."""
    acc: Counter = Counter()
    for *data, t, diff in rows:
        acc[(*data, max(t, since))] += diff
    return Counter({k: v for k, v in acc.items() if v != 0})


def _read(directory: str, layer) -> tuple[Counter, list[pa.Table]]:
    if layer is None:
        return Counter(), []
    tables = [pq.read_table(os.path.join(directory, f.name)) for f in layer.files]
    got: Counter = Counter()
    for t in tables:
        for r in t.to_pylist():
            got[tuple(v for k, v in r.items() if k != "diff")] += r["diff"]
    return got, tables


def test_traces_written_together_hold_exactly_their_updates_in_one_job(spark, spark_jobs, tmp_path):
    from ops.io.write_many import LayerWrite, write_layers
    from storage.lattice import Frontier

    rows_a = [(k % 7, f"v{k % 3}", k % 5, 1 if k % 4 else -1) for k in range(200)]  # (node, label, time, diff)
    rows_b = [(k % 11, k % 9, (k * 7) % 13, 2) for k in range(300)] + [(1, 1, 12, -2)]  # (src, dst, time, diff)
    schema_a = pa.schema([("node", pa.int64()), ("label", pa.string()), ("time", pa.int64()), ("diff", pa.int64())])
    schema_b = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("time", pa.int64()), ("diff", pa.int64())])

    def frame(rows, schema):
        return spark.createDataFrame(pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema))

    d1 = lambda t: Frontier([(t,)], 1)  # noqa: E731
    dir_a, dir_b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(dir_a), os.makedirs(dir_b)
    writes = [
        # an output: split at its upper 10 (times 10.. wait, pending), since 0
        LayerWrite(frame(rows_b, schema_b), dir_b, schema_b, ["src"], 1, d1(0), d1(10), d1(0), 0, split=True),
        # a state: advanced to since 3 and precombined by Spark first
        LayerWrite(frame(rows_a, schema_a), dir_a, schema_a, ["node"], 1, d1(0), d1(5), d1(3), 0, split=False,
                   precombine=True),
    ]
    before = spark_jobs()
    (sealed_b, pending_b), (sealed_a, pending_a) = write_layers(writes, partitions=2)
    assert len(spark_jobs() - before) == 1

    got_a, tables_a = _read(dir_a, sealed_a)
    assert got_a == _fold(rows_a, 3) and pending_a is None
    assert sealed_a.rows == sum(t.num_rows for t in tables_a) == len(got_a)
    want_b = _fold(rows_b, 0)
    got_sealed, tables_b = _read(dir_b, sealed_b)
    got_pending, _ = _read(dir_b, pending_b)
    assert got_sealed == Counter({k: v for k, v in want_b.items() if k[-1] < 10})
    assert got_pending == Counter({k: v for k, v in want_b.items() if k[-1] >= 10}) and got_pending
    for t in tables_a + tables_b:  # each file sorted by its key, then data, then time
        rows = [tuple(r.values())[:-1] for r in t.to_pylist()]
        assert rows == sorted(rows)
    # one trace's key lives in one file: readers skip by key range
    for tables, key in ((tables_a, "node"), (tables_b, "src")):
        seen = [set(t.column(key).to_pylist()) for t in tables]
        assert sum(len(s) for s in seen) == len(set().union(*seen))
