"""The yardstick of ``ddcli bench join`` (docs/bench/join.json): DuckDB's output changes
equal a plain-Python reference, and the bench's check finds an output that differs.

Small side tables (every key's live value replaced at each time) are joined by brute force
at every time; the change from one time to the next is the reference. The check compares a
store's output trace with DuckDB's file, so a wrong output must make it raise.
"""

from __future__ import annotations

import os
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ddcli.bench.against_duckdb.join import check_output, duckdb_changes, side_table
from storage.store import Store


def collection_at(rows: list[dict], value: str, t: int) -> Counter:
    c = Counter()
    for r in rows:
        if r["time"] <= t:
            c[(r["k"], r[value])] += r["diff"]
    return +c


def brute_force_changes(left: list[dict], right: list[dict], times: int) -> Counter:
    out, before = Counter(), Counter()
    for t in range(times):
        a, b = collection_at(left, "a", t), collection_at(right, "b", t)
        now = Counter({(k, x, y, t): m * n for (k, x), m in a.items() for (k2, y), n in b.items() if k == k2})
        for (k, x, y, _), m in now.items():
            out[(k, x, y, t)] += m
        for (k, x, y, _), m in before.items():
            out[(k, x, y, t)] -= m
        before = now
    return nonzero(out)


def nonzero(c: Counter) -> dict:
    return {key: m for key, m in c.items() if m != 0}


@pytest.fixture
def sides(tmp_path):
    paths = []
    for name, col, seed in (("l", "a", 1), ("r", "b", 2)):
        table = side_table(4, 7, col, seed=seed)
        if name == "r":  # a key only on one side, and a time where the right changes alone
            table = table.filter(pa.compute.not_equal(table["k"], 3))
        path = str(tmp_path / f"{name}.parquet")
        pq.write_table(table, path)
        paths.append(path)
    return paths


def test_duckdb_changes_equal_a_brute_force_join_at_every_time(sides, tmp_path):
    out = str(tmp_path / "duck.parquet")
    duckdb_changes(*sides, out)
    got = Counter()
    for r in pq.read_table(out).to_pylist():
        got[(r["k"], r["a"], r["b"], r["time"])] += r["diff"]
    left, right = (pq.read_table(p).to_pylist() for p in sides)
    expected = brute_force_changes(left, right, 7)
    assert expected and nonzero(got) == expected


def test_the_check_accepts_equal_outputs_and_finds_a_wrong_one(sides, tmp_path):
    out = str(tmp_path / "duck.parquet")
    duckdb_changes(*sides, out)
    st = Store(str(tmp_path / "store"))
    st.ingest("j", [out])
    assert check_output(st, out) == pq.read_table(out).num_rows > 0
    wrong = str(tmp_path / "wrong.parquet")
    duckdb.connect().execute(f"COPY (SELECT k, a, b, time + (k = 2 AND time = 5)::BIGINT AS time, diff "
                             f"FROM read_parquet('{out}')) TO '{wrong}' (FORMAT parquet)")
    with pytest.raises(AssertionError, match="differs from DuckDB's"):
        check_output(st, wrong)
