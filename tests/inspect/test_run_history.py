"""The history of runs kept with the store, with no Spark: a run's figures go into the
pipeline's record in the run's own commit (storage/state/transitions.py append_run), the
newest N are kept, each run's delta of the metadata log holds one entry, and stores
written before (records without a history) still open and list no runs.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from storage.lattice import Frontier
from storage.layer import Layer
from storage.log import delta
from storage.state import history
from storage.state import transitions as T
from storage.state.trace import Trace
from tests.helpers.cli import cli, jsonl, ok, one_line_error, parse_csv, write

SCHEMA = pa.schema([("word", pa.string())])


def f(t: int) -> Frontier:
    return Frontier([(t,)], 1)


def layer(lid: str, seq: int) -> Layer:
    return Layer(lid, [], f(seq), f(seq + 1), f(0), seq, seq + 1, 5, 40)


def commit(run: int, limit: int, *, rebuild: bool = False) -> T.RunCommit:
    """Run number ``run`` of pipeline p (reads t, writes out), with figures naming it."""
    out = Trace("out", SCHEMA, ["word"], 1, f(0), f(run - 1), owner="p", next_seq=run - 1)
    return T.RunCommit(pipeline="p", runs=run - 1, record={"runs": run, "outputs": ["out"]}, frontier=f(run), d=1,
                       inputs={"t": run}, targets={"out": False}, protos={"out": out},
                       written={"out": layer(f"o{run}", run - 1)}, held={}, unheld=[], rebuild=rebuild,
                       figures={"seconds": float(run), "rows_in": run, "steps": []}, history_runs=limit)


def runs_of(s: T.State) -> list[int]:
    return [r["run"] for r in history.history_rows(s, "p")]


def test_runs_are_kept_newest_n_and_each_commit_adds_one_entry_to_the_log():
    t = Trace("t", SCHEMA, ["word"], 1, f(0), f(100), [layer("a", 0)], next_seq=100)
    s = T.State(1, {"t": t}, {})
    for run in range(1, 8):
        before = s
        s = T.append_run(s, commit(run, limit=3))
        d = delta.diff(before.to_json(), s.to_json())
        hist = [p for p, _ in d["set"] if p[:3] == ["pipelines", "p", "history"]]
        gone = [p for p in d["del"] if p[:3] == ["pipelines", "p", "history"]]
        if run == 1:  # the pipeline's first record, whole
            assert [v["history"] for p, v in d["set"] if p == ["pipelines", "p"]] == [
                {history.run_key(1): commit(1, 3).figures}]
        else:
            assert hist == [["pipelines", "p", "history", history.run_key(run)]], d
        assert gone == ([["pipelines", "p", "history", history.run_key(run - 3)]] if run > 3 else [])
        assert runs_of(s) == list(range(max(1, run - 2), run + 1))
    assert [r["seconds"] for r in history.history_rows(s)] == [5.0, 6.0, 7.0]
    rebuilt = T.append_run(s, commit(8, limit=3, rebuild=True))
    assert runs_of(rebuilt) == [6, 7, 8], "a rebuild keeps the pipeline's history"
    assert runs_of(T.append_run(s, commit(8, limit=0))) == []


def test_a_record_written_before_histories_existed_reads_as_no_runs_and_takes_the_next_one():
    old = T.State.from_json(3, {"traces": {}, "pipelines": {"p": {"runs": 4, "frontier": [[9]], "d": 1}}})
    assert history.history_rows(old) == [] and history.history_rows(old, "p") == []
    t = Trace("t", SCHEMA, ["word"], 1, f(0), f(100), [layer("a", 0)], next_seq=100)
    s = T.append_run(old.with_traces({"t": t}), commit(5, limit=50))
    assert runs_of(s) == [5]
    with pytest.raises(Exception, match="unknown pipeline 'q'"):
        history.history_rows(s, "q")


def test_loop_rounds_fold_into_one_step_per_loop():
    steps = [{"step": "spark_start", "seconds": 1.0}]
    steps += [{"step": "loop_round", "loop": "L", "round": i, "seconds": 0.5, "rows": i} for i in range(1, 5)]
    steps += [{"step": "write", "trace": "o", "seconds": 0.25, "together": ["o", "p"], "operators": ["x (f.py:3)"]}]
    folded = history.fold_steps(steps)
    assert folded == [steps[0], {"step": "loop_rounds", "loop": "L", "rounds": 4, "seconds": 2.0, "rows": 10},
                      {"step": "write", "trace": "o", "seconds": 0.25, "together": 2}]


def test_runs_of_a_store_without_runs_and_a_bad_setting(tmp_path, store_dir, monkeypatch):
    ok(cli(store_dir, "ingest", "words", write(tmp_path / "w.csv", "word,time\na,1\n")))
    assert jsonl(ok(cli(store_dir, "runs", "--json")).stdout) == []
    assert parse_csv(ok(cli(store_dir, "runs", "--format", "csv")).stdout) == []
    assert "unknown pipeline 'wordcount'" in one_line_error(cli(store_dir, "runs", "wordcount"))
    monkeypatch.setenv("DDCLI_RUN_HISTORY", "many")
    path = write(tmp_path / "wc.py", 'def pipeline(p):\n    p.output("c", p.input("words").count(by="word"))\n')
    err = one_line_error(cli(store_dir, "run", path))
    assert "DDCLI_RUN_HISTORY" in err and "many" in err
