"""A reduce task holds its input under a budget.

A task that receives every row of its keys through the shuffle (a first run, a big run of
user logic, a loop round against its view, a split's second stage) must not hold them
whole, however hot a key. ``ops/reduce/held_rows.py`` keeps them in Arrow up to the budget and
spills them to DuckDB beyond it; ``reduce_held`` (``ops/reduce/budget.py``) then reduces
them in shares by value or in groups of keys. Checked without Spark against the plain
reference at every time (d = 1 and d = 2, hot keys with retractions), that no share or
group brings much more than the budget into Arrow, and the one-line error for a key that
cannot be split and is over the grid's budget.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

import ops.reduce.budget as rl
from ops.errors import KeyTooLarge
from ops.reduce.held_rows import HeldRows
from ops.reduce.kernel import reduce_delta
from ops.reduce.operator import output_arrow_schema
from tests.helpers.reduce_refs import (KEYS, KTYPES, REDUCERS, VALUES, VTYPES, check_accumulation, consolidated,
                                       hot_rows, make_table)

# a sum of doubles is exact (ops/exact_sum.py) and not reduced in shares: it is among GROUPED
NAMES = ["count", "count_distinct", "sum_int", "min", "max_str", "topk", "distinct", "threshold"]
CASES = [(d, n) for d in (1, 2) for n in NAMES]
BUDGET = 60


def _held(table: pa.Table, budget: int) -> HeldRows:
    return HeldRows(table.to_batches(max_chunksize=17), budget)


def _case(rng: random.Random, d: int, name: str, shares_ok: bool, budget: int = BUDGET):
    """One random hot-key input held with ``budget``: (rows, the task's output changes)."""
    make, _ = REDUCERS[name]
    rows = hot_rows(rng, d, 500 if d == 1 else 260, 60 if d == 1 else 6, rows_per_key=60)
    table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
    reducer = make()
    values_schema = table.select(VALUES).schema
    assert rl.in_shares(reducer, values_schema) == shares_ok
    out_arrow = output_arrow_schema(table.select(KEYS).schema, reducer.output_schema(values_schema), d)
    held = _held(table, budget)
    try:
        assert held.spilled and held.rows == table.num_rows
        out = rl.reduce_held(held, KEYS, VALUES, d, reducer, out_arrow, budget=budget, shares_ok=shares_ok)
    finally:
        held.close()
    assert consolidated(out) == consolidated(reduce_delta(table, KEYS, VALUES, d, reducer))
    return rows, out


def test_rows_within_the_budget_stay_in_arrow_and_beyond_it_spill_whole():
    table = make_table(hot_rows(random.Random(1), 1, 200, 30), KEYS, VALUES, 1, KTYPES, VTYPES)
    within = _held(table, table.num_rows)
    assert not within.spilled and within.table.equals(table)
    over = _held(table, table.num_rows - 1)
    try:
        assert over.spilled and over.table is None and over.rows == table.num_rows
        back = over.select()
        assert back.schema == table.schema
        key = lambda t: sorted(map(str, t.to_pylist()))  # noqa: E731
        assert key(back) == key(table) and key(pa.Table.from_batches(list(over))) == key(table)
    finally:
        over.close()
    assert HeldRows.of(within, 1) is within and _held(table.slice(0, 0), 5).rows == 0


@pytest.mark.parametrize("d,name", CASES, ids=[f"d{d}-{n}" for d, n in CASES])
def test_a_held_input_over_the_budget_is_reduced_in_shares_exactly(monkeypatch, d, name):
    _, plain = REDUCERS[name]
    seen = []  # rows of every share a first stage received
    real = rl._first_stage

    def recording(*a):
        stage = real(*a)
        return lambda t: seen.append(t.num_rows) or stage(t)

    monkeypatch.setattr(rl, "_first_stage", recording)
    rng = random.Random(f"held-{name}-{d}")
    for _ in range(3):
        seen.clear()
        rows, out = _case(rng, d, name, shares_ok=True)
        assert len(seen) >= 2 and max(seen) <= 3 * BUDGET, seen
        check_accumulation(rows, out, d, plain)


GROUPED = [(d, n) for d in (1, 2) for n in ("perkey", "sum_float")]


@pytest.mark.parametrize("d,name", GROUPED, ids=[f"d{d}-{n}" for d, n in GROUPED])
def test_a_held_input_that_cannot_be_split_is_reduced_in_key_groups_exactly(monkeypatch, d, name):
    """User logic keeps a key whole: each hot key (over the budget) is a group of its own,
    reduced in slices of time, each carrying the key's collection just before it (the
    function still sees the whole collection at every time)."""
    _, plain = REDUCERS[name]
    sizes, slices = [], []
    real, real_slices = rl._held_group, rl._time_slices
    monkeypatch.setattr(rl, "_held_group", lambda *a: (lambda t: sizes.append(t.num_rows) or t)(real(*a)))
    monkeypatch.setattr(rl, "_time_slices", lambda *a: (slices.append(a[2]) or (t, f) for t, f in real_slices(*a)))
    rng = random.Random(f"held-groups-{name}-{d}")
    for _ in range(2):
        sizes.clear()
        slices.clear()
        rows, out = _case(rng, d, name, shares_ok=False, budget=100)
        # both hot keys (over the budget) alone, each group in several slices
        assert len({r[0] for r in rows}) == len(set(slices)) == 2 and len(slices) >= 4 and not sizes, slices
        check_accumulation(rows, out, d, plain)


@pytest.mark.parametrize("d", [1, 2])
def test_keys_under_the_budget_that_cannot_be_split_are_reduced_a_group_of_keys_at_a_time(monkeypatch, d):
    """Many small keys of user logic spilled together: groups of whole keys of about the
    budget each, equal rows summed, no slices."""
    _, plain = REDUCERS["perkey"]
    sizes, slices = [], []
    real, real_slices = rl._held_group, rl._time_slices
    monkeypatch.setattr(rl, "_held_group", lambda *a: (lambda t: sizes.append(t.num_rows) or t)(real(*a)))
    monkeypatch.setattr(rl, "_time_slices", lambda *a: (slices.append(a[2]) or (t, f) for t, f in real_slices(*a)))
    rng = random.Random(f"small-groups-{d}")
    rows = hot_rows(rng, d, 300, 30 if d == 1 else 5, keys=12, rows_per_key=10)
    table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
    reducer = REDUCERS["perkey"][0]()
    out_arrow = output_arrow_schema(table.select(KEYS).schema, reducer.output_schema(table.select(VALUES).schema), d)
    held = _held(table, 100)
    try:
        out = rl.reduce_held(held, KEYS, VALUES, d, reducer, out_arrow, budget=100, shares_ok=False)
    finally:
        held.close()
    assert not slices and len(sizes) >= 3 and 0 < sum(sizes) <= len(rows), sizes
    check_accumulation(rows, out, d, plain)


def test_a_held_key_over_the_grid_budget_is_one_clear_error(monkeypatch):
    make, _ = REDUCERS["perkey"]
    table = make_table(hot_rows(random.Random(4), 1, 400, 30), KEYS, VALUES, 1, KTYPES, VTYPES)
    reducer = make()
    out_arrow = output_arrow_schema(table.select(KEYS).schema, reducer.output_schema(table.select(VALUES).schema), 1)
    monkeypatch.setenv("DDCLI_REDUCE_MEMORY", str(100 * 120))  # 100 cells
    held = _held(table, BUDGET)
    reads = []
    monkeypatch.setattr(rl, "_held_group", lambda *a: reads.append(a))
    try:
        error = r"key \{'k': \d+, 'g': '[pq]'\} holds [\d,]+ updates in one task, over the budget of 100 cells"
        with pytest.raises(KeyTooLarge, match=error):
            rl.reduce_held(held, KEYS, VALUES, 1, reducer, out_arrow, budget=BUDGET, shares_ok=False)
    finally:
        held.close()
    assert not reads  # refused before any key's rows were read back


def _no_value_reference(table: pa.Table, name: str, at: tuple, tcols: list[str]) -> dict:
    """Z(total) - Z(old) at time ``at`` of a count or distinct by ``k`` (no value columns)."""
    total, old = {}, {}
    for r in table.to_pylist():
        if all(r[c] <= a for c, a in zip(tcols, at)):
            total[r["k"]] = total.get(r["k"], 0) + r["diff"]
            if not r["_new"]:
                old[r["k"]] = old.get(r["k"], 0) + r["diff"]
    z: dict = {}
    for acc, sign in ((total, 1), (old, -1)):
        for k, c in acc.items():
            if name == "count" and c != 0:
                z[(k, c)] = z.get((k, c), 0) + sign
            elif name == "distinct" and c > 0:
                z[(k,)] = z.get((k,), 0) + sign
    return {k: v for k, v in z.items() if v}


def _no_value_table(rng: random.Random, d: int, n: int) -> pa.Table:
    """Three keys, no value columns, retractions; d = 1: 400 times; d = 2: 40 x 5."""
    times = {"time": [rng.randrange(400) for _ in range(n)]} if d == 1 else \
        {"time_0": [rng.randrange(40) for _ in range(n)], "time_1": [rng.randrange(5) for _ in range(n)]}
    return pa.table({"k": [rng.randrange(3) for _ in range(n)], **times,
                     "diff": [rng.choice([1, 1, 2, -1]) for _ in range(n)],
                     "_new": [rng.random() < 0.4 for _ in range(n)]})


NO_VALUE = [(d, name) for d in (1, 2) for name in ("count", "distinct")]


@pytest.mark.parametrize("d,name", NO_VALUE, ids=[f"d{d}-{n}" for d, n in NO_VALUE])
def test_a_key_without_value_columns_over_the_budget_is_reduced_in_slices_of_time(monkeypatch, d, name):
    """No value columns to split a key by: a key over the budget is reduced in slices of
    consecutive values of its first time coordinate, each with the earlier rows carried in
    as one row per (key, other coordinates, new or old), so no slice holds much more than
    the budget. Checked at every point of the times' grid."""
    import itertools

    from ops.dataflow.reducers import Count, Distinct
    from storage.lattice import time_columns
    reducer = Count() if name == "count" else Distinct()
    rng, budget, tcols = random.Random(f"slices-{name}-{d}"), 50, time_columns(d)
    table = _no_value_table(rng, d, 600)
    out_arrow = output_arrow_schema(table.select(["k"]).schema, reducer.output_schema(pa.schema([])), d)
    sizes, real = [], rl._time_slices
    monkeypatch.setattr(rl, "_time_slices", lambda *a: ((sizes.append(t.num_rows) or (t, f)) for t, f in real(*a)))
    held = _held(table, budget)
    try:
        out = rl.reduce_held(held, ["k"], [], d, reducer, out_arrow, budget=budget, shares_ok=False)
    finally:
        held.close()
    carried = 2 if d == 1 else 2 * 5 + 15  # a slice's carried rows, and (d = 2) the rows at its last first coordinate
    assert len(sizes) >= 3 * 3 and max(sizes) <= budget + carried, sizes  # every key sliced
    axes = [sorted(set(table.column(c).to_pylist())) for c in tcols]
    for at in itertools.product(*[a + [a[-1] + 1] for a in axes]):
        got: dict = {}
        for r in out.to_pylist():
            if all(r[c] <= a for c, a in zip(tcols, at)):
                row = (r["k"], r["count"]) if name == "count" else (r["k"],)
                got[row] = got.get(row, 0) + r["diff"]
        assert {k: v for k, v in got.items() if v} == _no_value_reference(table, name, at, tcols), at


def test_a_key_without_value_columns_at_d2_over_the_grid_budget_is_one_clear_error(monkeypatch):
    """Its slices still hold the key whole within each slice: under the grid's memory budget
    as ever, and refused with one line over it."""
    from ops.dataflow.reducers import Count
    rng, n = random.Random(1), 400
    table = pa.table({"k": [rng.randrange(2) for _ in range(n)],
                      **{f"time_{i}": [rng.randrange(6) for _ in range(n)] for i in range(2)},
                      "diff": [rng.choice([1, 1, -1]) for _ in range(n)], "_new": [rng.random() < 0.3 for _ in range(n)]})
    out_arrow = output_arrow_schema(table.select(["k"]).schema, Count().output_schema(pa.schema([])), 2)
    held = _held(table, 50)
    try:
        out = rl.reduce_held(held, ["k"], [], 2, Count(), out_arrow, budget=50, shares_ok=False)
    finally:
        held.close()
    assert out.num_rows and consolidated(out) == consolidated(reduce_delta(table, ["k"], [], 2, Count()))
    monkeypatch.setenv("DDCLI_REDUCE_MEMORY", str(10 * 120))  # 10 cells: the grid refuses the key
    held = _held(table, 50)
    try:
        with pytest.raises(KeyTooLarge, match="over the budget of 10"):
            rl.reduce_held(held, ["k"], [], 2, Count(), out_arrow, budget=50, shares_ok=False)
    finally:
        held.close()


def test_spilled_rows_of_keys_without_new_updates_are_dropped_before_the_reduce(monkeypatch):
    """A loop round's task receives its whole share of the view: only the keys its new
    updates touch are reduced, whole when their rows fit the budget."""
    make, plain = REDUCERS["min"]
    rng = random.Random(7)
    rows = [r for r in hot_rows(rng, 1, 300, 40, keys=6, rows_per_key=30)]
    rows = [(k, v, t, df, nw and k[0] == 3) for k, v, t, df, nw in rows]  # only key 3 has new updates
    table = make_table(rows, KEYS, VALUES, 1, KTYPES, VTYPES)
    touched = sum(1 for r in rows if r[0][0] == 3)
    assert 0 < touched < 120 < table.num_rows
    reducer = make()
    out_arrow = output_arrow_schema(table.select(KEYS).schema, reducer.output_schema(table.select(VALUES).schema), 1)
    shares = []
    monkeypatch.setattr(rl, "held_shares", lambda *a, **k: shares.append(a) or [])
    held = _held(table, 120)
    try:
        out = rl.reduce_held(held, KEYS, VALUES, 1, reducer, out_arrow, budget=120, shares_ok=True)
        assert held.rows == touched and not shares  # whole: no shares needed
    finally:
        held.close()
    assert out.num_rows and consolidated(out) == consolidated(reduce_delta(table, KEYS, VALUES, 1, reducer))
    check_accumulation(rows, out, 1, plain)
