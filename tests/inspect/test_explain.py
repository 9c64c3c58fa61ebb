"""``ddcli explain`` without Spark: operators by line, shared arrangements, loop paths and
why, priorities, inputs with lag; and that no JVM starts.

The expected lines are read from the test's own pipeline text (the line holding each
call), the expected paths from the rules a person reads in docs/architecture.md: a body
that only combines rows of one root runs in tasks dealt by root, one whose labels cross
every partition runs resident in the machine's task slots (at most 16) or in one task,
one with a Spark-only function or inside another loop round by round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO
from tests.helpers.cli import cli, jsonl, ok, one_line_error, write
from tests.inspect.graph_pipeline import PIPELINE



def line_of(text: str, needle: str) -> int:
    """The line number of the only line of ``text`` holding ``needle``."""
    lines = [i for i, l in enumerate(text.splitlines(), 1) if needle in l]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


@pytest.fixture
def graph_store(tmp_path, store_dir):
    ok(cli(store_dir, "ingest", "edges", write(tmp_path / "e.csv", "src,dst,time\n1,2,1\n2,3,1\n3,1,2\n"),
           "--key", "src"))
    ok(cli(store_dir, "ingest", "roots", write(tmp_path / "r.csv", "node,time\n1,1\n")))
    return store_dir


def explain_json(store: str, path: str, *args: str, env: dict | None = None) -> dict:
    res = ok(cli(store, "explain", path, "--json", *args, env=env))
    [record] = jsonl(res.stdout)
    return record


def test_every_operator_is_named_by_the_line_that_declares_it(graph_store, tmp_path):
    path = write(tmp_path / "graph.py", PIPELINE)
    ex = explain_json(graph_store, path)
    ops_at = {}
    for o in ex["operators"]:
        ops_at.setdefault(o["where"], []).append(o["op"])
    for op, needle in [("count", "by_node.count"), ("arrange", "steps.arrange"), ("loop", "start.iterate(hop"),
                       ("output", 'p.output("fanout"'), ("filter", 'x.filter('), ("min", "min(by=")]:
        at = f"graph.py:{line_of(PIPELINE, needle)}"
        kind = "reduce" if op in ("count", "min") else op
        assert kind in ops_at.get(at, []), (op, at, ops_at.get(at))
    assert all(o["where"].startswith("graph.py:") for o in ex["operators"]), ex["operators"]
    assert all(o["summary"] for o in ex["operators"])
    # operators inside a loop name it
    assert {o["loop"] for o in ex["operators"] if o["op"] == "distinct" and o["loop"]} == {"reach", "spark_only"}


def test_an_arrangement_read_by_two_operators_is_shared(graph_store, tmp_path):
    path = write(tmp_path / "graph.py", PIPELINE)
    ex = explain_json(graph_store, path)
    arranged = {a["collection"]: a for a in ex["arrangements"]}
    ops = {o["name"]: o for o in ex["operators"]}
    [arrange] = [o["name"] for o in ex["operators"] if o["op"] == "arrange"]
    a = arranged[arrange]
    readers = sorted(r.split(" ")[0] for r in a["readers"])
    assert [ops[r]["op"] for r in readers] == ["join", "reduce"], a
    assert a["shared"] and a["kind"] == "state" and a["trace"] == f"graph.{arrange}" and a["key"] == ["node"]
    # the input traces are arrangements already; nothing was written yet
    assert a["rows"] is None and all(s["exists"] is False for s in ex["state"])
    assert f"graph.{arrange}" in {s["name"] for s in ex["state"]}


def test_each_loop_says_its_path_and_why(graph_store, tmp_path, monkeypatch):
    monkeypatch.delenv("DDCLI_LOOP_PATH", raising=False)
    monkeypatch.delenv("DDCLI_LOOP_TASKS", raising=False)
    path = write(tmp_path / "graph.py", PIPELINE)
    loops = {l["name"]: l for l in explain_json(graph_store, path, "--master", "local[2]")["loops"]}
    assert loops["reach"]["path"] == "local" and loops["reach"]["by"] == ["root"], loops["reach"]
    assert loops["reach"]["broadcast"] and "500,000" in loops["reach"]["limits"][0]
    # so few rows in local mode: one task, as the run decides (ops/loops/route.py, few_rows_decision)
    assert loops["cc"]["path"] == "one_task" and "4 rows, few enough for one task" in loops["cc"]["why"], loops["cc"]
    spread = {l["name"]: l for l in explain_json(graph_store, path, "--master", "local[2]",
                                                env={"DDCLI_LOOP_PATH": "resident"})["loops"]}
    assert spread["cc"]["path"] == "resident" and spread["cc"]["tasks"] == 2 and spread["cc"]["by"] == []
    assert "by node" in spread["cc"]["why"] and "by label" in spread["cc"]["why"]
    assert loops["spark_only"]["path"] == "round"
    assert "length(root)" in loops["spark_only"]["why"] or "length(cast" in loops["spark_only"]["why"]
    # one task slot: not resident, every row in one task
    one = {l["name"]: l for l in explain_json(graph_store, path, "--master", "local[1]")["loops"]}
    assert one["cc"]["path"] == "one_task" and "one task slot" in one["cc"]["why"]
    # the switch a run obeys
    forced = {l["name"]: l for l in explain_json(graph_store, path, env={"DDCLI_LOOP_PATH": "round"})["loops"]}
    assert all(l["path"] == "round" and "DDCLI_LOOP_PATH=round" in l["why"] for l in forced.values())


def test_priorities_nested_loops_and_the_sections_for_people(graph_store, tmp_path):
    nested = textwrap.dedent('''\
        def pipeline(p):
            roots = p.input("roots")
            def outer(x):
                return x.iterate(lambda y: y.concat(x).distinct(), name="inner").concat(x).distinct()
            p.output("o", roots.iterate(outer, name="outer"))
    ''')
    path = write(tmp_path / "nested.py", nested)
    loops = {l["name"]: l for l in explain_json(graph_store, path)["loops"]}
    assert loops["inner"]["path"] == "round" and loops["inner"]["inside"] == "outer"
    assert "nested" in loops["inner"]["why"]
    graph = write(tmp_path / "graph.py", PIPELINE)
    pri = explain_json(graph_store, graph)["priorities"]
    assert {(p["loop"], p["kind"], p["expression"]) for p in pri} == {
        ("spark_only", "variable", "length(root)"), ("spark_only", "enter_at", "length(root)")}
    text = ok(cli(graph_store, "explain", graph)).stdout
    for needle in ["operators (", "arrangements", "loops", "priorities", "inputs", "outputs", "state traces",
                   f"graph.py:{line_of(PIPELINE, 'by_node.count')}", "in tasks, partition-local by root",
                   "round by round", "its first run reads 4 new input updates"]:
        assert needle in text, needle


def test_inputs_say_how_far_behind_the_pipeline_is_and_outputs_that_do_not_exist_yet(graph_store, tmp_path):
    path = write(tmp_path / "graph.py", PIPELINE)
    ex = explain_json(graph_store, path)
    inputs = {i["name"]: i for i in ex["inputs"]}
    assert inputs["edges"]["lag"]["updates"] == 3 and inputs["edges"]["upper"] == "3"
    assert inputs["roots"]["lag"]["updates"] == 1 and inputs["roots"]["lag"]["consumed"] is None
    assert inputs["roots"]["lag"]["holds_back"] and inputs["roots"]["lag"]["behind_by"] == 1  # upper 2 < 3
    assert [o["exists"] for o in ex["outputs"]] == [False] * 5 and ex["runs"] == 0
    missing = write(tmp_path / "missing.py", 'def pipeline(p):\n    p.output("o", p.input("nope").distinct())\n')
    assert explain_json(graph_store, missing)["next_run"].startswith("refuses to run: input trace nope")


def test_a_column_mistake_is_one_line_naming_its_line(graph_store, tmp_path):
    path = write(tmp_path / "typo.py", 'def pipeline(p):\n    p.output("o", p.input("edges").count(by="scr"))\n')
    err = one_line_error(cli(graph_store, "explain", path))
    assert "typo.py:2" in err and "unknown column 'scr'" in err
    err = one_line_error(cli(graph_store, "explain", path, "--format", "csv"))
    assert "use --json" in err


def test_explain_starts_no_jvm_and_imports_no_pyspark(graph_store, tmp_path):
    """In a process of its own, with a ``java`` on the PATH that leaves a mark if anything
    starts it: the command must not import pyspark at all (so no SparkContext, no JVM)."""
    path = write(tmp_path / "graph.py", PIPELINE)
    fake = tmp_path / "bin"
    fake.mkdir()
    mark = tmp_path / "java-started"
    java = fake / "java"
    java.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    java.chmod(0o755)
    probe = ("import sys\nfrom ddcli.cli import app\n"
             "code = app(sys.argv[1:], standalone_mode=False)\n"
             "print('PYSPARK' if any(m == 'pyspark' or m.startswith('pyspark.') for m in sys.modules) else 'NO-PYSPARK')\n"
             "sys.exit(code)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = f"{fake}:{env.get('PATH', '')}"
    res = subprocess.run([sys.executable, "-c", probe, "explain", path, "--json", "--store", graph_store],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    *records, verdict = res.stdout.strip().splitlines()
    assert verdict == "NO-PYSPARK" and not mark.exists()
    assert json.loads(records[0])["pipeline"] == "graph"


def test_every_sample_pipeline_explains_on_an_empty_store(store_dir):
    samples = os.path.join(REPO, "sample_data", "pipelines")
    for name in sorted(os.listdir(samples)):
        ex = explain_json(store_dir, os.path.join(samples, name))
        assert ex["operators"] and ex["next_run"].startswith("refuses to run: input trace"), (name, ex["next_run"])
        assert all(o["where"].startswith(name + ":") for o in ex["operators"]), (name, ex["operators"])


def test_agg_and_a_directed_top_k_are_each_one_sentence():
    from ops.dataflow import aggregates as A
    from ops.dataflow.builder import Pipeline
    from ops.explain.operators import summary

    xs = Pipeline("s").input("xs")
    agg = xs.agg("k", n=A.count(), total=A.sum("w"), low=A.min("v"))
    top = xs.top_k("k", 2, [("w", "desc"), "v"])
    assert summary(agg.node) == "n = count(), total = sum(w), low = min(v) per k, in one reduce in input_0 (reads its arrangement)"
    assert "the first 2 rows by w descending, v per k" in summary(top.node)


def test_a_window_is_one_sentence_naming_its_functions_and_frames():
    from ops.dataflow import windows as W
    from ops.dataflow.builder import Pipeline
    from ops.explain.operators import summary

    xs = Pipeline("s").input("xs")
    win = xs.window("k", [("t", "desc")], n=W.row_number(), prev=W.lag("x", 2, 0),
                    s=W.running_sum("x", frame=W.rows(3)), c=W.running_count())
    assert summary(win.node).startswith(
        "every row with n = row_number(), prev = lag(x, 2, 0), s = sum(x) rows 3 preceding, "
        "c = count(*) range unbounded preceding over (partition by k, order by t descending)")
    assert "one partition, order by (none)" in summary(xs.window([], None, m=W.running_avg("x")).node)
    assert "a change recomputing the rows from it to its partition's end" in summary(win.node)
    near = summary(xs.window("k", "t", prev=W.lag("x", 2), nxt=W.lead("x"), s=W.running_sum("x", W.rows(1))).node)
    assert "a change recomputing its own row and the 1 before and 2 after" in near
