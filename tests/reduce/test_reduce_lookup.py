"""A small run's reduce task looks up its keys' stored old updates under a budget.

A run below the split of big runs that changes a hot key whose history retracts must not
read all of the key's old updates into its task: over ``budget`` old updates the task
reduces its keys' rows in shares one after another (``ops/reduce/budget.py``).
Checked without Spark against the plain reference at every time, d = 1 and d = 2, with a
budget far below the keys' history, and that no share brings more than about the budget
into Arrow; through a pipeline over runs with compaction in tests/reduce/test_reduce_hot_keys.py.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ops.reduce.budget as rl
from ops.reduce.kernel import reduce_delta
from ops.reduce.old_updates import OldLookup
from ops.reduce.operator import output_arrow_schema
from tests.helpers.reduce_refs import (KEYS, KTYPES, REDUCERS, VALUES, VTYPES, check_accumulation, consolidated,
                                       hot_rows, make_table)

# a sum of doubles is exact (ops/exact_sum.py) and not reduced in shares: it is among GROUPED
NAMES = ["count", "count_distinct", "sum_int", "min", "max_str", "topk", "distinct", "threshold"]
CASES = [(d, n) for d in (1, 2) for n in NAMES]
BUDGET = 40


def _old_and_new(rng: random.Random, d: int) -> list:
    """A hot history (old, many retractions) and a few changes after it (new): with d = 1
    every new time is later than every old one, as in a stored trace."""
    old = [r[:4] + (False,) for r in hot_rows(rng, d, 500 if d == 1 else 260, 40 if d == 1 else 6, rows_per_key=60)]
    new = [r[:4] + (True,) for r in hot_rows(rng, d, 30, 40 if d == 1 else 6, rows_per_key=60)]
    if d == 1:
        new = [(k, v, (t[0] + 41,), df, nw) for k, v, t, df, nw in new]
    return old + new


def _write_old(tmp_path, table: pa.Table) -> list[str]:
    """The old updates as two key-sorted layer files, as an arrangement stores them."""
    old = table.filter(pa.compute.invert(table.column("_new"))).drop_columns(["_new"])
    half = old.num_rows // 2
    files = []
    for i, part in enumerate((old.slice(0, half), old.slice(half))):
        path = str(tmp_path / f"layer{i}.parquet")
        pq.write_table(part.sort_by([(k, "ascending") for k in KEYS]), path)
        files.append(path)
    return files


def _lookup_case(folder, rng: random.Random, d: int, name: str, shares_ok: bool):
    """One random case written as layer files in ``folder`` and looked up with ``BUDGET``:
    (every row, the whole table, the task's output changes)."""
    make, _ = REDUCERS[name]
    rows = _old_and_new(rng, d)
    table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
    folder.mkdir()
    files = _write_old(folder, table)
    new = table.filter(table.column("_new"))
    reducer = make()
    values_schema = table.select(VALUES).schema
    assert rl.in_shares(reducer, values_schema) == shares_ok
    out_arrow = output_arrow_schema(table.select(KEYS).schema, reducer.output_schema(values_schema), d)
    try:
        out = rl.reduce_with_lookup(new, files, KEYS, VALUES, d, reducer, out_arrow, summary=False,
                                    budget=BUDGET, shares_ok=shares_ok)
    finally:
        OldLookup.release()
    assert consolidated(out) == consolidated(reduce_delta(table, KEYS, VALUES, d, reducer))
    return rows, table, out


@pytest.mark.parametrize("d,name", CASES, ids=[f"d{d}-{n}" for d, n in CASES])
def test_old_updates_over_the_budget_are_reduced_in_shares_exactly(tmp_path, monkeypatch, d, name):
    make, plain = REDUCERS[name]
    seen = []  # (old rows, all rows) of every share a first stage received
    real = rl._first_stage

    def recording(*a):
        stage = real(*a)
        return lambda t: seen.append((t.num_rows - sum(t.column("_new").to_pylist()), t.num_rows)) or stage(t)

    monkeypatch.setattr(rl, "_first_stage", recording)
    rng = random.Random(f"lookup-{name}-{d}")
    for case in range(3):
        seen.clear()
        rows, table, out = _lookup_case(tmp_path / str(case), rng, d, name, shares_ok=True)
        assert len(seen) >= 2 and all(o <= 3 * BUDGET for o, _ in seen), (table.num_rows, seen)
        check_accumulation(rows, out, d, plain)


GROUPED = [(d, n) for d in (1, 2) for n in ("perkey", "sum_float")]


@pytest.mark.parametrize("d,name", GROUPED, ids=[f"d{d}-{n}" for d, n in GROUPED])
def test_keys_that_cannot_be_split_are_looked_up_in_groups_exactly(tmp_path, monkeypatch, d, name):
    """User logic keeps a key whole: over the budget the task reads and reduces its keys a
    group at a time (here one key per group); at d = 1 a group's stored updates come back
    accumulated at the first new time, a row per live value row."""
    from ops.operators.keyed_reads import duckdb_keyed_read
    make, plain = REDUCERS[name]
    reads = []
    monkeypatch.setattr("ops.operators.keyed_reads.duckdb_keyed_read",
                        lambda files, keys, key: reads.append(keys.num_rows) or duckdb_keyed_read(files, keys, key))
    accumulated = []  # d = 1: (keys, rows) of each group's old updates, accumulated at the first new time
    real = rl._accumulated_old
    monkeypatch.setattr(rl, "_accumulated_old", lambda look, sql, keys, *a: (
        lambda t: accumulated.append((keys.num_rows, t.num_rows)) or t)(real(look, sql, keys, *a)))
    rng = random.Random(f"groups-{name}-{d}")
    for case in range(2):
        reads.clear()
        accumulated.clear()
        rows, table, out = _lookup_case(tmp_path / str(case), rng, d, name, shares_ok=False)
        groups = accumulated if d == 1 else reads
        assert [g[0] if d == 1 else g for g in groups] == [1, 1], groups  # two hot keys, each alone
        if d == 1:  # at most a row per distinct value row, fewer than the stored updates
            old = table.num_rows - sum(1 for r in rows if r[4])
            assert not reads and 0 < sum(n for _, n in accumulated) < old, (accumulated, old)
        check_accumulation(rows, out, d, plain)


def test_a_key_without_value_columns_looks_up_one_row_of_its_history(tmp_path, monkeypatch):
    """d = 1, no value columns, keys grouped: a key's stored updates come back accumulated
    at the first new time, one row however many they are."""
    from ops.dataflow.reducers import Count
    rng, n = random.Random(5), 600
    table = pa.table({"k": [rng.randrange(2) for _ in range(n)], "time": [rng.randrange(100) for _ in range(n)],
                      "diff": [rng.choice([1, 1, -1]) for _ in range(n)]})
    table = table.append_column("_new", pa.compute.greater_equal(table.column("time"), 80))
    old = table.filter(pa.compute.invert(table.column("_new"))).drop_columns(["_new"])
    path = str(tmp_path / "layer.parquet")
    pq.write_table(old.sort_by([("k", "ascending")]), path)
    new = table.filter(table.column("_new"))
    out_arrow = output_arrow_schema(table.select(["k"]).schema, Count().output_schema(pa.schema([])), 1)
    returned, real = [], rl._accumulated_old
    monkeypatch.setattr(rl, "_accumulated_old", lambda *a: (lambda t: returned.append(t.num_rows) or t)(real(*a)))
    try:
        out = rl.reduce_with_lookup(new, [path], ["k"], [], 1, Count(), out_arrow, summary=False, budget=100,
                                    shares_ok=False)
    finally:
        OldLookup.release()
    assert old.num_rows > 2 * 100 and returned == [1, 1], returned
    assert consolidated(out) == consolidated(reduce_delta(table, ["k"], [], 1, Count()))


def test_a_key_that_cannot_be_split_and_holds_more_than_the_grid_budget_is_one_clear_error(tmp_path, monkeypatch):
    from ops.errors import KeyTooLarge
    make, _ = REDUCERS["perkey"]
    table = make_table(_old_and_new(random.Random(4), 1), KEYS, VALUES, 1, KTYPES, VTYPES)
    files = _write_old(tmp_path, table)
    new = table.filter(table.column("_new"))
    reducer = make()
    out_arrow = output_arrow_schema(table.select(KEYS).schema, reducer.output_schema(table.select(VALUES).schema), 1)
    monkeypatch.setenv("DDCLI_REDUCE_MEMORY", str(100 * 120))  # 100 cells
    try:
        error = r"key \{'k': \d+, 'g': '[pq]'\} holds [\d,]+ stored updates, over the budget of 100 cells"
        with pytest.raises(KeyTooLarge, match=error):
            rl.reduce_with_lookup(new, files, KEYS, VALUES, 1, reducer, out_arrow, summary=False, budget=BUDGET,
                                  shares_ok=False)
    finally:
        OldLookup.release()


def test_within_the_budget_the_old_updates_are_read_whole(tmp_path):
    """At most ``budget`` old updates: the task reads them whole, as before."""
    make, _ = REDUCERS["perkey"]
    rows = _old_and_new(random.Random(3), 1)
    table = make_table(rows, KEYS, VALUES, 1, KTYPES, VTYPES)
    files = _write_old(tmp_path, table)
    new = table.filter(table.column("_new"))
    old_rows = table.num_rows - new.num_rows
    values_schema = table.select(VALUES).schema
    assert not rl.in_shares(make(), values_schema) and rl.in_shares(REDUCERS["min"][0](), values_schema)
    try:
        whole = rl.with_old_updates(new, files, KEYS, VALUES, budget=old_rows)
        assert whole.num_rows == table.num_rows
        assert rl.with_old_updates(new, files, KEYS, VALUES, budget=old_rows - 1) is None
    finally:
        OldLookup.release()


def test_a_worker_that_spilled_takes_its_next_lookup(monkeypatch):
    """A worker's lookups are connections to one database of its process; once a lookup
    spilled to the worker's folder, DuckDB refuses to set that folder again: the next
    lookup in the same worker must still be taken."""
    import os

    from ops.reduce import old_updates
    from storage.blobs.resolve import duckdb_connect
    monkeypatch.setattr(old_updates, "MEMORY_LIMIT", "40MB")
    con = old_updates.limit_memory(duckdb_connect([]))
    try:
        con.sql("SELECT count(*) FROM (SELECT range % 1000 AS a, random() AS r FROM range(4000000) ORDER BY r)").fetchall()
        assert os.listdir(old_updates.spill_directory()), "nothing spilled: the case proves nothing"
        again = old_updates.limit_memory(duckdb_connect([]))
        assert again.sql("SELECT 1").fetchall() == [(1,)]
    finally:
        con.execute("RESET memory_limit")
        old_updates._limited.discard(os.getpid())  # the next lookup limits the database again
