"""Layers the warm engine holds decoded and reads by key (ops/operators/keyed_reads.py).

* A keyed read over held layers returns exactly the rows of the touched keys that a Python
  filter of every layer's rows finds: keys of integers, dates and timestamps (searched),
  strings (never held), two columns with nulls in the second, layers with nulls in the key
  and layers not sorted by it; within a budget that holds some layers and not others; and
  after a layer file is replaced under its name.
* Small runs of a SQL model in the driver, reading held layers, equal DuckDB at every time
  over three runs with compaction between.
"""

from __future__ import annotations

import datetime
import decimal
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ops.operators import keyed_reads
from ops.operators.keyed_reads import duckdb_keyed_read
from tests.sql.harness import check_model

KINDS = {
    "int64": (pa.int64(), lambda rng: rng.randrange(-50, 50)),
    "int32": (pa.int32(), lambda rng: rng.randrange(0, 40)),
    "date": (pa.date32(), lambda rng: datetime.date(2020, 1, 1) + datetime.timedelta(days=rng.randrange(60))),
    "timestamp": (pa.timestamp("us"), lambda rng: datetime.datetime(2021, 5, 1) + datetime.timedelta(
        seconds=rng.randrange(40) * 3601, microseconds=rng.randrange(3))),
    "string": (pa.string(), lambda rng: f"k{rng.randrange(30)}"),
}


@pytest.fixture
def holding(monkeypatch):
    monkeypatch.setattr(keyed_reads, "_enabled", True)
    monkeypatch.setenv("DDCLI_HELD_MEMORY", "1g")
    keyed_reads.forget()
    yield
    keyed_reads.forget()


def _layer(path, rng: random.Random, kind: str, n: int, *, nulls: bool, ordered: bool) -> str:
    typ, make = KINDS[kind]
    rows = [{"k": None if nulls and rng.random() < 0.1 else make(rng),
             "s": None if rng.random() < 0.2 else rng.choice(["a", "b", "été"]),
             "x": rng.choice([-1.0, 1.0]) * rng.uniform(0, 1) * 10 ** rng.randrange(-3, 9),
             "d": decimal.Decimal(rng.randrange(-10**7, 10**7)) / 100,
             "time": rng.randrange(5), "diff": rng.choice([1, 1, -1, 2])} for _ in range(n)]
    if ordered:
        rows.sort(key=lambda r: (r["k"] is not None, r["k"] if r["k"] is not None else 0))
    schema = pa.schema([("k", typ), ("s", pa.string()), ("x", pa.float64()), ("d", pa.decimal128(12, 2)),
                        ("time", pa.int64()), ("diff", pa.int64())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=max(1, n // 3))
    return str(path)


def _expected(files: list[str], keys: pa.Table, key: list[str]) -> list:
    touched = set(zip(*(keys.column(c).to_pylist() for c in key)))
    found = []
    for f in files:
        for row in pq.read_table(f).to_pylist():
            if tuple(row[c] for c in key) in touched:
                found.append(row)
    return sorted(found, key=repr)


def _read(files, keys, key) -> list:
    return sorted(duckdb_keyed_read(files, keys, key).to_pylist(), key=repr)


def _keys(rng: random.Random, kind: str, key: list[str], n: int) -> pa.Table:
    typ, make = KINDS[kind]
    rows = {(make(rng),) + ((rng.choice([None, "a", "b", "zz"]),) if len(key) > 1 else ()) for _ in range(n)}
    rows.add((None,) + ((None,) if len(key) > 1 else ()))  # a null key matches the layers' null keys
    cols = list(zip(*sorted(rows, key=repr)))
    return pa.table({c: pa.array(list(v), t) for c, v, t in zip(key, cols, [typ, pa.string()])})


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("key", [["k"], ["k", "s"]])
def test_a_keyed_read_of_held_layers_finds_the_touched_keys_rows(tmp_path, holding, kind, key):
    rng = random.Random(f"{kind}{key}")
    files = [_layer(tmp_path / f"l{i}.parquet", rng, kind, n, nulls=i == 1, ordered=i != 2)
             for i, n in enumerate([400, 60, 90, 5, 1])]
    for round_ in range(3):  # the first read decodes the layers, the next find them held
        keys = _keys(rng, kind, key, 12)
        assert _read(files, keys, key) == _expected(files, keys, key), (kind, key, round_)
    if kind == "string":
        assert keyed_reads.held_bytes() == 0
    else:  # every layer without nulls in the key is held
        assert len(keyed_reads._held) == len(files) - 1, len(keyed_reads._held)


@pytest.mark.parametrize("kind,other", [("int64", pa.int32()), ("timestamp", pa.timestamp("ms")),
                                        ("timestamp", pa.timestamp("s")), ("date", pa.date64())])
def test_touched_keys_of_another_type_find_the_same_rows(tmp_path, holding, kind, other):
    """A join's two sides may key by different widths or units: a key is searched in the
    layer's own type, and one that does not cast exactly leaves the read to DuckDB."""
    rng = random.Random(f"{kind}{other}")
    files = [_layer(tmp_path / f"l{i}.parquet", rng, kind, n, nulls=False, ordered=True)
             for i, n in enumerate([300, 40])]
    keys = _keys(rng, kind, ["k"], 25)
    keys = pa.table({"k": pc.cast(keys.column("k"), other, safe=False)})
    assert _read(files, keys, ["k"]) == _expected(files, keys, ["k"])


def test_a_budget_holds_some_layers_and_duckdb_reads_the_rest(tmp_path, holding, monkeypatch):
    rng = random.Random(5)
    files = [_layer(tmp_path / f"l{i}.parquet", rng, "int64", n, nulls=False, ordered=True)
             for i, n in enumerate([3000, 2500, 40, 30])]
    small = sum(pq.read_table(f).nbytes for f in files[2:])
    monkeypatch.setenv("DDCLI_HELD_MEMORY", str(small + 20_000))
    for _ in range(3):
        keys = _keys(rng, "int64", ["k"], 20)
        assert _read(files, keys, ["k"]) == _expected(files, keys, ["k"])
    assert 0 < len(keyed_reads._held) < len(files)
    assert keyed_reads.held_bytes() <= small + 20_000
    monkeypatch.setenv("DDCLI_HELD_MEMORY", "0")  # none held: DuckDB reads every layer
    keys = _keys(rng, "int64", ["k"], 20)
    assert keyed_reads.split(files, ["k"])[0] == []
    assert _read(files, keys, ["k"]) == _expected(files, keys, ["k"])


def test_a_layer_replaced_under_its_name_is_read_again(tmp_path, holding):
    rng = random.Random(9)
    path = tmp_path / "l.parquet"
    files = [_layer(path, rng, "int64", 200, nulls=False, ordered=True)]
    keys = pa.table({"k": pa.array(list(range(-50, 50)), pa.int64())})
    assert _read(files, keys, ["k"]) == _expected(files, keys, ["k"])
    _layer(path, random.Random(10), "int64", 300, nulls=False, ordered=True)
    assert _read(files, keys, ["k"]) == _expected(files, keys, ["k"])


def _rows_a(rng: random.Random, n: int) -> list[dict]:
    return [{"k": rng.randrange(12), "g": None if rng.random() < 0.1 else f"g{rng.randrange(4)}",
             "x": rng.choice([-1.0, 1.0]) * rng.uniform(0, 1) * 10 ** rng.randrange(-3, 7),
             "d": decimal.Decimal(rng.randrange(-10**6, 10**6)) / 100,
             "dt": datetime.date(2015, 1, 1) + datetime.timedelta(days=rng.randrange(3000))} for _ in range(n)]


def _rows_b(rng: random.Random, n: int) -> list[dict]:
    return [{"k": rng.randrange(12), "y": rng.randrange(100),
             "s": None if rng.random() < 0.1 else rng.choice(["apple", "avocado", "banana", "été"])} for _ in range(n)]


MODEL = """
CREATE MATERIALIZED VIEW joined AS SELECT a.k, a.g, a.x, a.d, b.y, b.s FROM a JOIN b ON a.k = b.k;
CREATE MATERIALIZED VIEW grouped AS
  SELECT g, count(*) AS n, sum(x) AS sx, sum(d) AS sd, avg(d) AS ad, min(dt) AS lo, max(s) AS hi
  FROM a JOIN b ON a.k = b.k GROUP BY g;
CREATE MATERIALIZED VIEW per_key AS SELECT k, sum(d) AS sd, count(*) AS n, max(x) AS mx FROM a GROUP BY k;
CREATE MATERIALIZED VIEW kinds AS SELECT DISTINCT k, s FROM b;
"""

SCHEMAS = {"a": pa.schema([("k", pa.int64()), ("g", pa.string()), ("x", pa.float64()),
                           ("d", pa.decimal128(12, 2)), ("dt", pa.date32())]),
           "b": pa.schema([("k", pa.int64()), ("y", pa.int64()), ("s", pa.string())])}


def test_runs_in_the_driver_reading_held_layers_equal_duckdb_at_every_time(tmp_path, holding, monkeypatch):
    from ops.reduce.summaries import layer_totals
    monkeypatch.setattr(layer_totals, "MIN_ROWS", 1)  # the layers' kept totals are read by key too
    results = check_model(tmp_path, MODEL, SCHEMAS, {"a": _rows_a, "b": _rows_b}, seed=21, runs=3, later=9)
    assert all(any(s.get("in_driver") for s in r.steps) for r in results)
    assert keyed_reads.held_bytes() > 0 and any(
        ident[-1] == ("k",) for ident in keyed_reads._held), list(keyed_reads._held)
