"""reduce on the tables people count: few keys, many distinct rows each, many times.

The kernel is checked against the plain reference (the defining property at
every time of a box, as tests/reduce/test_reduce_kernel.py does) on hot keys, for d = 1 (the
sweeps) and d = 2; under a memory budget far below what a dense (value rows x times)
array of the key would need; and through pipelines over several runs with compaction.
"""

from __future__ import annotations

import random
import tracemalloc
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from ops.errors import KeyTooLarge
from ops.reduce.kernel import Count, Min, PerKey, Sum, TopK, reduce_delta
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench
from tests.helpers.reduce_refs import (KEYS, KTYPES, REDUCERS, VALUES, VTYPES, check_accumulation, check_shape,
                                       consolidated, hot_rows, make_table)

pytestmark = pytest.mark.usefixtures("on_spark")  # Spark's tasks are what they test


@pytest.mark.parametrize("d,n,tmax", [(1, 400, 60), (2, 160, 7)], ids=["d1", "d2"])
@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_hot_keys_against_the_plain_reference(name, d, n, tmax):
    make, plain = REDUCERS[name]
    rng = random.Random(f"hot-{name}-{d}")
    for case in range(3):
        rows = hot_rows(rng, d, n, tmax)
        table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
        reducer = make()
        # small chunks and budgets must not change the answer
        out = reduce_delta(table, KEYS, VALUES, d, reducer, max_rows=97, max_cells=500)
        check_shape(out, table, d, reducer)
        check_accumulation(rows, out, d, plain)


@pytest.mark.parametrize("name", ["count", "sum_int", "sum_float", "count_distinct", "min", "topk"])
def test_insertions_only_against_the_plain_reference(name):
    """Streams without retractions (count and sum then never tell value rows apart)."""
    make, plain = REDUCERS[name]
    rng = random.Random(f"inserts-{name}")
    for case in range(3):
        rows = [r for r in hot_rows(rng, 1, 300, 50) if r[3] > 0]
        table = make_table(rows, KEYS, VALUES, 1, KTYPES, VTYPES)
        out = reduce_delta(table, KEYS, VALUES, 1, make(), max_rows=113)
        check_accumulation(rows, out, 1, plain)


# ------------------------------------------------------------------ memory


def _one_hot_key(n_rows: int, n_times: int, seed: int = 5) -> pa.Table:
    """One key, ``n_rows`` distinct rows (unique ids) each inserted at one time and a third
    of them retracted later: the dense grid has n_rows x n_times cells."""
    rng = np.random.default_rng(seed)
    ins = rng.integers(0, n_times, n_rows)
    gone = rng.random(n_rows) < 1 / 3
    dels = np.minimum(ins + rng.integers(1, n_times, n_rows), n_times - 1)
    sel = gone & (dels > ins)
    ids = np.r_[np.arange(n_rows), np.arange(n_rows)[sel]]
    amount = rng.integers(0, 10_000, n_rows)
    return pa.table({
        "k": np.zeros(len(ids), np.int64),
        "id": ids,
        "amount": amount[ids],
        "time": np.r_[ins, dels[sel]].astype(np.int64),
        "diff": np.r_[np.ones(n_rows, np.int64), -np.ones(int(sel.sum()), np.int64)],
        "_new": np.ones(len(ids), bool),
    })


def _expected_by_time(table: pa.Table, n_times: int, f) -> dict[int, object]:
    """An independent answer: for every time, ``f`` of the rows present then."""
    ids = table.column("id").to_numpy()
    amount = table.column("amount").to_numpy()
    time = table.column("time").to_numpy()
    diff = table.column("diff").to_numpy()
    out = {}
    for t in range(n_times):
        live = np.zeros(ids.max() + 1, np.int64)
        np.add.at(live, ids[time <= t], diff[time <= t])
        present = np.zeros(ids.max() + 1, bool)
        present[live > 0] = True
        vals = np.zeros(ids.max() + 1, np.int64)
        vals[ids] = amount
        out[t] = f(vals[present])
    return out


def _accumulated_by_time(out: pa.Table, col: str, n_times: int) -> dict[int, object]:
    rows = out.to_pydict()
    got = {}
    for t in range(n_times):
        acc: dict = {}
        for v, s, df in zip(rows[col], rows["time"], rows["diff"]):
            if s <= t:
                acc[v] = acc.get(v, 0) + df
        got[t] = sorted((v, m) for v, m in acc.items() if m)
    return got


def test_a_key_far_over_the_dense_budget_completes_exactly_in_bounded_memory():
    n_rows, n_times = 3000, 3000  # a dense grid: 9 million cells, about 1 GB
    table = _one_hot_key(n_rows, n_times)
    budget = 16 << 20
    checks = {
        "count": (Count(), "count", lambda v: [(len(v), 1)] if len(v) else []),
        "sum": (Sum("amount"), "sum", lambda v: [(int(v.sum()), 1)] if len(v) else []),
        "min": (Min("amount"), "min", lambda v: [(int(v.min()), 1)] if len(v) else []),
        "top3": (TopK(3, ["amount"], descending=True), "amount",
                 lambda v: sorted(Counter(sorted(v.tolist())[-3:]).items())),
    }
    for name, (reducer, col, f) in checks.items():
        tracemalloc.start()
        out = reduce_delta(table, ["k"], ["id", "amount"], 1, reducer, limit_bytes=budget, max_rows=5000)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 64 << 20, f"{name}: peak {peak / 2**20:.0f} MiB"
        expected = _expected_by_time(table, n_times, f)
        got = _accumulated_by_time(out, col, n_times)
        for t in range(0, n_times, 7):
            assert got[t] == sorted(expected[t]), (name, t)


def test_user_reducer_over_the_budget_is_one_clear_error():
    table = _one_hot_key(400, 400)
    with pytest.raises(KeyTooLarge, match=r"key \{'k': 0\} needs .* cells .* over the budget"):
        reduce_delta(table, ["k"], ["id", "amount"], 1, PerKey(lambda rows: rows.select(["amount"])),
                     limit_bytes=1 << 20)
    # within the budget it runs
    out = reduce_delta(table.slice(0, 20), ["k"], ["id", "amount"], 1,
                       PerKey(lambda rows: rows.select(["amount", "_count"])), limit_bytes=1 << 30)
    assert out.num_rows > 0


def test_memory_budget_is_read_from_the_environment(monkeypatch):
    from ops.reduce.kernel import memory_budget
    monkeypatch.setenv("DDCLI_REDUCE_MEMORY", "512m")
    assert memory_budget() == 512 << 20
    monkeypatch.setenv("DDCLI_REDUCE_MEMORY", "lots")
    with pytest.raises(ValueError, match="DDCLI_REDUCE_MEMORY"):
        memory_budget()


# ------------------------------------------------------------------ pipelines over runs

HOT = '''
def pipeline(p):
    xs = p.input("xs")
    p.output("cnt", xs.count(by="k"))
    p.output("total", xs.sum(by="k", column="w"))
    p.output("ftotal", xs.sum(by="k", column="f"))
    p.output("lo", xs.min(by="k", column="w"))
    p.output("hi", xs.max(by="k", column="v", name="top_v"))
    p.output("nd", xs.count_distinct(by="k", name="nv"))
    p.output("top", xs.top_k(by="k", k=3, order_by="w", descending=True))
'''
HOT_SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.int64()), ("f", pa.float64())])


def hot_ref(i):
    xs = i["xs"]
    return {
        "cnt": R.count(xs, "k"),
        "total": R.sum_(xs, "k", "w"),
        "ftotal": R.sum_(xs, "k", "f"),
        "lo": R.min_(xs, "k", "w"),
        "hi": R.max_(xs, "k", "v", name="top_v"),
        "nd": R.count_distinct(xs, "k", name="nv"),
        "top": R.top_k(xs, "k", 3, "w", descending=True),
    }


PIPELINE_CASES = {"d1": (1, False, False), "d1-keys-split-among-tasks": (1, True, False),
                  "d1-inserts-only": (1, False, True), "d1-old-updates-in-shares": (1, None, False),
                  "d2": (2, False, False), "d2-keys-split-among-tasks": (2, True, False),
                  "d2-old-updates-in-shares": (2, None, False)}


@pytest.mark.parametrize("d,split,inserts_only", list(PIPELINE_CASES.values()), ids=list(PIPELINE_CASES))
def test_hot_keys_through_pipelines_over_runs_with_compaction(spark, tmp_path, monkeypatch, d, split, inserts_only):
    """Two keys, ~90 distinct rows each, 24 distinct times per run (d = 1; d = 2: 4 x 6),
    retractions; three runs with advance --since and compaction between. ``split``: every
    run deals each key's rows to three tasks (the plan of big runs), which take them in
    shares of 25 (ops/reduce/held_rows.py). ``inserts_only``: later
    runs read a summary of the keys' old updates (ops/reduce/summaries/insertions.py). ``split`` None:
    a task holds at most 40 rows. The second run (30 updates, within it, so looked up)
    takes its keys' old updates in shares of 40 (ops/reduce/budget.py); the third (60,
    over it) is not looked up: its tasks hold old and new updates under the budget."""
    planned, looked_up = [], []
    if split is None:
        monkeypatch.setenv("DDCLI_REDUCE_TASK_ROWS", "40")
        import ops.run.evaluate
        real_changes = ops.run.evaluate.reduce_changes
        monkeypatch.setattr(ops.run.evaluate, "reduce_changes",
                            lambda *a, **kw: looked_up.append(kw.get("lookup") is not None) or real_changes(*a, **kw))
    if split:  # and every task of both stages holds at most 25 rows in Arrow (ops/reduce/held_rows.py)
        monkeypatch.setenv("DDCLI_REDUCE_TASK_ROWS", "25")
        monkeypatch.setenv("DDCLI_REDUCE_SPLIT_ROWS", "0")
        monkeypatch.setenv("DDCLI_SHUFFLE_PARTITIONS", "3")
        import ops.reduce.operator
        real = ops.reduce.operator._split_keys
        monkeypatch.setattr(ops.reduce.operator, "_split_keys", lambda *a, **kw: planned.append(a[4]) or real(*a, **kw))
    rng = random.Random(130 + d)
    bench = Bench(tmp_path, d)
    path = bench.pipeline("hot", HOT)
    pool: list = []
    for r in range(3):
        if d == 1:
            times, upper, since = [(24 * r + i,) for i in range(24)], None, str(24 * r + 10)
        else:
            times = [(4 * r + a, b) for a in range(4) for b in range(6)]
            upper, since = f"({4 * r + 4},0)", f"({4 * r + 2},3)"
        updates = []
        for _ in range(150 if split is not None else (150, 30, 60)[r]):
            t = rng.choice(times)
            if pool and rng.random() < 0.3 and not inserts_only:
                updates.append((rng.choice(pool), t, -1))
            else:
                row = (rng.randrange(2), rng.choice("pqrs"), rng.randrange(-5, 20), rng.randrange(-20, 80) / 8)
                pool.append(row)
                updates.append((row, t, rng.choice((1, 1, 2))))
        bench.ingest("xs", HOT_SCHEMA, updates, upper=upper)
        bench.run(path)
        bench.check(path, hot_ref, ["cnt", "total", "ftotal", "lo", "hi", "nd", "top"], verify=r == 2)
        bench.advance_and_compact(since, full=r % 2 == 1)
    if split is None:  # each run plans first (nothing looked up); only the second run looks keys up
        assert looked_up.count(True) == 7 and not any(looked_up[-7:]), str(looked_up)
    if split:  # every reducer of the pipeline took the split plan, in every run
        names = Counter(type(x).__name__ for x in planned)  # (checking the pipeline plans them too)
        assert set(names) == {"Count", "Sum", "Min", "Max", "CountDistinct", "TopK"} and min(names.values()) >= 3, names


# ------------------------------------------------------------------ a hot key split among tasks


def _shares(table: pa.Table, values: list[str], n: int, seed: int) -> list[pa.Table]:
    """The table's rows dealt to ``n`` tasks by value row (every update of a value row in
    one share), as a hash partitioning by (key, values) would."""
    rng = random.Random(seed)
    owner: dict = {}
    vals = list(zip(*(table.column(c).to_pylist() for c in values)))
    share = np.array([owner.setdefault(v, rng.randrange(n)) for v in vals])
    return [table.filter(pa.array(share == j)) for j in range(n)]


TWO_STAGE = [(d, n) for d in (1, 2) for n in ["count", "count_distinct", "sum_int", "min", "max_str", "topk"]]


@pytest.mark.parametrize("d,name", TWO_STAGE, ids=[f"d{d}-{n}" for d, n in TWO_STAGE])
def test_two_stages_over_shares_of_value_rows_equal_the_reference(d, name):
    """The two stages of a split key (ops/reduce/operator.py): each share of the value rows reduced
    alone, then the shares' results of whole keys, against the plain reference at every
    time; for d = 2 the abelian shares give synthetic rows, summed as Spark sums them."""
    from ops.reduce.builtin_grid import WEIGHT
    from ops.reduce.kernel import (ABELIAN, CHANNEL, SALT, abelian_from_partials, abelian_from_synthetic,
                                   abelian_partials, abelian_synthetic, order_traces, splits)
    from storage.lattice import time_columns
    make, plain = REDUCERS[name]
    rng = random.Random(f"split-{name}-{d}")
    for case in range(4):
        rows = hot_rows(rng, d, 300 if d == 1 else 160, 40 if d == 1 else 6)
        table = make_table(rows, KEYS, VALUES, d, KTYPES, VTYPES)
        reducer = make()
        assert splits(reducer, table.select(VALUES).schema)
        shares = _shares(table, VALUES, 1 + case * 2, seed=case)
        whole = reduce_delta(table, KEYS, VALUES, d, reducer)
        out_schema = reducer.output_schema(table.select(VALUES).schema)
        if isinstance(reducer, ABELIAN) and d == 1:
            partials = pa.concat_tables([abelian_partials(sh, KEYS, VALUES, reducer) for sh in shares])
            out = abelian_from_partials(partials, KEYS, reducer, out_schema, whole.schema)
        elif isinstance(reducer, ABELIAN):
            syn = [abelian_synthetic(sh, KEYS, VALUES, d, reducer) for sh in shares if sh.num_rows]
            syn = pa.concat_tables([t for t in syn if t is not None])
            group = KEYS + time_columns(d) + ["_new", CHANNEL]
            sums = ["diff"] + [c for c in [WEIGHT] if c in syn.column_names]
            summed = syn.group_by(group, use_threads=False).aggregate([(c, "sum") for c in sums]) \
                .rename_columns(group + sums)
            out = abelian_from_synthetic(summed, KEYS, d, reducer, out_schema)
        else:
            traces = [order_traces(sh.append_column(SALT, pa.array([j] * sh.num_rows, pa.int64())),
                                   KEYS + [SALT], VALUES, reducer, d=d).drop_columns([SALT])
                      for j, sh in enumerate(shares) if sh.num_rows]
            out = reduce_delta(pa.concat_tables(traces), KEYS, VALUES, d, reducer)
        check_accumulation(rows, out, d, plain)
        assert consolidated(out) == consolidated(whole)


def test_every_built_in_reducer_of_several_value_rows_is_split_but_exact_sums():
    """Integer sums, counts and the order reducers are dealt to tasks; a sum of doubles
    (exact partial sums, no int64 that Spark could add between the stages), user logic
    and the reducers of one value row at a time are not (the latter need no second stage)."""
    from ops.dataflow.reducers import Distinct, PerKey
    from ops.reduce.kernel import splits
    schema = pa.schema([(c, VTYPES[c]) for c in VALUES])
    assert splits(Sum("v"), schema) and splits(Min("x"), schema) and splits(Count(), schema)
    assert not splits(Sum("x"), schema) and not splits(PerKey(lambda r: r), schema) and not splits(Distinct(), schema)


@pytest.mark.parametrize("name", ["min", "max_str", "topk", "count", "count_distinct", "sum_int", "sum_float"])
def test_d2_keys_over_the_cell_budget_are_reduced_in_shares_exactly(name):
    """d = 2: a budget of 60 cells (value rows x grid points) per key; the keys here need
    hundreds, so order reducers reduce shares of their rows first (abelian ones never
    build the value-row grid at all)."""
    make, plain = REDUCERS[name]
    rng = random.Random(f"shares-{name}")
    for case in range(3):
        rows = hot_rows(rng, 2, 160, 6)
        table = make_table(rows, KEYS, VALUES, 2, KTYPES, VTYPES)
        reducer = make()
        out = reduce_delta(table, KEYS, VALUES, 2, reducer, limit_bytes=60 * 120, max_cells=60)
        check_shape(out, table, 2, reducer)
        check_accumulation(rows, out, 2, plain)
        assert consolidated(out) == consolidated(reduce_delta(table, KEYS, VALUES, 2, reducer))
