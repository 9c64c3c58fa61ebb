"""Reference and readability: ``ddcli help operators`` generated from
the docstrings, ``avg``/``mean``, and a status without raw JSON or one line per column.

The avg reference is a plain fold of the input file: per key, the mean of the values
present at each time.
"""

from __future__ import annotations

import csv
import inspect
import io
from collections import defaultdict

import pytest

from ddcli.cli import app
from tests.helpers.cli import cli, jsonl, ok, runner

# what a pipeline author looks up, and an argument each entry must show
EXPECTED = {
    "p.input": "trace", "p.output": "key=None",
    "c.select": "**exprs", "c.filter": "condition", "c.flat_map": "keep", "c.join": "on",
    "c.semijoin": "on", "c.antijoin": "on", "c.count": "by", "c.sum": "name", "c.min": "column",
    "c.max": "name", "c.count_distinct": "name", "c.avg": "column", "c.mean": "name",
    "c.distinct": "()", "c.threshold": "fn", "c.top_k": "descending: bool | list[bool] = False", "c.agg": "**aggregates",
    "c.reduce_per_key": "fn", "c.iterate": "max_rounds", "c.arrange": "by", "c.concat": "*others",
    "c.negate": "()",
}


def test_help_operators_lists_every_operator_with_its_arguments_and_description():
    text = ok(runner.invoke(app, ["help", "operators"])).stdout
    entries = {}
    for block in text.split("\n\n"):
        head, _, body = block.strip().partition("\n")
        if head.startswith(("p.", "c.")):
            entries[head.split("(")[0]] = (head, body.strip())
    for name, arg in EXPECTED.items():
        assert name in entries, f"{name} missing from ddcli help operators"
        head, body = entries[name]
        assert arg in head, f"{name}: {head!r} does not show {arg!r}"
        assert body and body != "(no description)", f"{name} has no description"
    assert "_count" in entries["c.reduce_per_key"][1]  # the per-key contract is spelled out
    assert "mean" in entries["c.avg"][1]


def test_every_public_operator_has_a_docstring():
    from ops.dataflow.builder import Collection, Pipeline
    for cls in (Collection, Pipeline):
        for name, fn in vars(cls).items():
            if not name.startswith("_") and inspect.isfunction(fn):
                assert inspect.getdoc(fn), f"{cls.__name__}.{name} has no docstring"


AVG = """
def pipeline(p):
    sales = p.input("sales")
    p.output("avg_amount", sales.avg(by="shop", column="amount"))
    p.output("mean_amount", sales.mean(by="shop", column="amount", name="m"))
"""

SALES = ("shop,amount,time,diff\n"
         "a,10,1,1\na,20,1,1\nb,5,1,1\n\\N,4,1,1\n\\N,7,2,1\n"
         "a,30,2,1\nb,\\N,2,1\n"
         "a,10,3,-1\nb,5,3,-1\nc,7,3,2\n")


def avg_reference(t: int) -> dict:
    rows = defaultdict(int)
    for r in csv.DictReader(io.StringIO(SALES)):
        if int(r["time"]) <= t:
            shop = None if r["shop"] == "\\N" else r["shop"]  # a null shop is a group too
            rows[(shop, r["amount"])] += int(r["diff"])
    sums, counts = defaultdict(int), defaultdict(int)
    for (shop, amount), n in rows.items():
        if n:  # a shop with rows but no amount has a NULL mean, as SQL's AVG
            counts[shop] += 0 if amount == "\\N" else n
            sums[shop] += 0 if amount == "\\N" else int(amount) * n
    return {s: sums[s] / counts[s] if counts[s] else None for s in counts}


def test_avg_and_mean_per_key_at_every_time(spark, tmp_path):
    s = str(tmp_path / "store")
    (tmp_path / "sales.csv").write_text(SALES)
    (tmp_path / "avgs.py").write_text(AVG)
    ok(cli(s, "ingest", "sales", str(tmp_path / "sales.csv")))
    ok(cli(s, "run", str(tmp_path / "avgs.py")))
    for t in (1, 2, 3):
        want = avg_reference(t)
        for output, column in (("avg_amount", "avg"), ("mean_amount", "m")):
            got = {r["shop"]: r[column] for r in jsonl(ok(cli(s, "query", output, "--as-of", str(t), "--json")).stdout)}
            assert {k for k, v in got.items() if v is None} == {k for k, v in want.items() if v is None}, (t, got)
            assert {k: v for k, v in got.items() if v is not None} == \
                pytest.approx({k: v for k, v in want.items() if v is not None}), (t, got)

    # status: the pipeline in words, not JSON
    pipe = [r for r in jsonl(ok(cli(s, "status", "--json")).stdout) if r["kind"] == "pipeline"][0]
    assert pipe["frontier"] == "4" and pipe["inputs"] == "sales@4"
    assert pipe["outputs"] == "avg_amount, mean_amount"
    terminal = ok(cli(s, "status")).stdout
    assert "[[" not in terminal and "{" not in terminal


def test_status_shows_a_wide_schema_on_one_line_and_json_keeps_every_column(tmp_path):
    s = str(tmp_path / "store")
    names = [f"col{i}" for i in range(12)]
    (tmp_path / "wide.csv").write_text(",".join(names + ["time"]) + "\n" + ",".join(["1"] * 12 + ["1"]) + "\n")
    ok(cli(s, "ingest", "wide", str(tmp_path / "wide.csv")))
    terminal = ok(cli(s, "status")).stdout
    row = [ln for ln in terminal.splitlines() if ln.strip().startswith("wide ")]
    assert len(row) == 1 and "col0:int64" in row[0] and "+8 more" in row[0]
    assert "col11" not in terminal
    full = jsonl(ok(cli(s, "status", "--json")).stdout)[0]["columns"]
    assert full == ", ".join(f"{n}:int64" for n in names)
