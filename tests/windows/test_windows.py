"""``window`` (SQL's window functions over PARTITION BY / ORDER BY) on Spark against DuckDB's
own window functions, computed at every time on the accumulated input the test generated:
random streams with retractions, multiplicities and nulls in the partition and order columns,
int, double (with NaN), decimal, date and string columns, several runs with compaction between,
d = 1 and d = 2 (partially ordered times). The reference imports no ddcli code; ``verify``
(Spark's window functions, ops/verify/oracle.py) is checked after the last run."""

from __future__ import annotations

import datetime
import random
from collections import defaultdict
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from ops.verify.verify import verify_pipeline
from tests.helpers import reference as R
from tests.helpers.pipeline_bench import Bench, assert_refused, random_updates, run_since, schedule

XS = pa.schema([("k", pa.int64()), ("g", pa.string()), ("t", pa.int64()), ("f", pa.float64()),
                ("p", pa.decimal128(9, 2)), ("dt", pa.date32()), ("s", pa.string())])


def xs_row(rng):
    """Few distinct values, so that orders tie, partitions fill and rows repeat; doubles are
    dyadic (their sums exact in any order) or NaN or infinite."""
    def maybe(v, p=0.15):
        return None if rng.random() < p else v
    return (maybe(rng.randrange(3), 0.1), maybe(rng.choice("ab")), maybe(rng.randrange(4)),
            maybe(rng.choice([0.5, -1.25, 3.0, 2.0 ** 40, float("nan"), float("inf")])),
            maybe(Decimal(rng.randrange(-300, 300)) / 100),
            maybe(datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(4))), maybe(rng.choice("xyz")))


PIPELINE = '''
from decimal import Decimal

from ops.dataflow.windows import (dense_rank, lag, lead, range_frame, rank, row_number, rows, running_avg,
                                  running_count, running_sum)


def pipeline(p):
    xs = p.input("xs")
    p.output("by_k", xs.window("k", "t", rn=row_number(), rk=rank(), drk=dense_rank(), prev=lag("s"),
                               nxt2=lead("p", 2, Decimal("-1.00")), tot=running_sum("p"), n=running_count(),
                               mean3=running_avg("f", frame=rows(2))))
    p.output("by_kg", xs.window(["k", "g"], [("dt", "desc"), "s"], rk=rank(), drk=dense_rank(),
                                fsum=running_sum("f", frame=rows()), fcnt=running_count("f", frame=rows(1)),
                                before=lag("dt"), tcur=running_sum("t", frame=rows(0)),
                                ahead=running_sum("f", frame=rows(1, 2))))
    p.output("whole", xs.window([], "f", descending=True, rn=row_number(), tsum=running_sum("t"),
                                pavg=running_avg("p"), after=lead("f"), n3=running_count("p", frame=rows(3)),
                                rest=running_count("p", frame=rows(0, None))))
    p.output("by_s", xs.window("s", ["p", "dt"], descending=[False, True], rk=rank(), fsum=running_sum("f"),
                               back3=lag("t", 3, 0), same=lag("g", 0),
                               fafter=running_sum("f", frame=range_frame(0, None))))
    # no order (or only partition columns): every row a peer, a RANGE frame the whole partition
    p.output("unordered", xs.window("g", ["g"], n=running_count(), tot=running_sum("p"), rk=dense_rank(),
                                    nt=running_count("t", frame=rows())))
'''

# The same windows in DuckDB's SQL. ``row_number``, ``lag``, ``lead`` and ROWS frames order
# rows tied in the window's order by their other columns, in the collection's column order.
OTHERS = {"by_k": "g, f, p, dt, s", "by_kg": "t, f, p", "whole": "k, g, t, p, dt, s", "by_s": "k, g, t, f",
          "unordered": "k, t, f, p, dt, s"}
SQL = {
    "by_k": """SELECT *, row_number() OVER full_order AS rn, rank() OVER w AS rk, dense_rank() OVER w AS drk,
                 lag(s) OVER full_order AS prev, lead(p, 2, -1.00) OVER full_order AS nxt2, sum(p) OVER w AS tot,
                 count(*) OVER w AS n, avg(f) OVER (full_order ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS mean3
               FROM xs WINDOW w AS (PARTITION BY k ORDER BY t), full_order AS (PARTITION BY k ORDER BY t, {by_k})""",
    "by_kg": """SELECT *, rank() OVER w AS rk, dense_rank() OVER w AS drk,
                  sum(f) OVER (full_order ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS fsum,
                  count(f) OVER (full_order ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS fcnt,
                  lag(dt) OVER full_order AS before,
                  sum(t) OVER (full_order ROWS BETWEEN CURRENT ROW AND CURRENT ROW) AS tcur,
                  sum(f) OVER (full_order ROWS BETWEEN 1 PRECEDING AND 2 FOLLOWING) AS ahead
                FROM xs WINDOW w AS (PARTITION BY k, g ORDER BY dt DESC, s),
                               full_order AS (PARTITION BY k, g ORDER BY dt DESC, s, {by_kg})""",
    "whole": """SELECT *, row_number() OVER full_order AS rn, sum(t) OVER w AS tsum, avg(p) OVER w AS pavg,
                  lead(f) OVER full_order AS after,
                  count(p) OVER (full_order ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS n3,
                  count(p) OVER (full_order ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS rest
                FROM xs WINDOW w AS (ORDER BY f DESC), full_order AS (ORDER BY f DESC, {whole})""",
    "by_s": """SELECT *, rank() OVER w AS rk, sum(f) OVER w AS fsum, lag(t, 3, 0) OVER full_order AS back3,
                 lag(g, 0) OVER full_order AS same,
                 sum(f) OVER (w RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS fafter
               FROM xs WINDOW w AS (PARTITION BY s ORDER BY p, dt DESC),
                              full_order AS (PARTITION BY s ORDER BY p, dt DESC, {by_s})""",
    "unordered": """SELECT *, count(*) OVER w AS n, sum(p) OVER w AS tot, dense_rank() OVER (w ORDER BY g) AS rk,
                      count(t) OVER (PARTITION BY g ORDER BY {unordered}
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS nt
                    FROM xs WINDOW w AS (PARTITION BY g)""",
}
OUTPUTS = list(SQL)
APPROX = {"by_k": ["mean3"], "whole": ["pavg"]}  # averages: a division DuckDB may round otherwise


def duckdb_windows(xs: R.Coll) -> dict[str, R.Coll]:
    """Every output, computed by DuckDB over the collection (a row of multiplicity m is m rows)."""
    rows = [r for r, m in xs.rows.items() for _ in range(m) if m > 0]
    table = pa.table({c: pa.array([r[i] for r in rows], XS.field(c).type) for i, c in enumerate(xs.columns)},
                     schema=XS)
    con = duckdb.connect()
    con.register("xs", table)
    out = {}
    for name, sql in SQL.items():
        res = con.execute(sql.format(**OTHERS))
        cols = [d[0] for d in res.description]
        coll = R.Coll(cols)
        for r in res.fetchall():
            coll.add(r, 1)
        out[name] = coll
    return out


def check_every_time(bench: Bench) -> None:
    """Every output at every time of the box equals DuckDB's windows of the input there."""
    problems = []
    rows = {out: bench.rows(out) for out in OUTPUTS}
    for t in R.box(bench.times()):
        expected = duckdb_windows(bench.inputs_at(t)["xs"])
        for out in OUTPUTS:
            found = bench.output_at(out, t, rows[out])
            diff = R.approx_difference(expected[out], found, APPROX.get(out, []))
            if diff:
                problems.append(f"output {out!r} at time {t}: {diff}")
    assert not problems, "\n".join(problems[:6])


@pytest.mark.parametrize("d", [1, 2])
def test_windows_equal_duckdb_at_every_time_over_runs(spark, tmp_path, d):
    bench = Bench(tmp_path, d)
    path = bench.pipeline("windows", PIPELINE)
    rng, pool = random.Random(50 + d), []
    runs = 3 if d == 1 else 2
    for r in range(runs):
        times, upper = schedule(d, r, lag=d == 2)
        bench.ingest("xs", XS, random_updates(rng, xs_row, times, 40, pool), upper=upper)
        assert not bench.run(path).nothing_to_do
        check_every_time(bench)
        if r < runs - 1:
            bench.advance_and_compact(run_since(d, r), full=r % 2 == 1)
    v = verify_pipeline(bench.store, path)  # the engine's own from-scratch oracle agrees too
    assert v.times and v.ok, "\n".join(x.describe() for x in v.differences)
    types = bench.store.trace("by_k").schema
    assert types.field("tot").type == pa.decimal128(38, 2) and types.field("nxt2").type == pa.decimal128(9, 2)


@pytest.mark.parametrize("body,words", [
    ('xs.window("k", "nope", n=row_number())', ["'nope'", "not a value column"]),
    ('xs.window("k", "t", total=running_sum("s"))', ["total=sum('s')", "not numeric"]),
    ('xs.window("k", "t", k=rank())', ["'k'", "rename it"]),
    ('xs.window("k", "t", f=rank())', ["'f'", "rename it"]),
    ('xs.window("k", "t", x=lag("zz"))', ["'zz'", "not a value column"]),
    ('xs.window("k", "t", x=running_sum("k"))', ["x=sum('k')", "partition column"]),
    ('xs.window("k", "t", x=lag("t", 1, "text"))', ["default='text'", "int64"]),
])
def test_window_mistakes_are_one_line_before_spark(spark_jobs, tmp_path, body, words):
    bench = Bench(tmp_path, 1)
    bench.ingest("xs", XS, [((1, "a", 2, 0.5, Decimal("1.00"), datetime.date(2024, 1, 1), "x"), (0,), 1)])
    path = bench.pipeline("bad", f'''
from ops.dataflow.windows import lag, rank, row_number, running_sum


def pipeline(p):
    xs = p.input("xs")
    p.output("out", {body})
''')
    assert_refused(bench, path, spark_jobs, words)


@pytest.mark.parametrize("columns", [{}, {"n": "row_number"}, {"n": ("lag", "x")}])
def test_window_refuses_what_is_no_window_function_when_declared(columns):
    from ops.dataflow import windows as W
    from ops.dataflow.builder import Pipeline
    from ops.errors import PipelineError

    xs = Pipeline().input("xs")
    with pytest.raises(PipelineError, match="window"):
        xs.window("k", "t", **columns)
    for bad in (W.lag("x", -1), W.running_sum("x", frame=W.rows(-2)), W.running_sum("x", frame="rows"),
                W.running_count(frame=W.Frame("range", "3")), W.running_count(frame=W.range_frame(1, -2)),
                W.running_count(frame=W.range_frame(datetime.timedelta(days=1), 2)),
                W.running_sum("x", frame=W.range_frame(float("inf"), 0))):
        with pytest.raises(PipelineError, match="window"):
            xs.window("k", "t", n=bad)


def test_a_partition_keeps_its_rows_multiplicities_and_ties_in_one_order():
    """Without Spark: the reducer on one group, against DuckDB over the same rows."""
    from ops.dataflow.window_reducer import Window
    from ops.dataflow.windows import lag, row_number

    rows = pa.table({"_group": [0, 0, 0, 0], "o": [1, 1, None, 1], "x": ["b", "a", "c", None],
                     "_count": [2, 1, 1, -1]})
    out = Window(["o"], [False], {"rn": row_number(), "prev": lag("x")})(rows)
    got = defaultdict(int)
    for r in out.to_pylist():
        got[(r["o"], r["x"], r["rn"], r["prev"])] += r["_count"]
    con = duckdb.connect()
    want = con.execute("""SELECT o, x, row_number() OVER w, lag(x) OVER w FROM (VALUES (1, 'b'), (1, 'b'), (1, 'a'),
                          (NULL, 'c')) v(o, x) WINDOW w AS (ORDER BY o, x)""").fetchall()
    assert dict(got) == {r: 1 for r in want}


def test_a_partition_over_the_memory_budget_is_refused_naming_the_window():
    import numpy as np

    from ops.dataflow.window_reducer import Window
    from ops.dataflow.windows import row_number
    from ops.errors import KeyTooLarge
    from ops.reduce.kernel import reduce_delta

    n = 5000  # a partition of 5,000 stored rows and a new first row: every row's number moves
    old = pa.table({"k": np.zeros(n, np.int64), "t": np.arange(n), "time": np.arange(n) % 50,
                    "diff": np.ones(n, np.int64), "_new": np.zeros(n, bool)})
    head = pa.table({"k": [0], "t": [n], "time": [50], "diff": [1], "_new": [True]}).cast(old.schema)
    with pytest.raises(KeyTooLarge, match=r"^window\(order by t desc: rn\): a change of key \{'k': 0\} moves 5,001 "):
        reduce_delta(pa.concat_tables([old, head]), ["k"], ["t"], 1, Window(["t"], [True], {"rn": row_number()}),
                     limit_bytes=120 * 1000)
