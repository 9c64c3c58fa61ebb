"""Count, sum and agg of sums, averages and counts: a refresh that retracts reads totals, not history.

``ops/reduce/summaries/abelian.py``: with one-dimensional times and a non-negative collection a
task's old and new updates are replaced by a few synthetic rows per key and time. Checked
here without Spark, over several runs (each run's updates become a stored layer, compaction
folds the layers into one): random streams that insert, retract (every row of a key too),
re-insert, carry multiplicities above 1 and nulls, over decimals of two scales and integers,
against a reference that computes each output from the accumulated rows at every time; and
that the summary is taken (the kernel receives rows in proportion to the change) or, where
it would not be exact, that the old updates are read whole and the answer is still right.
"""

from __future__ import annotations

import glob
import hashlib
import os
import random
from decimal import Decimal
from fractions import Fraction

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ops.dataflow.reducers import Agg, Aggregate
from ops.reduce.summaries import layer_totals
from ops.reduce.budget import with_old_updates
from ops.reduce.kernel import Count, Sum, reduce_delta

SCHEMA = pa.schema([("k", pa.int64()), ("q", pa.decimal128(15, 2)), ("p", pa.decimal128(12, 4)),
                    ("n", pa.int64()), ("s", pa.string()), ("time", pa.int64()), ("diff", pa.int64())])
VALUES = ["q", "p", "n", "s"]
AGG = {"rows": ("count", None), "nq": ("count", "q"), "sq": ("sum", "q"), "aq": ("avg", "q"),
       "sp": ("sum", "p"), "ap": ("avg", "p"), "sn": ("sum", "n"), "an": ("avg", "n"), "cs": ("count", "s")}
REDUCERS = {
    "agg": lambda: Agg({name: Aggregate(kind, col) for name, (kind, col) in AGG.items()}),
    "count": lambda: Count("c"),
    "sum_decimal": lambda: Sum("q", "total"),
    "sum_int": lambda: Sum("n", "total"),
}


# ------------------------------------------------------------------ the reference


def _output(name: str, rows: dict) -> tuple | None:
    """The reducer's output row for a key's accumulated ``rows`` (value row -> multiplicity),
    None when no row has a non-zero multiplicity."""
    live = {r: m for r, m in rows.items() if m}
    if not live:
        return None
    col = dict(zip(VALUES, range(len(VALUES))))
    if name == "count":
        return (sum(live.values()),)
    if name in ("sum_decimal", "sum_int"):
        c = col["q" if name == "sum_decimal" else "n"]
        return (sum((r[c] * m for r, m in live.items() if r[c] is not None), Decimal(0) if c == 0 else 0),)
    out = []
    for kind, c in AGG.values():
        if c is None:
            out.append(sum(live.values()))
            continue
        n = sum(m for r, m in live.items() if r[col[c]] is not None)
        if kind == "count":
            out.append(n)
            continue
        total = sum((Fraction(r[col[c]]) * m for r, m in live.items() if r[col[c]] is not None), Fraction(0))
        has = any(r[col[c]] is not None for r in live)
        if kind == "sum":
            out.append(None if not has else (int(total) if c == "n" else Decimal(total.numerator) / total.denominator))
        else:
            out.append(None if n == 0 else float(total / n))
    return tuple(out)


def expected_changes(name: str, old: list[dict], new: list[dict]) -> dict:
    """Output changes at the new times: each key's output after each of its new times minus
    the one before (the old collection's before the first)."""
    changes: dict = {}

    def add(k, out, t, d):
        if out is not None:
            changes[(k, out, t)] = changes.get((k, out, t), 0) + d

    for k in sorted({r["k"] for r in new}):
        rows: dict = {}
        for r in old:
            if r["k"] == k:
                v = tuple(r[c] for c in VALUES)
                rows[v] = rows.get(v, 0) + r["diff"]
        before = _output(name, rows)
        for t in sorted({r["time"] for r in new if r["k"] == k}):
            for r in new:
                if r["k"] == k and r["time"] == t:
                    v = tuple(r[c] for c in VALUES)
                    rows[v] = rows.get(v, 0) + r["diff"]
            after = _output(name, rows)
            add(k, before, t, -1)
            add(k, after, t, 1)
            before = after
    return {key: d for key, d in changes.items() if d}


def got_changes(out: pa.Table) -> dict:
    acc: dict = {}
    for r in out.to_pylist():
        vals = tuple(v for c, v in r.items() if c not in ("k", "time", "diff"))
        key = (r["k"], vals, r["time"])
        acc[key] = acc.get(key, 0) + r["diff"]
    return {key: d for key, d in acc.items() if d}


# ------------------------------------------------------------------ random streams


def _value(rng: random.Random) -> dict:
    return {"q": rng.choice([None, Decimal(rng.randrange(-10**6, 10**6)) / 100]),
            "p": rng.choice([None, Decimal(rng.randrange(0, 10**5)) / 10**4, Decimal("0.0000")]),
            "n": rng.choice([None, rng.randrange(-50, 1000), 0]),
            "s": rng.choice([None, "a", "b", "ccc"])}


def run_updates(rng: random.Random, live: list[dict], keys: int, t0: int, times: int, n: int) -> list[dict]:
    """``n`` updates at times ``t0 .. t0 + times``: insertions (some of a row several
    times), retractions of live rows, every row of one key retracted, a retracted row
    inserted again. ``live`` (rows with their multiplicity) follows them."""
    out = []
    gone = [k for k in range(keys) if any(r["k"] == k for r in live)]
    emptied = rng.choice(gone) if gone else None
    for r in [r for r in live if r["k"] == emptied]:  # a whole key retracted, at one or several times
        out.append({**r, "time": rng.randrange(t0, t0 + times), "diff": -r["m"]})
        live.remove(r)
    for _ in range(n):
        if live and rng.random() < 0.4:
            r = rng.choice(live)
            d = rng.randrange(1, r["m"] + 1)
            r["m"] -= d
            if r["m"] == 0:
                live.remove(r)
            out.append({**{c: r[c] for c in ["k"] + VALUES}, "time": rng.randrange(t0, t0 + times), "diff": -d})
        else:
            r = {"k": rng.randrange(keys), **_value(rng)}
            m = rng.choice([1, 1, 2, 3])
            live.append({**r, "m": m})
            out.append({**r, "time": rng.randrange(t0, t0 + times), "diff": m})
    # a retraction may come before its insertion in time: keep the collection non-negative
    # at every time by moving each retraction to the time of the row's last insertion or later
    last: dict = {}
    for u in out:
        if u["diff"] > 0:
            v = tuple(u[c] for c in ["k"] + VALUES)
            last[v] = max(last.get(v, -1), u["time"])
    for u in out:
        v = tuple(u[c] for c in ["k"] + VALUES)
        if u["diff"] < 0 and v in last:
            u["time"] = max(u["time"], last[v])
    return [{c: u[c] for c in ["k"] + VALUES} | {"time": u["time"], "diff": u["diff"]} for u in out]


def write_layer(path, rows: list[dict], schema: pa.Schema = SCHEMA) -> str:
    pq.write_table(pa.Table.from_pylist(rows, schema).sort_by("k"), str(path))
    return str(path)


def compacted(rows: list[dict]) -> list[dict]:
    """The updates with every time advanced to 0 and equal rows summed."""
    acc: dict = {}
    for r in rows:
        v = tuple(r[c] for c in ["k"] + VALUES)
        acc[v] = acc.get(v, 0) + r["diff"]
    return [{**dict(zip(["k"] + VALUES, v)), "time": 0, "diff": d} for v, d in acc.items() if d]


def as_new(rows: list[dict], schema: pa.Schema = SCHEMA) -> pa.Table:
    t = pa.Table.from_pylist(rows, schema)
    return t.append_column("_new", pa.array([True] * t.num_rows))


def refresh(new_rows: list[dict], files: list[str], reducer, schema: pa.Schema = SCHEMA) -> tuple[dict, int]:
    """The run's output changes and how many rows the kernel received."""
    new = as_new(new_rows, schema)
    table = with_old_updates(new, files, ["k"], VALUES, reducer)
    return got_changes(reduce_delta(table, ["k"], VALUES, 1, reducer)), table.num_rows


def summaries_taken(monkeypatch) -> list:
    """What each summary the reduces try gives (None: not exact, the updates read whole)."""
    import ops.reduce.budget
    taken: list = []
    real = ops.reduce.budget.abelian_rows
    monkeypatch.setattr(ops.reduce.budget, "abelian_rows", lambda *a: taken.append(real(*a)) or taken[-1])
    return taken


@pytest.mark.parametrize("name", sorted(REDUCERS))
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kept", [False, True], ids=["summed", "kept_totals"])
def test_runs_with_retractions_against_the_reference(tmp_path, monkeypatch, name, seed, kept):
    """With ``kept``, every layer is large enough to keep its per-key totals beside it
    (ops/reduce/summaries/layer_totals.py), and they are what the refreshes read."""
    if kept:
        monkeypatch.setattr(layer_totals, "MIN_ROWS", 1)
    taken = summaries_taken(monkeypatch)
    rng = random.Random(f"{name}-{seed}")
    reducer = REDUCERS[name]()
    live: list[dict] = []
    history = run_updates(rng, live, keys=5, t0=0, times=8, n=300)
    files = [write_layer(tmp_path / "base.parquet", history)]
    for run in range(6):
        t0 = 10 * (run + 1)
        new_rows = run_updates(rng, live, keys=5, t0=t0, times=8, n=60)
        got, _ = refresh(new_rows, files, reducer)
        want = expected_changes(name, history, new_rows)
        assert want, "the run changed nothing: the case proves nothing"
        assert got == want, (run, sorted(set(got.items()) ^ set(want.items()))[:6])
        assert taken[-1] is not None, "the collection stays non-negative: the summary must be taken"
        history += new_rows
        assert kept == all(glob.glob(f + ".totals-*") for f in files), "totals kept beside the large layers only"
        if run == 3:  # compaction: the layers folded into one, times advanced
            history = compacted(history)
            files = [write_layer(tmp_path / f"compacted{run}.parquet", history)]
        else:
            files.append(write_layer(tmp_path / f"run{run}.parquet", new_rows))


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_state_compacted_to_the_first_new_time_is_summarised(tmp_path, monkeypatch, name):
    """A pipeline's stored state is compacted to its frontier, where the next run's updates
    start: old updates at the first new time are summarised too, and the answer is the
    reference's."""
    taken = summaries_taken(monkeypatch)
    rng = random.Random(f"at-frontier-{name}")
    reducer = REDUCERS[name]()
    live: list[dict] = []
    history = run_updates(rng, live, keys=5, t0=0, times=8, n=300)
    for run in range(4):
        t0 = 10 * (run + 1)
        state = [{**r, "time": t0} for r in compacted(history)]
        files = [write_layer(tmp_path / f"state{run}.parquet", state)]
        new_rows = run_updates(rng, live, keys=5, t0=t0, times=8, n=60)
        assert any(r["time"] == t0 for r in new_rows), "no new update at the state's time: the case proves nothing"
        got, _ = refresh(new_rows, files, reducer)
        assert got == expected_changes(name, history, new_rows), run
        assert taken[-1] is not None, run  # the summary stood for the state
        history += new_rows


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_a_refresh_of_a_hot_key_reads_its_totals_not_its_rows(tmp_path, name):
    """A key of 10,000 old rows (and three others): retracting a few rows, and every row of a
    small key, gives the kernel a few rows per key and time."""
    rng = random.Random(f"hot-{name}")
    reducer = REDUCERS[name]()
    old = [{"k": 0, **_value(rng), "time": rng.randrange(10), "diff": rng.choice([1, 2])} for _ in range(10_000)]
    old += [{"k": k, **_value(rng), "time": 3, "diff": 1} for k in (1, 2, 3) for _ in range(20)]
    files = [write_layer(tmp_path / "old.parquet", old)]
    new_rows = [{**r, "time": 20 + i, "diff": -1} for i, r in enumerate(rng.sample(old[:10_000], 5))]
    new_rows += [{"k": 0, **_value(rng), "time": 21, "diff": 1} for _ in range(3)]
    new_rows += [{**r, "time": 22, "diff": -1} for r in old if r["k"] == 1]  # key 1 emptied
    new_rows += [{**r, "time": 24, "diff": 1} for r in old if r["k"] == 1][:2]  # and two rows back
    got, received = refresh(new_rows, files, reducer)
    assert got == expected_changes(name, old, new_rows)
    assert received <= 2 * 8 * 7, received  # (at most 7 rows a state) x (states + retracted ones)


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_a_large_layers_totals_are_kept_and_read_instead_of_its_rows(tmp_path, monkeypatch, name):
    """A layer of a hot key past the size that keeps totals: the first refresh sums it
    once and keeps the totals beside it; the next reads them only (the layer itself,
    moved away, is not read), and both answers are the reference's."""
    monkeypatch.setattr(layer_totals, "MIN_ROWS", 5_000)
    taken = summaries_taken(monkeypatch)
    rng = random.Random(f"kept-{name}")
    reducer = REDUCERS[name]()
    old = [{"k": k, **_value(rng), "time": rng.randrange(10), "diff": rng.choice([1, 2])}
           for k in (0, 0, 0, 1) for _ in range(2_000)]
    big = write_layer(tmp_path / "big.parquet", old)
    recent = [{"k": k, **_value(rng), "time": 12, "diff": 1} for k in (0, 1, 2) for _ in range(5)]
    small = write_layer(tmp_path / "small.parquet", recent)
    first = [{**r, "time": 20, "diff": -1} for r in rng.sample(old, 4)] + [{"k": 2, **_value(rng), "time": 21, "diff": 1}]
    got, received = refresh(first, [big, small], reducer)
    assert got == expected_changes(name, old + recent, first) and taken[-1] is not None
    assert glob.glob(big + ".totals-*") and not glob.glob(small + ".totals-*"), "totals kept beside the large layer"
    os.rename(big, big + ".away")  # what the next refresh could read of it: its totals only
    second = [{"k": k, **_value(rng), "time": 30, "diff": 1} for k in (0, 1)] + [{**recent[0], "time": 31, "diff": -1}]
    done = write_layer(tmp_path / "first.parquet", first)
    got, received = refresh(second, [big, small, done], reducer)
    assert got == expected_changes(name, old + recent + first, second), "the kept totals are the layer's"
    assert taken[-1] is not None and received < 100, received  # a few rows per key and state, not 8,000


def test_damaged_kept_totals_are_never_read(tmp_path, monkeypatch):
    """Kept totals are named by their bytes' digest and checked once per process: a byte
    flipped in them (a new process reads them) sends the refresh to the layer, whose
    totals are summed and kept again, and the answer is the reference's."""
    monkeypatch.setattr(layer_totals, "MIN_ROWS", 1_000)
    monkeypatch.setattr("storage.layer._kept_summaries", {})
    rng = random.Random("damaged")
    reducer = REDUCERS["agg"]()
    old = [{"k": k, **_value(rng), "time": 1, "diff": 1} for k in (0, 0, 1) for _ in range(1_000)]
    big = write_layer(tmp_path / "big.parquet", old)
    first = [{**old[0], "time": 5, "diff": -1}]
    assert refresh(first, [big], reducer)[0] == expected_changes("agg", old, first)
    kept, = glob.glob(big + ".totals-*")
    data = bytearray(open(kept, "rb").read())
    data[len(data) // 3] ^= 0xFF
    open(kept, "wb").write(bytes(data))
    monkeypatch.setattr("storage.layer._kept_summaries", {})  # as a new process would
    second = [{**old[1], "time": 5, "diff": -1}, {"k": 1, **_value(rng), "time": 6, "diff": 1}]
    assert refresh(second, [big], reducer)[0] == expected_changes("agg", old, second)
    again, = glob.glob(big + ".totals-*")  # the damaged totals replaced by intact ones
    assert hashlib.sha256(open(again, "rb").read()).hexdigest()[:16] == again[-16:]


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_columns_that_admit_no_null_get_none(tmp_path, name):
    """A schema whose value columns are not nullable: the synthetic rows hold values there."""
    schema = pa.schema([f.with_nullable(f.name in ("k", "p")) for f in SCHEMA])
    rng = random.Random(f"not-null-{name}")

    def row(k):
        return {"k": k, **{c: v if v is not None else {"q": Decimal("1.50"), "n": 7, "s": "z"}.get(c)
                           for c, v in _value(rng).items()}}

    old = [{**row(k), "time": 1, "diff": rng.choice([1, 2])} for k in (0, 1) for _ in range(100)]
    files = [write_layer(tmp_path / "old.parquet", old, schema)]
    new_rows = [{**r, "time": 5, "diff": -1} for r in old[:3] + old[100:]]  # key 1 emptied
    new_rows += [{**row(k), "time": 6, "diff": 1} for k in (0, 1, 2)]
    got, received = refresh(new_rows, files, REDUCERS[name](), schema)
    assert got == expected_changes(name, old, new_rows) and received < 60, received


def test_rows_below_0_are_summarised_while_their_key_is_present(tmp_path, monkeypatch):
    """A retraction that takes a row below 0, an old row with a negative multiplicity: while
    the key's total multiplicity stays positive its outputs are the totals', so the summary
    is taken (a few rows reach the kernel), and the answer is the reference's."""
    taken = summaries_taken(monkeypatch)
    rng = random.Random(3)
    old = [{"k": k, **_value(rng), "time": 1, "diff": 1} for k in (0, 1) for _ in range(200)]
    old[0]["n"] = 10**6  # a row held once (random rows may repeat)
    files = [write_layer(tmp_path / "old.parquet", old)]
    below = [{**old[0], "time": 5, "diff": -2}, {"k": 1, **_value(rng), "time": 5, "diff": 1}]
    for name in ("agg", "count", "sum_int"):
        got, received = refresh(below, files, REDUCERS[name]())
        assert got == expected_changes(name, old, below), name
        assert taken[-1] is not None and received < 40, (name, received)
    negative = [{"k": 0, **_value(rng), "time": 2, "diff": -1} | {"n": 10**6 + 1}]
    neg = write_layer(tmp_path / "negative.parquet", negative)
    fine = [{**old[1], "time": 5, "diff": -1}]
    got, received = refresh(fine, files + [neg], REDUCERS["count"]())
    assert got == expected_changes("count", old + negative, fine)
    assert taken[-1] is not None and received < 20, received


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_a_key_whose_totals_vanish_while_a_row_is_below_0_is_read_whole(tmp_path, monkeypatch, name):
    """Rows of +1 and -1 cancel in the totals but leave the key present (its count 0):
    the totals cannot tell that from an empty key, so the old updates are read whole, and
    the answer is the reference's. A key emptied by retractions (no row below 0) is
    summarised."""
    taken = summaries_taken(monkeypatch)
    rng = random.Random(f"vanish-{name}")
    old = [{"k": k, **_value(rng), "time": 1, "diff": 1} for k in (0, 1) for _ in range(30)]
    files = [write_layer(tmp_path / "old.parquet", old)]
    a = old[0]  # key 0
    others = [r for r in old[1:] if r["k"] == 0 and tuple(r.values()) != tuple(a.values())]
    held = sum(1 for r in old if tuple(r.values()) == tuple(a.values()))
    # key 0: a goes below 0 and every other row of it is retracted, but for one: N = 0 at time 6
    cancel = [{**a, "time": 5, "diff": -held - 1}] + [{**r, "time": 6, "diff": -1} for r in others[1:]]
    got, received = refresh(cancel, files, REDUCERS[name]())
    assert got == expected_changes(name, old, cancel)
    assert taken[-1] is None and received == len(old) // 2 + len(cancel), received
    emptied = [{**r, "time": 5, "diff": -1} for r in old if r["k"] == 1]
    got, received = refresh(emptied, files, REDUCERS[name]())
    assert got == expected_changes(name, old, emptied)
    assert taken[-1] is not None and received < 20, received


def test_where_the_summary_would_not_be_exact_the_updates_are_read_whole(tmp_path):
    """A sum of doubles, a total beyond its integer column's type, a min: the old updates
    whole."""
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64()), ("i", pa.int32()), ("time", pa.int64()),
                        ("diff", pa.int64())])
    rows = [{"k": 0, "x": 0.1 * j, "i": 2**30, "time": 1, "diff": 1} for j in range(50)]
    path = str(tmp_path / "wide.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema), path)
    new = pa.Table.from_pylist([{**rows[0], "time": 4, "diff": -1}], schema)
    new = new.append_column("_new", pa.array([True]))
    for reducer in (Sum("x", "total"), Sum("i", "total"), Agg({"m": Aggregate("min", "i")}),
                    Agg({"s": Aggregate("sum", "i"), "n": Aggregate("count")})):
        table = with_old_updates(new, [path], ["k"], ["x", "i"], reducer)
        assert table.num_rows == 51, reducer


#: user column names the summaries' SQL once took for its own (a weight ``w``, a time ``t``,
#: a multiplicity ``m``, a total ``s_0``, a phase): a key and values may be named anything
CLASHING = {"k": "t", "q": "w", "p": "s_0", "n": "m", "s": "phase"}


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_columns_named_like_the_summaries_own_are_theirs(tmp_path, monkeypatch, name):
    """Runs that retract (the invertible summary) and one that only inserts (the summary of
    insertions), over columns renamed to the names the SQL uses inside: the answer is the
    reference's, and the summaries are taken."""
    import ops.reduce.budget
    taken = []
    for fn in ("abelian_rows", "old_summary"):
        real = getattr(ops.reduce.budget, fn)
        monkeypatch.setattr(ops.reduce.budget, fn, lambda *a, real=real: taken.append(real(*a)) or taken[-1])
    rename = lambda t: t.rename_columns([CLASHING.get(c, c) for c in t.column_names])  # noqa: E731
    back = {v: c for c, v in CLASHING.items()}
    key, values = [CLASHING["k"]], [CLASHING[c] for c in VALUES]
    reducer = {"agg": lambda: Agg({n: Aggregate(kind, CLASHING.get(c)) for n, (kind, c) in AGG.items()}),
               "count": lambda: Count("c"), "sum_decimal": lambda: Sum(CLASHING["q"], "total"),
               "sum_int": lambda: Sum(CLASHING["n"], "total")}[name]()
    rng = random.Random(f"clash-{name}")
    live: list[dict] = []
    history = run_updates(rng, live, keys=4, t0=0, times=5, n=150)
    files = []
    for run in range(3):
        files.append(str(tmp_path / f"layer{run}.parquet"))
        pq.write_table(rename(pa.Table.from_pylist(history if run == 0 else new_rows, SCHEMA).sort_by("k")), files[-1])
        new_rows = run_updates(rng, live, keys=4, t0=10 * (run + 1), times=5, n=40)
        if run == 2:  # insertions only
            new_rows = [r for r in new_rows if r["diff"] > 0]
        new = rename(as_new(new_rows))
        table = with_old_updates(new, files, key, values, reducer)
        out = reduce_delta(table, key, values, 1, reducer)
        got = got_changes(out.rename_columns([back.get(c, c) for c in out.column_names]))
        assert got == expected_changes(name, history, new_rows), run
        assert taken and taken[-1] is not None, (run, "the summary must be taken")
        taken.clear()
        history += new_rows
