"""Several pipelines in one ``ddcli run``, and the run report.

``ddcli run a.py b.py`` runs them in order in one Spark session, each its own commit; a
pipeline that fails is named, commits nothing, and the others still run. ``--json`` gives
one record per pipeline with its duration and rows.
"""

from __future__ import annotations

from tests.helpers.cli import cli, jsonl, ok

COUNT = """
def pipeline(p):
    p.output("counts", p.input("words").count(by="word"))
"""
LETTERS = """
def pipeline(p):
    w = p.input("words").select("word", letter="substr(word, 1, 1)")
    p.output("letters", w.count(by="letter"))
"""
TYPO = """
def pipeline(p):
    p.output("typo", p.input("words").count(by="wrod"))
"""
WORDS = "word,time\napple,1\navocado,1\nbanana,2\napple,2\n"


def setup(tmp_path) -> tuple[str, dict]:
    s = str(tmp_path / "store")
    (tmp_path / "w.csv").write_text(WORDS)
    ok(cli(s, "ingest", "words", str(tmp_path / "w.csv")))
    files = {}
    for name, text in [("count", COUNT), ("letters", LETTERS), ("typo", TYPO)]:
        (tmp_path / f"{name}.py").write_text(text)
        files[name] = str(tmp_path / f"{name}.py")
    return s, files


def collection(store: str, trace: str) -> dict:
    """{row: multiplicity}; the multiplicity column is ``multiplicity`` when a data column is ``count``."""
    rows = jsonl(ok(cli(store, "query", trace, "--json")).stdout)
    mult = "multiplicity" if rows and "multiplicity" in rows[0] else "count"
    return {tuple(v for k, v in r.items() if k != mult): r[mult] for r in rows}


def test_two_pipelines_in_one_run_each_report_duration_and_rows(spark, tmp_path):
    s, f = setup(tmp_path)
    res = ok(cli(s, "run", f["count"], f["letters"], "--json"))
    recs = jsonl(res.stdout)
    assert [r["pipeline"] for r in recs] == ["count", "letters"]
    for r in recs:
        assert r["noop"] is False and r["rows_in"] == 4 and r["seconds"] > 0
        assert r["rows_out"] == sum(r["outputs"].values()) > 0
    assert collection(s, "counts") == {("apple", 2): 1, ("avocado", 1): 1, ("banana", 1): 1}
    assert collection(s, "letters") == {("a", 3): 1, ("b", 1): 1}
    again = jsonl(ok(cli(s, "run", f["count"], f["letters"], "--json")).stdout)
    assert [r["noop"] for r in again] == [True, True] and [r["rows_in"] for r in again] == [0, 0]


def test_a_failing_pipeline_is_named_commits_nothing_and_the_others_run(spark, tmp_path):
    s, f = setup(tmp_path)
    res = cli(s, "run", f["count"], f["typo"], f["letters"], "--json")
    assert res.exit_code == 2, res.stdout + res.stderr
    assert res.stderr.startswith("error: pipeline ") and res.stderr.count("\n") == 1
    assert "typo.py failed, nothing of it was committed" in res.stderr and "wrod" in res.stderr
    assert [r["pipeline"] for r in jsonl(res.stdout)] == ["count", "letters"]
    status = jsonl(ok(cli(s, "status", "--json")).stdout)
    assert sorted(r["pipeline"] for r in status if r["kind"] == "pipeline") == ["count", "letters"]
    assert "typo" not in {r.get("trace") for r in status if r["kind"] == "trace"}


def test_name_with_several_pipelines_is_refused(tmp_path):
    s, f = setup(tmp_path)
    res = cli(s, "run", f["count"], f["letters"], "--name", "x")
    assert res.exit_code == 2 and "--name" in res.stderr
