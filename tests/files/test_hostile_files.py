"""Hostile update files: one line within seconds, never a hang, an internal error or a
silently wrapped sum; the store byte-identical afterwards.

The FIFO and the widest file run in a real process with a timeout, so a regression is a
failed test rather than a hung suite.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import tree_digest
from tests.helpers.cli import WORDS, ddcli, ok, one_line_error, parse_csv
from tests.helpers.operations import run_ddcli

INT64_MAX = 2**63 - 1


@pytest.fixture
def words(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    return store


def _refused(store, path, *more) -> str:
    before = tree_digest(store)
    err = one_line_error(ddcli(store, "ingest", "h", str(path), *more))
    assert "internal error" not in err
    assert tree_digest(store) == before
    return err


def test_a_fifo_is_refused_at_once(words, tmp_path):
    fifo = tmp_path / "updates.csv"
    os.mkfifo(fifo)
    before = tree_digest(words)
    r = run_ddcli(["ingest", "h", str(fifo)], words, timeout=120)  # no writer: a read would block forever
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert "is a FIFO (named pipe); update files must be regular files" in r.stderr
    assert tree_digest(words) == before


def test_a_csv_of_100000_columns_is_refused_with_the_limit(words, tmp_path):
    wide = tmp_path / "wide.csv"
    n = 100_000
    wide.write_text(",".join(["time"] + [f"c{i}" for i in range(n)]) + "\n" + ",".join(["1"] + ["0"] * n) + "\n")
    before = tree_digest(words)
    r = run_ddcli(["ingest", "h", str(wide)], words, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "has 100,001 columns; at most 1,000 are allowed" in r.stderr and r.stderr.count("\n") == 1
    assert tree_digest(words) == before


def test_wide_json_lines_and_parquet_are_refused_with_the_limit(words, tmp_path):
    n = 1_500
    row = {"time": 1, **{f"c{i}": 0 for i in range(n)}}
    jl = tmp_path / "wide.jsonl"
    jl.write_text(json.dumps(row) + "\n")
    assert "has 1,501 columns; at most 1,000 are allowed" in _refused(words, jl)
    pqf = tmp_path / "wide.parquet"
    pq.write_table(pa.table({k: [v] for k, v in row.items()}), pqf)
    assert "has 1,501 columns; at most 1,000 are allowed" in _refused(words, pqf)


@pytest.mark.parametrize("value", ["[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000,
                                   "[" * 100_000])
def test_json_nested_100000_deep_is_one_line(words, tmp_path, value):
    """Python's json stops at its recursion limit; pyarrow's parser would crash the process."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"word": "a", "time": 1}\n{"word": "' + "[" * 5_000 + '", "time": 1}\n'
                    '{"word": ' + value + ', "time": 1}\n')
    before = tree_digest(words)
    r = run_ddcli(["ingest", "h", str(deep)], words, timeout=120)  # a crash is a failure, not a dead worker
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "deep.jsonl: line 3: values nested too deeply to read" in r.stderr
    assert tree_digest(words) == before


def test_a_10_mb_line_is_ingested_whole(words, tmp_path):
    long = tmp_path / "long.csv"
    long.write_text("word,time\n" + "x" * 10_000_000 + ",7\nshort,7\n")
    ok(ddcli(words, "ingest", "h", str(long)))
    rows = parse_csv(ok(ddcli(words, "sql", "SELECT length(word) AS n FROM h ORDER BY n", "-f", "csv")).stdout)
    assert [int(r["n"]) for r in rows] == [5, 10_000_000]


@pytest.mark.parametrize("name, make", [
    ("object.jsonl", lambda p: p.write_text('{"word": {"a": 1}, "time": 1}\n{"word": {"a": 2}, "time": 1}\n')),
    ("array.jsonl", lambda p: p.write_text('{"word": [1, 2], "time": 1}\n')),
    ("struct.parquet", lambda p: pq.write_table(
        pa.table({"word": pa.array([{"a": 1}], pa.struct([("a", pa.int64())])), "time": [1]}), p)),
    ("list.parquet", lambda p: pq.write_table(pa.table({"word": pa.array([[1, 2]]), "time": [1]}), p)),
    ("map.parquet", lambda p: pq.write_table(
        pa.table({"word": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())), "time": [1]}), p)),
])
def test_nested_columns_are_refused(words, tmp_path, name, make):
    path = tmp_path / name
    make(path)
    err = _refused(words, path)
    assert "column word: has the nested type" in err and "data columns must be flat" in err


def test_float16_is_refused(words, tmp_path):
    path = tmp_path / "half.parquet"
    pq.write_table(pa.table({"h": pa.array(np.array([1.5], dtype=np.float16)), "time": [1]}), path)
    assert "column h: has type float16" in _refused(words, path)


def test_diffs_that_overflow_within_a_file_are_refused(words, tmp_path):
    path = tmp_path / "overflow.parquet"
    pq.write_table(pa.table({"w": ["a", "a", "b"], "time": [1, 1, 1], "diff": [2**62, 2**62, 1]}), path)
    err = _refused(words, path)
    assert f"add up to {2**63:,}" in err and "beyond the int64 range" in err and "nothing was ingested" in err


def test_diffs_whose_sum_would_overflow_when_compact_consolidates_are_refused(tmp_path):
    store = str(tmp_path / "store")
    files = []
    for t, diff in ((1, 2**62), (2, 2**62 + 5)):
        files.append(tmp_path / f"part{t}.parquet")
        pq.write_table(pa.table({"w": ["a"], "time": [t], "diff": [diff]}), files[-1])
    ok(ddcli(store, "ingest", "big", str(files[0])))
    # compaction to time 3 could advance both updates onto one: their sum would leave int64
    before = tree_digest(store)
    err = one_line_error(ddcli(store, "ingest", "big", str(files[1])))
    assert f"add up to {2**63 + 5:,}" in err and "nothing was ingested" in err
    assert tree_digest(store) == before
    ok(ddcli(store, "advance", "big", "--since", "3"))
    ok(ddcli(store, "compact", "--full"))
    rows = parse_csv(ok(ddcli(store, "sql", "SELECT SUM(diff)::VARCHAR AS s FROM big", "-f", "csv")).stdout)
    assert int(rows[0]["s"]) == 2**62
