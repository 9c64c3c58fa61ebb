"""CSV and JSON Lines output keep every value: decimals as their exact digits, binary as
hex, and what ddcli writes ingests back unchanged into a trace of the same types.

The expected values are the ones the test wrote itself; the round trip compares the
Parquet output of both traces (exact types, no text in between).
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.helpers.cli import ddcli, ok, one_line_error

SCHEMA = pa.schema([("id", pa.int64()), ("money", pa.decimal128(18, 2)), ("big", pa.decimal128(38, 10)),
                    ("blob", pa.binary()), ("time", pa.int64()), ("diff", pa.int64())])
BIG = Decimal("9999999999999999999999999999.9999999999")  # the largest decimal(38,10)
ROWS = [
    {"id": 1, "money": Decimal("9999999999999999.99"), "big": BIG, "blob": b"\x80", "time": 1, "diff": 1},
    {"id": 2, "money": Decimal("-0.01"), "big": BIG.copy_negate(), "blob": b"80", "time": 1, "diff": 1},
    {"id": 3, "money": Decimal("0.00"), "big": Decimal("0.0000000001"), "blob": b"\x00", "time": 2, "diff": 2},
    {"id": 4, "money": None, "big": Decimal("123.4500000000"), "blob": b"", "time": 2, "diff": 1},
    {"id": 5, "money": Decimal("100.00"), "big": None, "blob": None, "time": 3, "diff": -1},
]
TEXT = {  # each value as the output writes it (null aside)
    "money": ["9999999999999999.99", "-0.01", "0.00", None, "100.00"],
    "big": [format(BIG, "f"), format(BIG.copy_negate(), "f"), "0.0000000001", "123.4500000000", None],
    "blob": ["80", "3830", "00", "", None],
}


def _table() -> pa.Table:
    # decimals through their text: pyarrow infers one precision for a list of Decimals
    cols = {f.name: [r[f.name] for r in ROWS] for f in SCHEMA}
    arrays = [pa.array([None if v is None else format(v, "f") for v in cols[f.name]]).cast(f.type)
              if pa.types.is_decimal(f.type) else pa.array(cols[f.name], f.type) for f in SCHEMA]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _store(tmp_path) -> str:
    store = str(tmp_path / "store")
    pq.write_table(_table(), tmp_path / "vals.parquet")
    ok(ddcli(store, "ingest", "vals", str(tmp_path / "vals.parquet")))
    # a trace of the same types, what a round trip appends to: one row (id 0) of nulls
    first = {f.name: None for f in SCHEMA} | {"id": 0, "time": 0, "diff": 1}
    pq.write_table(pa.Table.from_pylist([first], schema=SCHEMA), tmp_path / "first.parquet")
    ok(ddcli(store, "ingest", "again", str(tmp_path / "first.parquet")))
    return store


def _parquet(store: str, tmp_path, trace: str) -> pa.Table:
    out = tmp_path / f"{trace}.out.parquet"
    ok(ddcli(store, "history", trace, "-o", str(out)))
    return pq.read_table(out, filters=pc.field("id") != 0).sort_by([("time", "ascending"), ("id", "ascending")])


def test_csv_and_json_lines_write_decimals_exactly_and_binary_as_hex(tmp_path):
    store = _store(tmp_path)
    text = ok(ddcli(store, "history", "vals", "-f", "csv")).stdout
    assert "\x00" not in text
    rows = sorted(csv.DictReader(io.StringIO(text)), key=lambda r: (int(r["time"]), int(r["id"])))
    for col, want in TEXT.items():
        assert [None if r[col] == "\\N" else r[col] for r in rows] == want, col
    lines = ok(ddcli(store, "history", "vals", "-f", "jsonl")).stdout.splitlines()
    records = sorted((json.loads(x) for x in lines), key=lambda r: (r["time"], r["id"]))
    for col, want in TEXT.items():
        assert [r[col] for r in records] == want, col


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_what_ddcli_writes_ingests_back_unchanged_into_a_trace_of_its_types(tmp_path, fmt):
    store = _store(tmp_path)
    written = tmp_path / f"h.{fmt}"
    ok(ddcli(store, "history", "vals", "-o", str(written)))
    ok(ddcli(store, "ingest", "again", str(written)))
    want = _table().sort_by([("time", "ascending"), ("id", "ascending")])
    assert _parquet(store, tmp_path, "vals").equals(want)
    assert _parquet(store, tmp_path, "again").equals(want)


def test_text_that_is_not_hex_is_refused_in_a_binary_column_naming_row_and_value(tmp_path):
    store = _store(tmp_path)
    (tmp_path / "bad.csv").write_text("id,money,big,blob,time\n7,1.00,1,00ff,3\n8,1.00,1,zz,3\n")
    err = one_line_error(ddcli(store, "ingest", "again", str(tmp_path / "bad.csv")))
    assert "row 2" in err and "'zz'" in err and "hex" in err, err


def test_an_instant_whose_local_time_is_before_the_year_1_ingests_keyed_by_it_and_prints_in_utc(tmp_path):
    """0001-01-01T00:00Z is still the year 0 in New York: every output prints it in UTC."""
    store = str(tmp_path / "store")
    first = datetime(1, 1, 1, tzinfo=timezone.utc)
    later = datetime(2020, 1, 1, 12, tzinfo=timezone.utc)
    ny = pa.timestamp("us", "America/New_York")
    table = pa.table({"ts": pa.array([first, later], ny), "n": [1, 2], "time": [0, 0]})
    pq.write_table(table, tmp_path / "old.parquet")
    ok(ddcli(store, "ingest", "old", str(tmp_path / "old.parquet"), "--key", "ts"))
    rows = [json.loads(x) for x in ok(ddcli(store, "query", "old", "--json")).stdout.splitlines()]
    assert sorted((datetime.fromisoformat(r["ts"]), r["n"]) for r in rows) == [(first, 1), (later, 2)]
    assert "0001-01-01T00:00:00+00:00" in ok(ddcli(store, "history", "old", "-f", "csv")).stdout
    assert "0001-01-01 00:00:00+00:00" in ok(ddcli(store, "query", "old")).stdout
