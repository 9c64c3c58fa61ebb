"""TPC-H through pipelines a newcomer writes from the README, against DuckDB at every refresh.

The base load (scale factor 0.01: 60,000 lineitems; decimals, dates and strings as TPC-H types
them) and three refreshes, each deleting and inserting orders with their lineitems and moving
customers, with compaction between runs. After every run each output, at every time so far,
equals DuckDB's answer from scratch on the tables as they were then (decimals exactly, doubles
within 1e-12 relative) and holds no row of another count than 1.
"""

from __future__ import annotations

import os

import pytest

from ops.run.run import run_pipeline
from storage.store import Store
from tests.helpers.operations import trace_at
from tests.helpers.tpch import CHANGING, TABLES, Reference, generate, same_rows

PIPELINE = '''
def pipeline(p):
    lineitem, orders, customer = p.input("lineitem"), p.input("orders"), p.input("customer")

    # Q1: pricing summary (every aggregate its own reduce, joined back on the group key)
    li = lineitem.filter("l_shipdate <= date '1998-12-01' - interval 90 days").select(
        "l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice",
        disc_price="l_extendedprice * (1 - l_discount)", charge="l_extendedprice * (1 - l_discount) * (1 + l_tax)")
    k = ["l_returnflag", "l_linestatus"]
    q1 = li.sum(k, "l_quantity", name="sum_qty")
    for column, name in [("l_extendedprice", "sum_base_price"), ("disc_price", "sum_disc_price"),
                         ("charge", "sum_charge")]:
        q1 = q1.join(li.sum(k, column, name=name), on=k)
    p.output("q1", q1.join(li.avg(k, "l_quantity", name="avg_qty"), on=k).join(li.count(k), on=k))

    # Q1 with money as doubles
    dbl = li.select(*k, price="CAST(l_extendedprice AS DOUBLE)", charge="CAST(charge AS DOUBLE)")
    p.output("q1_double", dbl.sum(k, "price", name="sum_price").join(dbl.sum(k, "charge", name="sum_charge"), on=k)
             .join(dbl.avg(k, "charge", name="avg_charge"), on=k))

    # Q5: local supplier volume (a chain of joins, one of them on two columns)
    c = customer.select(custkey="c_custkey", nationkey="c_nationkey")
    o = orders.filter("o_orderdate >= date '1994-01-01' AND o_orderdate < date '1995-01-01'") \\
        .select(orderkey="o_orderkey", custkey="o_custkey")
    l = lineitem.select(orderkey="l_orderkey", suppkey="l_suppkey", rev="l_extendedprice * (1 - l_discount)")
    s = p.input("supplier").select(suppkey="s_suppkey", nationkey="s_nationkey")
    n = p.input("nation").select(nationkey="n_nationkey", n_name="n_name", regionkey="n_regionkey")
    r = p.input("region").filter("r_name = 'ASIA'").select(regionkey="r_regionkey")
    j = c.join(o, on="custkey").join(l, on="orderkey").join(s, on=["suppkey", "nationkey"]) \\
        .join(n, on="nationkey").join(r, on="regionkey")
    p.output("q5", j.sum("n_name", "rev", name="revenue"))

    # Q6: forecasting revenue change (one global sum)
    q6 = lineitem.filter("l_shipdate >= date '1994-01-01' AND l_shipdate < date '1995-01-01' "
                         "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24")
    p.output("q6", q6.select(rev="l_extendedprice * l_discount").sum([], "rev", name="revenue"))

    # Q12: shipping modes and order priority (CASE inside sums)
    lines = lineitem.filter("l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate "
                            "AND l_shipdate < l_commitdate AND l_receiptdate >= date '1994-01-01' "
                            "AND l_receiptdate < date '1995-01-01'").select(orderkey="l_orderkey", mode="l_shipmode")
    pri = orders.select(orderkey="o_orderkey", urgent="CASE WHEN o_orderpriority IN ('1-URGENT', '2-HIGH') THEN 1 ELSE 0 END")
    q12 = lines.join(pri, on="orderkey").select("mode", "urgent", other="1 - urgent")
    p.output("q12", q12.sum("mode", "urgent", name="high").join(q12.sum("mode", "other", name="low"), on="mode"))
'''

QUERIES = {
    "q1": """SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice),
               sum(l_extendedprice * (1 - l_discount)), sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)),
               avg(l_quantity), count(*)
             FROM lineitem WHERE l_shipdate <= date '1998-12-01' - interval 90 days GROUP BY ALL""",
    "q1_double": """SELECT l_returnflag, l_linestatus, sum(l_extendedprice::DOUBLE),
               sum((l_extendedprice * (1 - l_discount) * (1 + l_tax))::DOUBLE),
               avg((l_extendedprice * (1 - l_discount) * (1 + l_tax))::DOUBLE)
             FROM lineitem WHERE l_shipdate <= date '1998-12-01' - interval 90 days GROUP BY ALL""",
    "q5": """SELECT n_name, sum(l_extendedprice * (1 - l_discount))
             FROM customer, orders, lineitem, supplier, nation, region
             WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey
               AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey
               AND r_name = 'ASIA' AND o_orderdate >= date '1994-01-01' AND o_orderdate < date '1995-01-01'
             GROUP BY n_name""",
    "q6": """SELECT sum(l_extendedprice * l_discount) FROM lineitem
             WHERE l_shipdate >= date '1994-01-01' AND l_shipdate < date '1995-01-01'
               AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24 HAVING count(*) > 0""",
    "q12": """SELECT l_shipmode,
               sum(CASE WHEN o_orderpriority IN ('1-URGENT', '2-HIGH') THEN 1 ELSE 0 END),
               sum(CASE WHEN o_orderpriority IN ('1-URGENT', '2-HIGH') THEN 0 ELSE 1 END)
             FROM orders, lineitem
             WHERE o_orderkey = l_orderkey AND l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate
               AND l_shipdate < l_commitdate AND l_receiptdate >= date '1994-01-01'
               AND l_receiptdate < date '1995-01-01'
             GROUP BY l_shipmode""",
}


@pytest.fixture(scope="module")
def tpch_base(tmp_path_factory):
    return generate(str(tmp_path_factory.mktemp("tpch")), 0.01)


def test_tpch_queries_equal_duckdb_at_every_refresh(tmp_path, tpch_base):
    store = Store(str(tmp_path / "store"))
    ref = Reference(tpch_base, str(tmp_path))
    for t in TABLES:
        store.ingest(t, [os.path.join(tpch_base, f"{t}.parquet")], time=0)
    path = tmp_path / "tpch.py"
    path.write_text(PIPELINE)
    answers = {}
    for r in range(4):
        if r:
            for table, file in ref.refresh(r).items():
                store.ingest(table, [file])
            for t in set(TABLES) - set(CHANGING):
                store.advance(t, upper=str(r + 1))
        answers[r] = {q: ref.answer(sql) for q, sql in QUERIES.items()}
        run_pipeline(store, str(path))
        problems = []
        for q in QUERIES:
            for t in range(r + 1):
                found = trace_at(store, q, (t,))
                if set(found.values()) - {1}:
                    problems.append(f"{q} at refresh {t}: rows of count other than 1: {found}")
                    break
                diff = same_rows(answers[t][q], list(found))
                if diff:
                    problems.append(f"{q} at refresh {t}: {diff}")
                    break
        assert not problems, "\n".join(problems)
        if r == 1:  # compaction between runs: merged layers, times advanced to what was consumed
            for t in TABLES:
                store.advance(t, since=str(r))
            store.compact(full=True, grace_seconds=0)
