"""Dimension tables: ``ddcli advance TRACE --seal`` seals every time.

A sealed trace's upper is the empty frontier: it never holds a pipeline back, a later
ingest into it is one clear error that changes nothing, and ``status`` names the inputs
that do hold a pipeline back and by how much.
"""

from __future__ import annotations

from tests.helpers.cli import cli, jsonl, ok, write

JOIN = """
def pipeline(p):
    flights = p.input("flights")
    carriers = p.input("carriers")
    p.output("named", flights.join(carriers, on="carrier").select("flight", "name"))
"""


def test_a_sealed_trace_has_the_empty_upper_and_refuses_more_updates(tmp_path, digest):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "carriers", write(tmp_path / "c.csv", "carrier,name\nAA,American\nUA,United\n"),
           "--time", "0"))
    res = ok(cli(s, "advance", "carriers", "--seal"))
    assert "sealed for all times" in res.stdout
    assert jsonl(ok(cli(s, "status", "carriers", "--json")).stdout)[0]["upper"] == "{}"
    again = ok(cli(s, "advance", "carriers", "--seal", "--json"))
    assert jsonl(again.stdout)[0]["noop"] is True
    # the whole collection is there, at every time
    rows = jsonl(ok(cli(s, "query", "carriers", "--json")).stdout)
    assert sorted((r["carrier"], r["count"]) for r in rows) == [("AA", 1), ("UA", 1)]
    before = digest(s)
    res = cli(s, "ingest", "carriers", write(tmp_path / "c2.csv", "carrier,name\nDL,Delta\n"), "--time", "5")
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert "sealed" in res.stderr and "carriers" in res.stderr
    assert digest(s) == before


def test_seal_and_upper_together_are_refused(tmp_path, digest):
    s = str(tmp_path / "store")
    ok(cli(s, "ingest", "carriers", write(tmp_path / "c.csv", "carrier,name\nAA,American\n"), "--time", "0"))
    before = digest(s)
    res = cli(s, "advance", "carriers", "--seal", "--upper", "4")
    assert res.exit_code == 2 and "--seal" in res.stderr
    assert digest(s) == before


def test_a_sealed_dimension_table_never_holds_a_join_back(spark, tmp_path):
    s = str(tmp_path / "store")
    pipe = write(tmp_path / "named.py", JOIN)
    ok(cli(s, "ingest", "carriers", write(tmp_path / "c.csv", "carrier,name\nAA,American\nUA,United\n"),
           "--time", "0"))
    ok(cli(s, "ingest", "flights", write(tmp_path / "f1.csv", "carrier,flight,time\nAA,1,1\nUA,2,3\n")))
    ok(cli(s, "run", pipe))
    # flights' upper is 4, carriers' 1: the join is complete only up to 1, and status says who waits
    lag = {r["input"]: r for r in jsonl(ok(cli(s, "status", "--json")).stdout) if r["kind"] == "lag"}
    assert lag["carriers"]["holds_back"] is True and lag["carriers"]["behind_by"] == 3
    assert lag["flights"]["holds_back"] is False and lag["flights"]["behind_by"] is None
    assert lag["carriers"]["frontier"] == "1"
    ok(cli(s, "advance", "carriers", "--seal"))
    ok(cli(s, "run", pipe))
    lag = {r["input"]: r for r in jsonl(ok(cli(s, "status", "--json")).stdout) if r["kind"] == "lag"}
    assert not lag["carriers"]["holds_back"] and not lag["flights"]["holds_back"]
    assert lag["flights"]["frontier"] == "4"
    named = jsonl(ok(cli(s, "query", "named", "--as-of", "3", "--json")).stdout)
    assert sorted((r["flight"], r["name"]) for r in named) == [(1, "American"), (2, "United")]
    # later days: the output follows the flights alone
    ok(cli(s, "ingest", "flights", write(tmp_path / "f2.csv", "carrier,flight,time\nAA,3,6\n")))
    ok(cli(s, "run", pipe))
    named = jsonl(ok(cli(s, "query", "named", "--json")).stdout)
    assert sorted(r["flight"] for r in named) == [1, 2, 3]
    lag = {r["input"]: r for r in jsonl(ok(cli(s, "status", "--json")).stdout) if r["kind"] == "lag"}
    assert lag["flights"]["frontier"] == "7"
