"""CSV output and CSV ingest agree on null: ddcli's own CSV ingests back with its nulls and
its empty strings apart.

CSV output writes null as `\\N`, what `ingest` reads as null (storage/files/nulls.py); an
empty text stays an empty field. A text value equal to the marker could not be told from
a null: refused in one line, and `--null STR` on both sides picks another marker.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.cli import ddcli, jsonl, ok, one_line_error

ROWS = [  # text nulls and empty texts, a number null, at several times with retractions
    {"name": "", "city": None, "n": 1, "time": 0, "diff": 1},
    {"name": None, "city": "", "n": None, "time": 0, "diff": 2},
    {"name": "x", "city": None, "n": 3, "time": 1, "diff": 1},
    {"name": None, "city": None, "n": None, "time": 1, "diff": 1},
    {"name": "", "city": "", "n": 5, "time": 2, "diff": 1},
    {"name": None, "city": "", "n": None, "time": 2, "diff": -1},
]
SCHEMA = pa.schema([("name", pa.string()), ("city", pa.string()), ("n", pa.int64()),
                    ("time", pa.int64()), ("diff", pa.int64())])


def _store(tmp_path, rows=ROWS) -> str:
    store = str(tmp_path / "store")
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp_path / "people.parquet")
    ok(ddcli(store, "ingest", "people", str(tmp_path / "people.parquet")))
    return store


def _records(store: str, *command: str) -> list[dict]:
    return jsonl(ok(ddcli(store, *command, "--json")).stdout)


def test_nulls_and_empty_strings_survive_a_csv_round_trip(tmp_path):
    store = _store(tmp_path)
    history = _records(store, "history", "people")
    assert any(r["name"] is None for r in history) and any(r["name"] == "" for r in history)
    ok(ddcli(store, "history", "people", "-o", str(tmp_path / "h.csv")))
    assert "\\N" in (tmp_path / "h.csv").read_text()
    ok(ddcli(store, "ingest", "again", str(tmp_path / "h.csv")))
    assert _records(store, "history", "again") == history
    # a SQL result, ingested as the data of one time
    want = _records(store, "sql", "SELECT name, city, n FROM people ORDER BY ALL")
    ok(ddcli(store, "sql", "SELECT name, city, n FROM people ORDER BY ALL", "-o", str(tmp_path / "s.csv")))
    ok(ddcli(store, "ingest", "from_sql", str(tmp_path / "s.csv"), "--time", "0"))
    key = lambda r: json.dumps({c: r[c] for c in ("name", "city", "n")})  # noqa: E731 - null is JSON null
    got = Counter()
    for r in _records(store, "history", "from_sql"):
        got[key(r)] += r["diff"]
    assert got == Counter(key(r) for r in want)


def test_a_query_in_csv_says_null_and_empty_apart(tmp_path):
    """Read with Python's csv module (not ddcli): \\N is null, an empty field the empty text."""
    store = _store(tmp_path)
    for t in range(3):
        want = _records(store, "query", "people", "--as-of", str(t))
        text = ok(ddcli(store, "query", "people", "--as-of", str(t), "-f", "csv")).stdout
        got = [{k: (None if v == "\\N" else int(v) if k in ("n", "count") else v) for k, v in r.items()}
               for r in csv.DictReader(io.StringIO(text))]
        assert got == want and any(r["name"] is None for r in got) == any(r["name"] is None for r in want)


@pytest.mark.parametrize("command", [["query", "people"], ["history", "people"], ["sql", "SELECT * FROM people"]],
                         ids=lambda c: c[0])
def test_a_text_equal_to_the_null_marker_is_refused_unless_another_marker_is_given(tmp_path, command):
    rows = ROWS + [{"name": "\\N", "city": "", "n": 7, "time": 2, "diff": 1}]
    store = _store(tmp_path, rows)
    err = one_line_error(ddcli(store, *command, "-f", "csv"))
    assert "'name'" in err and "--null" in err
    assert not (tmp_path / "out.csv").exists()
    ok(ddcli(store, *command, "-f", "csv", "--null", "NULL", "-o", str(tmp_path / "out.csv")))
    if command[0] == "history":
        ok(ddcli(store, "ingest", "again", str(tmp_path / "out.csv"), "--null", "NULL"))
        assert _records(store, "history", "again") == _records(store, "history", "people")
