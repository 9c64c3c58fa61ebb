"""``ddcli ingest --type COL=TYPE``: columns parsed as the type asked for, not inferred.

A decimal is read exactly from its text (CSV, and JSON numbers too, never through a
double; Python's ``decimal`` is the reference), a value that does not fit is one line
naming the file, row, column and value (exit 2, the store untouched), and the other types
parse as asked (a numeric-looking text stays text)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from storage.store import Store
from tests.conftest import tree_digest
from tests.helpers.cli import cli, ok, one_line_error, write

# 0.100000000000000001 through a double would be 0.1000000000000000055...: scale 18 tells them apart
EXACT = ["0.100000000000000001", "12345678901234567890.123456789012345678", "-0.000000000000000003"]


def _column(store: str, trace: str, column: str) -> pa.ChunkedArray:
    st = Store(store)
    return st.read_updates(st.trace(trace)).column(column)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_decimals_asked_for_are_parsed_exactly_from_their_text(tmp_path, fmt):
    store = str(tmp_path / "store")
    if fmt == "csv":
        text = "id,price,time\n" + "".join(f"{i},{v},1\n" for i, v in enumerate(EXACT))
    else:  # JSON numbers, as the file writes them
        text = "".join(f'{{"id": {i}, "price": {v}, "time": 1}}\n' for i, v in enumerate(EXACT))
    ok(cli(store, "ingest", "t", write(tmp_path / f"p.{fmt}", text), "--type", "price=decimal(38,18)"))
    col = _column(store, "t", "price")
    assert col.type == pa.decimal128(38, 18)
    assert sorted(col.to_pylist()) == sorted(Decimal(v) for v in EXACT)
    assert Store(store).trace("t").key == ["id"]  # the file's first column, as without --type


@pytest.mark.parametrize("fmt,row,value", [("csv", 2, "1.234"), ("csv", 3, "1000.5"), ("jsonl", 2, "1.234")])
def test_a_value_that_does_not_fit_the_decimal_is_one_line_and_changes_nothing(tmp_path, fmt, row, value):
    store = str(tmp_path / "store")
    ok(cli(store, "ingest", "other", write(tmp_path / "o.csv", "a,time\n1,1\n")))
    before = tree_digest(store)
    values = ["1.5", value] if row == 2 else ["1.5", "2", value]
    if fmt == "csv":
        text = "id,price,time\n" + "".join(f"{i},{v},1\n" for i, v in enumerate(values))
    else:
        text = "".join(f'{{"id": {i}, "price": {v}, "time": 1}}\n' for i, v in enumerate(values))
    path = write(tmp_path / f"bad.{fmt}", text)
    line = one_line_error(cli(store, "ingest", "t", path, "--type", "price=decimal(5,2)"))
    for part in (path, f"row {row}", "column price", value, "decimal(5,2)"):
        assert part in line, (part, line)
    assert tree_digest(store) == before


def test_other_types_parse_as_asked(tmp_path):
    store = str(tmp_path / "store")
    text = "id,code,n,x,flag,day,at,time\n1,007,3,2,true,2024-02-29,2024-02-29 10:30:00,1\n"
    ok(cli(store, "ingest", "t", write(tmp_path / "a.csv", text), "--type", "code=string", "--type", "n=int",
           "--type", "x=double", "--type", "flag=boolean", "--type", "day=date", "--type", "at=timestamp"))
    row = Store(store).read_updates(Store(store).trace("t")).to_pylist()[0]
    assert row["code"] == "007" and row["n"] == 3 and row["x"] == 2.0 and isinstance(row["x"], float)
    assert row["flag"] is True and row["day"] == datetime.date(2024, 2, 29)
    assert row["at"] == datetime.datetime(2024, 2, 29, 10, 30)


@pytest.mark.parametrize("args,words", [
    (["--type", "price=money"], ["'money'", "decimal(P,S)"]),
    (["--type", "price=decimal(40,2)"], ["precision"]),
    (["--type", "price"], ["COLUMN=TYPE"]),
    (["--type", "nope=int"], ["'nope'", "does not have"]),
])
def test_a_wrong_type_request_is_one_line(tmp_path, args, words):
    store = str(tmp_path / "store")
    line = one_line_error(cli(store, "ingest", "t", write(tmp_path / "a.csv", "id,price,time\n1,2.5,1\n"), *args))
    for w in words:
        assert w in line, (w, line)


def test_a_type_other_than_the_traces_is_refused(tmp_path):
    store = str(tmp_path / "store")
    ok(cli(store, "ingest", "t", write(tmp_path / "a.csv", "id,price,time\n1,2.5,1\n"), "--type", "price=decimal(9,2)"))
    ok(cli(store, "ingest", "t", write(tmp_path / "b.csv", "id,price,time\n2,3.25,2\n"), "--type", "price=decimal(9,2)"))
    line = one_line_error(cli(store, "ingest", "t", write(tmp_path / "c.csv", "id,price,time\n3,1,3\n"),
                              "--type", "price=double"))
    assert "decimal(9,2)" in line and "'price'" in line
