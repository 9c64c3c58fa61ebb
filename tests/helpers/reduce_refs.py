"""Plain reducers and the checks of the reduce kernel's tests: random and hot update rows,
and the defining property checked at every time of a box (the output updates accumulated
at ``t`` equal ``f(total input at t) - f(old input at t)``). Nothing here builds a grid.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa

from ops.dataflow.reducers import Count, CountDistinct, Distinct, Max, Min, PerKey, Sum, Threshold, TopK
from storage.lattice import time_columns


def make_table(rows, key_names, value_names, d, key_types=None, value_types=None):
    """rows: (key tuple, value tuple, time tuple, diff, new)."""
    cols = {}
    for j, c in enumerate(key_names):
        cols[c] = pa.array([r[0][j] for r in rows], (key_types or {}).get(c))
    for j, c in enumerate(value_names):
        cols[c] = pa.array([r[1][j] for r in rows], (value_types or {}).get(c))
    for i, c in enumerate(time_columns(d)):
        cols[c] = pa.array([r[2][i] for r in rows], pa.int64())
    cols["diff"] = pa.array([r[3] for r in rows], pa.int64())
    cols["_new"] = pa.array([r[4] for r in rows], pa.bool_())
    return pa.table(cols)


def output_rows(out, key_names, d):
    """[(key tuple, output tuple, time tuple, diff)] from a result table."""
    tcols = time_columns(d)
    outcols = [c for c in out.column_names if c not in key_names and c not in tcols and c != "diff"]
    data = out.to_pydict()
    return [
        (
            tuple(data[c][i] for c in key_names),
            tuple(data[c][i] for c in outcols),
            tuple(data[c][i] for c in tcols),
            data["diff"][i],
        )
        for i in range(out.num_rows)
    ]


def leq(s, t):
    return all(a <= b for a, b in zip(s, t))


def nonzero(counter):
    return {k: v for k, v in counter.items() if v != 0}


# ------------------------------------------------------------------ plain reducers
# Each maps {value tuple: non-zero count} (values are (v, w, x)) to {output tuple: count}.


def p_count(c):
    return {(sum(c.values()),): 1}


def p_count_distinct(c):
    n = sum(1 for m in c.values() if m > 0)
    return {(n,): 1} if n else {}


def p_sum_v(c):
    return {(sum(val[0] * m for val, m in c.items()),): 1}


def p_sum_x(c):
    return {(sum((val[2] or 0.0) * m for val, m in c.items()),): 1}


def p_min_v(c):
    pos = [val[0] for val, m in c.items() if m > 0]
    return {(min(pos),): 1} if pos else {}


def p_max_w(c):
    pos = [val[1] for val, m in c.items() if m > 0]
    if not pos:
        return {}
    present = [w for w in pos if w is not None]
    return {(max(present) if present else None,): 1}


def p_distinct(c):
    return {val: 1 for val, m in c.items() if m > 0}


def p_threshold(c):  # present at least twice -> once
    return {val: 1 for val, m in c.items() if m >= 2}


def p_threshold_neg(c):  # keeps negative multiplicities too
    return {val: m * 3 for val, m in c.items() if m != 1}


def _nulls_last(x):
    return (x is None, x)


def p_topk(c, k=3):
    pos = sorted(((val, m) for val, m in c.items() if m > 0), key=lambda vm: (-vm[0][0], _nulls_last(vm[0][1]), _nulls_last(vm[0][2])))
    out, left = {}, k
    for val, m in pos:
        take = min(m, left)
        if take > 0:
            out[val] = take
        left -= take
    return out


def p_perkey(c):  # per w: twice its multiplicity, plus one row with the number of rows
    out = Counter()
    for val, m in c.items():
        out[(val[1], 0)] += 2 * m
    out[(None, len(c))] += 1
    return nonzero(out)


def perkey_fn(rows: pa.Table) -> pa.Table:
    w = rows.column("w").to_pylist() + [None]
    n = [0] * rows.num_rows + [rows.num_rows]
    cnt = [2 * c for c in rows.column("_count").to_pylist()] + [1]
    return pa.table({"w": pa.array(w, pa.string()), "n": pa.array(n, pa.int64()), "_count": pa.array(cnt, pa.int64())})


REDUCERS = {
    "count": (lambda: Count(), p_count),
    "count_distinct": (lambda: CountDistinct(), p_count_distinct),
    "sum_int": (lambda: Sum("v"), p_sum_v),
    "sum_float": (lambda: Sum("x", name="total"), p_sum_x),
    "min": (lambda: Min("v"), p_min_v),
    "max_str": (lambda: Max("w"), p_max_w),
    "distinct": (lambda: Distinct(), p_distinct),
    "threshold": (lambda: Threshold(lambda c: np.where(c >= 2, 1, 0)), p_threshold),
    "threshold_neg": (lambda: Threshold(lambda c: np.where(c != 1, 3 * c, 0)), p_threshold_neg),
    "topk": (lambda: TopK(3, ["v"], descending=True), p_topk),
    "perkey": (lambda: PerKey(perkey_fn), p_perkey),
}

KEYS = ["k", "g"]
VALUES = ["v", "w", "x"]
VTYPES = {"v": pa.int64(), "w": pa.string(), "x": pa.float64()}
KTYPES = {"k": pa.int64(), "g": pa.string()}


def random_rows(rng: random.Random, d: int, n: int, tmax: int):
    keys = [(rng.randrange(3), rng.choice(["p", "q"])) for _ in range(rng.randint(1, 3))]
    vals = [
        (rng.randrange(-2, 4), rng.choice(["a", "b", "c", None]), rng.choice([0.5, 1.25, -2.0, None]))
        for _ in range(rng.randint(1, 5))
    ]
    rows = []
    for _ in range(n):
        rows.append(
            (
                rng.choice(keys),
                rng.choice(vals),
                tuple(rng.randint(0, tmax) for _ in range(d)),
                rng.choice([1, 1, 1, 2, 3, -1, -1, -2]),
                rng.random() < 0.5,
            )
        )
    if rng.random() < 0.3:  # a retraction that cancels an earlier row exactly
        k, v, t, df, nw = rng.choice(rows)
        rows.append((k, v, t, -df, rng.random() < 0.5))
    return rows


def check_accumulation(rows, out, d, plain):
    """For every time in a box around the input times: accumulated output = f(total) - f(old)."""
    by_key = defaultdict(list)
    for k, v, t, df, nw in rows:
        by_key[k].append((v, t, df, nw))
    out_by_key = defaultdict(list)
    for k, o, t, df in output_rows(out, KEYS, d):
        assert k in by_key, f"output for a key {k} not in the input"
        out_by_key[k].append((o, t, df))
    lo = min(min(t) for _, _, t, _, _ in rows) - 1
    hi = max(max(t) for _, _, t, _, _ in rows) + 1
    for k, ups in by_key.items():
        for t in itertools.product(range(lo, hi + 1), repeat=d):
            tot, old = Counter(), Counter()
            for v, s, df, nw in ups:
                if leq(s, t):
                    tot[v] += df
                    if not nw:
                        old[v] += df
            expected = Counter(plain(nonzero(tot)) if nonzero(tot) else {})
            expected.subtract(plain(nonzero(old)) if nonzero(old) else {})
            actual = Counter()
            for o, s, df in out_by_key[k]:
                if leq(s, t):
                    actual[o] += df
            assert nonzero(actual) == nonzero(expected), (k, t)


def check_shape(out, table, d, reducer):
    schema = reducer.output_schema(table.select(VALUES).schema)
    expected = [table.schema.field(c) for c in KEYS] + list(schema)
    expected += [pa.field(c, pa.int64()) for c in time_columns(d)] + [pa.field("diff", pa.int64())]
    assert out.schema == pa.schema(expected)
    rows = output_rows(out, KEYS, d)
    assert all(df != 0 for *_, df in rows)
    ident = [(k, o, t) for k, o, t, _ in rows]
    assert len(ident) == len(set(ident)), "output not consolidated"


def hot_rows(rng: random.Random, d: int, n: int, tmax: int, keys: int = 2, rows_per_key: int = 40):
    """``n`` updates over ``keys`` keys with ``rows_per_key`` distinct value rows each, at
    many distinct times: insertions, retractions of inserted rows (also before the
    insertion), retractions of rows never inserted, old and new updates mixed."""
    ks = [(i, "p" if i % 2 else "q") for i in range(keys)]
    vals = [(rng.randrange(-20, 20), rng.choice(["a", "b", "c", None]), rng.choice([0.5, 1.25, -2.0, None]))
            for _ in range(rows_per_key)]
    pool, rows = [], []
    while len(rows) < n:
        t = tuple(rng.randint(0, tmax) for _ in range(d))
        new = rng.random() < 0.5
        x = rng.random()
        if pool and x < 0.35:
            k, v = rng.choice(pool)
            rows.append((k, v, t, -1, new))
        elif x < 0.4:
            rows.append((rng.choice(ks), rng.choice(vals), t, -1, new))
        else:
            k, v = rng.choice(ks), rng.choice(vals)
            pool.append((k, v))
            rows.append((k, v, t, rng.choice([1, 1, 2]), new))
    return rows


def consolidated(out: pa.Table) -> dict:
    """An output table as {(column, value) pairs: summed diff}, zeros left out."""
    acc: dict = {}
    for row in out.to_pylist():
        diff = row.pop("diff")
        k = tuple(sorted(row.items(), key=lambda kv: kv[0]))
        acc[k] = acc.get(k, 0) + diff
    return {k: v for k, v in acc.items() if v}
