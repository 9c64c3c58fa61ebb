"""A change to a window's input recomputes the rows of its partition it moves, not the
partition: the window kernel for one-dimensional times (no Spark) against DuckDB's window
functions computed from scratch at every time, over random streams with retractions,
multiplicities, ties, nulls in partition and order columns, doubles, decimals, dates and
strings; and what a one-row change costs (rows evaluated, output updates) against a
partition of thousands of rows. The reference imports no ddcli code."""

from __future__ import annotations

import datetime
import random
from collections import Counter
from decimal import Decimal

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from ops.dataflow import windows as W
from ops.columnar import COUNT, GROUP
from ops.dataflow.window_reducer import Window
from ops.reduce.kernel import reduce_delta

SCHEMA = pa.schema([("k", pa.int64()), ("o", pa.int64()), ("f", pa.float64()), ("p", pa.decimal128(9, 2)),
                    ("dt", pa.date32()), ("s", pa.string())])
VALUES = ["o", "f", "p", "dt", "s"]

# (order, descending, functions, DuckDB's select list over windows w (the order) and full (the
# order, then the other value columns ascending: row_number's, lag's and ROWS frames' order))
WINDOWS = {
    "everything": (["o"], False, dict(rn=W.row_number(), rk=W.rank(), drk=W.dense_rank(), prev=W.lag("s", 2),
                                      nxt=W.lead("p", 1, Decimal("-1")), tot=W.running_sum("p"),
                                      n3=W.running_count("f", frame=W.rows(2)), mean=W.running_avg("f", W.rows())),
                   "row_number() OVER wf, rank() OVER w, dense_rank() OVER w, lag(s, 2) OVER wf, "
                   "lead(p, 1, -1) OVER wf, sum(p) OVER w, "
                   "count(f) OVER (wf ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), "
                   "avg(f) OVER (wf ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"),
    "neighbours": (["dt", "s"], [True, False], dict(back=W.lag("o", 3), ahead=W.lead("s", 2, "none"),
                                                   near=W.running_sum("p", frame=W.rows(1)),
                                                   here=W.running_count(frame=W.rows(0))),
                   "lag(o, 3) OVER wf, lead(s, 2, 'none') OVER wf, "
                   "sum(p) OVER (wf ROWS BETWEEN 1 PRECEDING AND CURRENT ROW), "
                   "count(*) OVER (wf ROWS BETWEEN CURRENT ROW AND CURRENT ROW)"),
    "numbered": (["f"], True, dict(rn=W.row_number(), cnt=W.running_count("o"), fs=W.running_sum("f", W.rows())),
                 "row_number() OVER wf, count(o) OVER w, "
                 "sum(f) OVER (wf ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"),
    "unordered": (None, False, dict(n=W.running_count(), drk=W.dense_rank(), osum=W.running_sum("o")),
                  "count(*) OVER w, dense_rank() OVER w, sum(o) OVER w"),
    "following": (["o", "s"], [False, True], dict(fw=W.running_sum("p", W.rows(1, 2)),
                                                 nx=W.running_count("f", W.rows(-1, 3)),
                                                 tail=W.running_avg("f", W.rows(0, None)),
                                                 gone=W.running_sum("o", W.rows(2, -1))),
                  "sum(p) OVER (wf ROWS BETWEEN 1 PRECEDING AND 2 FOLLOWING), "
                  "count(f) OVER (wf ROWS BETWEEN 1 FOLLOWING AND 3 FOLLOWING), "
                  "avg(f) OVER (wf ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING), "
                  "sum(o) OVER (wf ROWS BETWEEN 2 PRECEDING AND 1 PRECEDING)"),
    "suffix": (["dt"], False, dict(rs=W.running_sum("p", W.range_frame(0, None)),
                                   whole=W.running_count(frame=W.range_frame(None, None)),
                                   here=W.running_count("s", W.range_frame(0, 0)),
                                   ds=W.running_sum("f", W.rows(0, None))),
               "sum(p) OVER (w RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING), "
               "count(*) OVER (w RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING), "
               "count(s) OVER (w RANGE BETWEEN CURRENT ROW AND CURRENT ROW), "
               "sum(f) OVER (wf ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)"),
    "both ends": (["s", "o"], [True, False], dict(rn=W.row_number(), ds=W.running_sum("p", W.rows(None, None)),
                                                 mid=W.running_avg("p", W.rows(3, 3)))),
}
WINDOWS["both ends"] += ("row_number() OVER wf, sum(p) OVER (wf ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED "
                         "FOLLOWING), avg(p) OVER (wf ROWS BETWEEN 3 PRECEDING AND 3 FOLLOWING)",)
WINDOWS.update({
    "by value": (["f"], False, dict(near=W.running_sum("p", W.range_frame(1.5, 0)),
                                    wide=W.running_count(frame=W.range_frame(2, 1)),
                                    ahead=W.running_avg("o", W.range_frame(0, 3.0)),
                                    upto=W.running_sum("o", W.range_frame(None, 1)),
                                    rn=W.row_number()),
                 "sum(p) OVER (w RANGE BETWEEN 1.5 PRECEDING AND CURRENT ROW), "
                 "count(*) OVER (w RANGE BETWEEN 2 PRECEDING AND 1 FOLLOWING), "
                 "avg(o) OVER (w RANGE BETWEEN CURRENT ROW AND 3 FOLLOWING), "
                 "sum(o) OVER (w RANGE BETWEEN UNBOUNDED PRECEDING AND 1 FOLLOWING), row_number() OVER wf"),
    "by decimal desc": (["p"], True, dict(a=W.running_sum("o", W.range_frame(Decimal("0.5"), Decimal("1.25"))),
                                         b=W.running_count("f", W.range_frame(None, Decimal(2))),
                                         c=W.running_sum("f", W.range_frame(1, None)),
                                         d=W.running_count(frame=W.range_frame(-1, 3)),
                                         prev=W.lag("o")),
                        "sum(o) OVER (w RANGE BETWEEN 0.5 PRECEDING AND 1.25 FOLLOWING), "
                        "count(f) OVER (w RANGE BETWEEN UNBOUNDED PRECEDING AND 2 FOLLOWING), "
                        "sum(f) OVER (w RANGE BETWEEN 1 PRECEDING AND UNBOUNDED FOLLOWING), "
                        "count(*) OVER (w RANGE BETWEEN 1 FOLLOWING AND 3 FOLLOWING), lag(o) OVER wf"),
    "by days": (["dt"], False, dict(wk=W.running_sum("o", W.range_frame(datetime.timedelta(days=1), 0)),
                                    nx=W.running_count(frame=W.range_frame(0, datetime.timedelta(hours=36))),
                                    back=W.running_sum("p", W.range_frame(datetime.timedelta(days=2),
                                                                          -datetime.timedelta(days=1))),
                                    days=W.running_count("s", W.range_frame(1, 1))),
                "sum(o) OVER (w RANGE BETWEEN INTERVAL 1 DAY PRECEDING AND CURRENT ROW), "
                "count(*) OVER (w RANGE BETWEEN CURRENT ROW AND INTERVAL 36 HOUR FOLLOWING), "
                "sum(p) OVER (w RANGE BETWEEN INTERVAL 2 DAY PRECEDING AND INTERVAL 1 DAY PRECEDING), "
                "count(s) OVER (w RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING)"),
    "by ints desc": (["o"], True, dict(two=W.running_sum("p", W.range_frame(2, 0)),
                                      around=W.running_avg("f", W.range_frame(1, 2)),
                                      rest=W.running_count(frame=W.range_frame(0, None)),
                                      rk=W.rank()),
                     "sum(p) OVER (w RANGE BETWEEN 2 PRECEDING AND CURRENT ROW), "
                     "avg(f) OVER (w RANGE BETWEEN 1 PRECEDING AND 2 FOLLOWING), "
                     "count(*) OVER (w RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING), rank() OVER w"),
})
APPROX = {"mean"}


def _sql_window(order, descending) -> tuple[str, str]:
    """DuckDB's ``w`` and ``full`` windows (nulls last, as the window's order has them)."""
    cols = [] if order is None else order
    desc = descending if isinstance(descending, list) else [descending] * len(cols)
    keys = [f"{c} {'DESC' if d else 'ASC'} NULLS LAST" for c, d in zip(cols, desc)]
    rest = [f"{c} ASC NULLS LAST" for c in VALUES if c not in cols]
    w = f"PARTITION BY k{' ORDER BY ' + ', '.join(keys) if keys else ''}"
    return w, f"PARTITION BY k ORDER BY {', '.join(keys + rest)}"


def duckdb_window(rows: Counter, name: str) -> Counter:
    """The window ``name`` of the collection ``rows`` (row -> multiplicity), as DuckDB computes it."""
    order, descending, _, select = WINDOWS[name]
    expanded = [r for r, m in rows.items() for _ in range(m) if m > 0]
    table = pa.table({c: pa.array([r[i] for r in expanded], SCHEMA.field(c).type) for i, c in enumerate(SCHEMA.names)},
                     schema=SCHEMA)
    w, full = _sql_window(order, descending)
    con = duckdb.connect()
    con.register("xs", table)
    out = con.execute(f"SELECT k, {', '.join(VALUES)}, {select} FROM xs WINDOW w AS ({w}), wf AS ({full})")
    return Counter(tuple(_plain(v) for v in r) for r in out.fetchall())


def _plain(v):
    if isinstance(v, float):
        return "nan" if v != v else round(v, 9)
    if isinstance(v, Decimal):
        return Decimal(v).normalize()
    return v


def _updates_table(updates) -> pa.Table:
    """``(row, time, diff, new)`` updates as the table ``reduce_delta`` takes."""
    rows = [u[0] for u in updates]
    table = pa.table({c: pa.array([r[i] for r in rows], SCHEMA.field(c).type) for i, c in enumerate(SCHEMA.names)},
                     schema=SCHEMA)
    return table.append_column("time", pa.array([u[1] for u in updates], pa.int64())) \
        .append_column("diff", pa.array([u[2] for u in updates], pa.int64())) \
        .append_column("_new", pa.array([u[3] for u in updates], pa.bool_()))


def _count_evaluated(monkeypatch) -> list[int]:
    """The rows each window evaluation of the test gets (appended as they come)."""
    evaluated = []
    columns = Window.columns

    def counted(self, rows, out_schema, offsets=None):
        evaluated.append(rows.num_rows)
        return columns(self, rows, out_schema, offsets)

    monkeypatch.setattr(Window, "columns", counted)
    return evaluated


def kernel_outputs(updates, name: str, max_cells: int = 1 << 21) -> dict:
    """``reduce_delta``'s output changes: time -> Counter of output rows."""
    order, descending, functions, _ = WINDOWS[name]
    table = _updates_table(updates)
    reducer = Window(order, descending, functions, partition_by=["k"])
    out = reduce_delta(table, ["k"], VALUES, 1, reducer, max_cells=max_cells)
    found: dict = {}
    names = ["k", *VALUES, *functions]
    for r in out.to_pylist():
        found.setdefault(r["time"], Counter())[tuple(_plain(r[c]) for c in names)] += r["diff"]
    return found


def random_row(rng, partitions):
    def maybe(v, p=0.12):
        return None if rng.random() < p else v
    return (maybe(rng.randrange(partitions), 0.05), maybe(rng.randrange(6)),
            maybe(rng.choice([0.5, -1.25, 3.0, 2.0 ** 20, 0.0])), maybe(Decimal(rng.randrange(-500, 500)) / 100),
            maybe(datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(3))), maybe(rng.choice("xyzw")))


def random_stream(rng, *, partitions: int, rows: int, old_times: range, new_times: range, interleaved: bool):
    """Old updates (a stored history: insertions, some retracted) and new ones, each
    (row, time, diff, new). ``interleaved``: some old updates at the new times too."""
    updates, live = [], []
    for _ in range(rows):
        r = random_row(rng, partitions)
        updates.append((r, rng.choice(old_times), rng.choice([1, 1, 1, 2]), False))
        live.append(r)
    for t in new_times:
        for _ in range(rng.randrange(0, 4)):
            new = rng.random() < 0.8
            if rng.random() < 0.5 and live:  # retract a stored row (sometimes one never inserted)
                r = rng.choice(live) if rng.random() < 0.9 else random_row(rng, partitions)
                updates.append((r, t, -1, new if interleaved else True))
            else:
                r = random_row(rng, partitions)
                updates.append((r, t, rng.choice([1, 1, 2]), new if interleaved else True))
                live.append(r)
    return updates


def check(updates, name, max_cells=1 << 21):
    found = kernel_outputs(updates, name, max_cells)
    times = sorted({u[1] for u in updates})
    acc_total, acc_old, acc_found = Counter(), Counter(), Counter()
    first_new = min(u[1] for u in updates if u[3])
    for t in times:
        for r, ut, d, new in updates:
            if ut == t:
                acc_total[r] += d
                if not new:
                    acc_old[r] += d
        acc_found.update(found.get(t, Counter()))
        acc_found = Counter({r: m for r, m in acc_found.items() if m})
        if t < first_new:
            continue
        want = duckdb_window(acc_total, name)
        want.subtract(duckdb_window(acc_old, name))
        want = Counter({r: m for r, m in want.items() if m})
        assert acc_found == want, (f"{name} at time {t}: extra {dict((acc_found - want))}, "
                                   f"missing {dict((want - acc_found))}")
    return found


@pytest.mark.parametrize("name", list(WINDOWS))
@pytest.mark.parametrize("seed", range(4))
def test_every_time_equals_duckdb_from_scratch(name, seed):
    rng = random.Random(seed * 31 + len(name))
    updates = random_stream(rng, partitions=3, rows=40, old_times=range(0, 4), new_times=range(4, 12),
                            interleaved=False)
    check(updates, name, max_cells=rng.choice([7, 1 << 21]))  # a few positions a chunk, or all


@pytest.mark.parametrize("name", list(WINDOWS))
def test_old_updates_at_the_new_times_are_subtracted(name):
    rng = random.Random(7)
    updates = random_stream(rng, partitions=2, rows=30, old_times=range(0, 6), new_times=range(3, 10),
                            interleaved=True)
    check(updates, name)


def _big_partition(n: int, new: list):
    """``n`` stored rows of one partition (order ``o`` = 0 .. n - 1) at time 0, and ``new`` at time 1."""
    old = [((0, i, 0.5, Decimal(i % 7), datetime.date(2024, 1, 1), "x"), 0, 1, False) for i in range(n)]
    return old + [(r, 1, d, True) for r, d in new]


@pytest.mark.parametrize("name,functions,most", [
    ("lag", dict(prev=W.lag("s")), 1),
    ("row_number at the tail", dict(rn=W.row_number()), 1),
    ("running sum at the tail", dict(tot=W.running_sum("p"), rk=W.rank()), 1),
])
def test_a_change_at_the_tail_costs_a_few_rows_not_the_partition(monkeypatch, name, functions, most):
    n = 5000
    tail = (0, n + 5, 0.5, Decimal("1.00"), datetime.date(2024, 1, 2), "y")
    updates = _big_partition(n, [(tail, 1)])
    table = _updates_table(updates)
    evaluated = _count_evaluated(monkeypatch)
    out = reduce_delta(table, ["k"], VALUES, 1, Window(["o"], False, functions, partition_by=["k"]))
    # the new row, and for lag its successor's neighbour: never the partition
    assert out.num_rows <= most + 1, out.to_pylist()
    assert sum(evaluated) <= 8, f"{name}: evaluated {sum(evaluated)} rows for a one-row change"


def test_a_change_at_the_head_of_a_frame_to_the_partition_end_costs_a_few_rows(monkeypatch):
    n = 5000
    head = (0, -1, 0.5, Decimal("1.00"), datetime.date(2024, 1, 2), "y")
    updates = _big_partition(n, [(head, 1)])
    table = _updates_table(updates)
    evaluated = _count_evaluated(monkeypatch)
    functions = dict(rest=W.running_sum("p", W.rows(0, None)), near=W.running_count(frame=W.rows(1, 2)))
    out = reduce_delta(table, ["k"], VALUES, 1, Window(["o"], False, functions, partition_by=["k"]))
    # the new row and its successor, whose near frame now holds it (the rest is after the change)
    assert int(np.sum(np.asarray(out.column("diff")) > 0)) == 2, out.to_pylist()
    assert sum(evaluated) <= 12, f"evaluated {sum(evaluated)} rows for a one-row change"


def test_a_change_at_the_head_moves_the_ranks_but_a_lag_only_its_neighbours(monkeypatch):
    n = 2000
    head = (0, -1, 0.5, Decimal("1.00"), datetime.date(2024, 1, 2), "y")
    updates = _big_partition(n, [(head, 1)])
    for functions, want in ((dict(prev=W.lag("o", 2)), 2), (dict(rn=W.row_number()), n + 1)):
        out = reduce_delta(_updates_table(updates), ["k"], VALUES, 1, Window(["o"], False, functions, partition_by=["k"]))
        inserted = int(np.sum(np.asarray(out.column("diff")) > 0))
        assert inserted == want, (functions, inserted)


@pytest.mark.parametrize("descending", [False, True])
def test_a_change_in_the_middle_recomputes_only_the_rows_whose_value_frame_holds_it(monkeypatch, descending):
    n = 5000  # o = 0 .. n - 1; a new row at o = 2500 is in the frames of o = 2499 .. 2502 (ascending)
    updates = _big_partition(n, [((0, n // 2, 0.5, Decimal("1.00"), datetime.date(2024, 1, 2), "y"), 1)])
    table = _updates_table(updates)
    evaluated = _count_evaluated(monkeypatch)
    functions = dict(near=W.running_sum("p", W.range_frame(2, 1)), n=W.running_count(frame=W.range_frame(0, 1)))
    out = reduce_delta(table, ["k"], VALUES, 1, Window(["o"], descending, functions, partition_by=["k"]))
    moved = sorted(r["o"] for r in out.to_pylist() if r["diff"] > 0)
    # near moves o - 1 .. o + 2 (ascending) or o - 2 .. o + 1 (descending); n moves o - 1 or o + 1 and o
    want = [n // 2 - 2, n // 2 - 1, n // 2, n // 2, n // 2 + 1] if descending else \
        [n // 2 - 1, n // 2, n // 2, n // 2 + 1, n // 2 + 2]
    assert moved == want, moved
    assert sum(evaluated) <= 20, f"evaluated {sum(evaluated)} rows for a one-row change"


def test_value_frames_over_nan_infinities_and_nulls_equal_duckdb():
    """A NaN's or a null's frame is its peers; an infinity's reaches only equal infinities."""
    xs = [1.0, 2.0, float("nan"), float("inf"), None, None, 3.0, float("-inf"), 2.5]
    rows = [((0, i, x, Decimal(i), datetime.date(2024, 1, 1), "x"), 0, 1, False) for i, x in enumerate(xs)]
    rows += [((0, 9, float("nan"), Decimal(1), None, "y"), 1, 1, True), (rows[3][0], 2, -1, True),
             ((0, 10, None, None, None, None), 3, 1, True)]
    WINDOWS["extremes"] = (["f"], True, dict(a=W.running_sum("o", W.range_frame(1, 0)),
                                           b=W.running_count(frame=W.range_frame(None, 0.5)),
                                           c=W.running_sum("p", W.range_frame(0.5, None))),
                           "sum(o) OVER (w RANGE BETWEEN 1 PRECEDING AND CURRENT ROW), "
                           "count(*) OVER (w RANGE BETWEEN UNBOUNDED PRECEDING AND 0.5 FOLLOWING), "
                           "sum(p) OVER (w RANGE BETWEEN 0.5 PRECEDING AND UNBOUNDED FOLLOWING)")
    try:
        check(rows, "extremes")
    finally:
        del WINDOWS["extremes"]


@pytest.mark.parametrize("t,values,frame,sql", [
    (pa.timestamp("ns", "UTC"), [datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
        hours=h % 50, seconds=h % 3) for h in range(0, 120, 7)],
     W.range_frame(datetime.timedelta(hours=36), datetime.timedelta(minutes=90)),
     "INTERVAL 36 HOUR PRECEDING AND INTERVAL 90 MINUTE FOLLOWING"),
    (pa.decimal128(38, 2), [Decimal(10 ** 35) - Decimal(i) / 4 for i in range(12)] + [Decimal(1)],
     W.range_frame(Decimal("1.5"), 2), "1.5 PRECEDING AND 2 FOLLOWING"),
    (pa.int64(), [2 ** 62 + i for i in range(6)] + [-2 ** 62, 2 ** 63 - 4], W.range_frame(3, 2),
     "3 PRECEDING AND 2 FOLLOWING"),
])
@pytest.mark.parametrize("descending", [False, True])
def test_value_frames_over_timestamps_wide_decimals_and_extreme_integers(t, values, frame, sql, descending):
    values = values + [None]
    xs = pa.table({"x": pa.array(values, t), "y": pa.array(range(len(values)), pa.int64())})
    rows = xs.append_column(GROUP, pa.array(np.zeros(len(values), np.int64))) \
        .append_column(COUNT, pa.array(np.ones(len(values), np.int64)))
    got = Window(["x"], descending, dict(s=W.running_sum("y", frame)))(rows)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("xs", xs)
    want = con.execute(f"SELECT y, sum(y) OVER (ORDER BY x {'DESC' if descending else 'ASC'} NULLS LAST "
                       f"RANGE BETWEEN {sql}) FROM xs").fetchall()
    assert sorted(zip(got.column("y").to_pylist(), got.column("s").to_pylist())) == sorted(want)


# ------------------------------------------------------------------ through runs on Spark

BIG = pa.schema([("k", pa.int64()), ("o", pa.int64()), ("x", pa.decimal128(9, 2)), ("s", pa.string())])
BIG_PIPELINE = '''
from ops.dataflow.windows import lag, rank, row_number, running_sum


def pipeline(p):
    xs = p.input("xs")
    p.output("w", xs.window("k", "o", before=lag("s"), rn=row_number(), tot=running_sum("x"), rk=rank()))
'''
BIG_SQL = {"w": "lag(s) OVER (PARTITION BY k ORDER BY o, x, s), row_number() OVER (PARTITION BY k ORDER BY o, x, s), "
                "sum(x) OVER (PARTITION BY k ORDER BY o), rank() OVER (PARTITION BY k ORDER BY o)"}


def _big_at(updates, t) -> dict:
    """Every output of BIG_PIPELINE at time ``t``, by DuckDB from the updates up to it."""
    acc = Counter()
    for row, (ut,), d in updates:
        if ut <= t:
            acc[row] += d
    rows = [r for r, m in acc.items() for _ in range(m) if m > 0]
    table = pa.table({c: pa.array([r[i] for r in rows], BIG.field(c).type) for i, c in enumerate(BIG.names)},
                     schema=BIG)
    con = duckdb.connect()
    con.register("xs", table)
    return {out: Counter(con.execute(f"SELECT k, o, x, s, {sql} FROM xs").fetchall()) for out, sql in BIG_SQL.items()}


def _found_at(rows, out, t) -> Counter:
    names = ["k", "o", "x", "s", "before", "rn", "tot", "rk"]
    acc = Counter()
    for r in rows:
        if r["time"] <= t:
            acc[tuple(r[c] for c in names)] += r["diff"]
    return Counter({r: m for r, m in acc.items() if m})


def test_runs_over_a_large_partition_emit_what_each_change_moves(spark, tmp_path):
    from tests.helpers.pipeline_bench import Bench

    rng = random.Random(5)
    n = 3000
    bench = Bench(tmp_path, 1)
    path = bench.pipeline("big", BIG_PIPELINE)
    first = [((0, i, Decimal(i % 13) / 4, rng.choice("ab")), (i % 3,), 1) for i in range(n)]
    first += [((None if i % 5 == 0 else 1 + i % 3, rng.randrange(20), Decimal(i % 7), None), (i % 3,), 1)
              for i in range(60)]
    bench.ingest("xs", BIG, first)
    bench.run(path)
    # one row after the last of the big partition: one output update (lag, row_number,
    # running sum and rank of the new row; no other row moves)
    bench.ingest("xs", BIG, [((0, n + 10, Decimal("1.00"), "z"), (3,), 1)])
    bench.run(path)
    for out in BIG_SQL:
        at_3 = [r for r in bench.rows(out) if r["time"] == 3]
        assert len(at_3) == 1, (out, at_3)
    bench.advance_and_compact("2", full=True)
    # changes here and there, ties, retractions, nulls, several times in one run
    later = []
    for t in range(4, 9):
        for _ in range(3):
            if rng.random() < 0.4:
                later.append((first[rng.randrange(n)][0], (t,), -1))
            else:
                later.append(((rng.choice([0, 0, 1, None]), rng.choice([rng.randrange(n), None]),
                               Decimal(rng.randrange(100)) / 4, rng.choice(["a", None])), (t,), 1))
    bench.ingest("xs", BIG, later)
    bench.run(path)
    rows = {out: bench.rows(out) for out in BIG_SQL}
    for t in range(2, 9):
        want = _big_at(bench.updates["xs"], t)
        for out in BIG_SQL:
            assert _found_at(rows[out], out, t) == want[out], f"{out} at time {t}"


def test_a_window_of_partition_columns_only():
    """Rows without value columns: a partition's rows are its multiplicity."""
    t = pa.table({"k": [1, 1, 1, 2], "time": [0, 1, 2, 2], "diff": [1, 1, 1, 1], "_new": [False, True, True, True]})
    out = reduce_delta(t, ["k"], [], 1, Window(None, False, {"n": W.running_count(), "r": W.row_number()},
                                               partition_by=["k"]))
    got = Counter()
    for r in out.to_pylist():
        got[(r["k"], r["n"], r["r"], r["time"])] += r["diff"]
    # time 1: one row becomes two; time 2: two become three; partition 2 appears
    assert +got == Counter({(1, 2, 1, 1): 1, (1, 2, 2, 1): 1, (1, 3, 1, 2): 1, (1, 3, 2, 2): 1, (1, 3, 3, 2): 1,
                            (2, 1, 1, 2): 1})
    assert -got == Counter({(1, 1, 1, 1): 1, (1, 2, 1, 2): 1, (1, 2, 2, 2): 1})
