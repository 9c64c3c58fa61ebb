"""Progress of a run: each write, loop round and operator says its rows
and its time, and `--json` reports them, without a Spark job more than before.

Job counts of main before progress lines carried figures (measured with the same data,
two shuffle partitions): join_example 4, reach 14. Figures come from work the run does
anyway (written layers, the job that finds a loop's next round), so they must stay.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO as ROOT

S = os.path.join(ROOT, "sample_data")
pytestmark = pytest.mark.usefixtures("on_spark")  # Spark's jobs and steps (a run in the driver: tests/sql/test_in_driver.py)
JOBS_BEFORE = {"join_example": 4, "reach": 14}
SECONDS = r"\d+\.\d\d s"


def _ingest(store: str) -> None:
    from storage.store import Store
    st = Store(store)
    st.ingest("customers", [f"{S}/customers_1.csv"])
    st.ingest("orders", [f"{S}/orders_1.csv", f"{S}/orders_2.csv"])
    st.ingest("customers", [f"{S}/customers_2.csv"])
    st.ingest("edges", [f"{S}/edges_1.csv"], key=["src"])
    st.ingest("roots", [f"{S}/roots_1.csv"])


def _check_lines(name: str, lines: list[str]) -> None:
    text = "\n".join(lines)
    if name == "join_example":
        assert re.search(rf"^wrote revenue: \d+ updates .*in {SECONDS} \(\d+ Spark jobs?(?: for \d+ traces)?\); computed join "
                         r"\(join_example\.py:13\), reduce \(join_example\.py:14\)$", text, re.M), text
        assert re.search(rf"^wrote join_example\.join_2 \(state\): \d+ updates? in {SECONDS}", text, re.M), text
        assert re.search(rf"^join \(join_example\.py:13\): \d+ updates? \(written to join_example\.join_2\); "
                         rf"computed by the writes of (?:revenue, join_example\.join_2|join_example\.join_2, revenue) in {SECONDS}$",
                         text, re.M), text
        assert re.search(rf"^reduce \(join_example\.py:14\): 14 updates \(written to revenue\); "
                         rf"computed by the write of revenue in {SECONDS}$", text, re.M), text
    elif re.search(r"^loop loop_\d+: partition-local by root \(broadcast: 1 collection, [\d,]+ rows\)$", text, re.M):
        # the default for reach: one job runs every round inside the tasks
        assert re.search(rf"^loop loop_\d+: \d+ rounds inside tasks in {SECONDS}$", text, re.M), text
        assert re.search(rf"^wrote reach: \d+ updates? in {SECONDS} \(1 Spark job(?: for \d+ traces)?\)$", text, re.M), text
    else:
        rounds = re.findall(rf"^loop loop_\d+: round (\d+) \(iteration \d+\) in {SECONDS}; "
                            r"(?:\d+ updates? pending at iteration \d+|fixed point reached)$", text, re.M)
        assert rounds == [str(i) for i in range(len(rounds))] and len(rounds) >= 2, text
        assert text.count("fixed point reached") == 1, text
        assert re.search(rf"^wrote reach: \d+ updates? in {SECONDS} \(1 Spark job(?: for \d+ traces)?\)$", text, re.M), text


def test_progress_figures_cost_no_spark_job(spark, spark_jobs, tmp_path):
    from ops.run.run import run_pipeline
    from storage.store import Store
    store = str(tmp_path / "store")
    _ingest(store)
    for name, before in JOBS_BEFORE.items():
        lines: list[str] = []
        jobs = spark_jobs()
        res = run_pipeline(Store(store), f"{S}/pipelines/{name}.py", progress=lines.append)
        ran = len(spark_jobs() - jobs)
        assert ran <= before, (name, ran, lines)
        assert res.spark_jobs == ran == sum(s.get("jobs", 0) for s in res.steps), res.steps
        _check_lines(name, lines)


def test_run_shows_rows_and_time_per_operator_and_json_reports_them(tmp_path):
    store = str(tmp_path / "store")
    _ingest(store)
    env = dict(os.environ, DDCLI_PROGRESS="1", DDCLI_SHUFFLE_PARTITIONS="2")
    res = subprocess.run([sys.executable, "-m", "ddcli", "run", f"{S}/pipelines/join_example.py",
                          f"{S}/pipelines/reach.py", "--store", store, "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    lines = [line[2:] for line in res.stderr.splitlines()]
    # (a warm engine started by an earlier test may run it: Spark is then running already)
    assert lines[0] == "starting Spark" and re.fullmatch(r"Spark ready in \d+\.\d s|Spark already running", lines[1]), lines
    assert all(line.startswith("· ") for line in res.stderr.splitlines()), res.stderr  # one line each
    split = lines.index("starting Spark", 1)
    _check_lines("join_example", lines[:split])
    _check_lines("reach", lines[split:])
    records = {r["pipeline"]: r for r in map(json.loads, res.stdout.splitlines())}
    for name, before in JOBS_BEFORE.items():
        r = records[name]
        assert r["seconds"] > 0 and r["rows_in"] > 0 and r["rows_out"] == sum(r["outputs"].values())
        assert r["spark_jobs"] <= before and r["spark_jobs"] == sum(s.get("jobs", 0) for s in r["steps"])
        writes = [s for s in r["steps"] if s["step"] == "write"]
        assert writes and all(s["seconds"] >= 0 and s["rows"] >= 0 for s in writes)
    ops = {s["operator"]: s for s in records["join_example"]["steps"] if s["step"] == "operator"}
    assert ops["reduce (join_example.py:14)"]["rows"] == 14
    assert ops["reduce (join_example.py:14)"]["computed_by"] == ["revenue"]
    rounds = [s for s in records["reach"]["steps"] if s["step"] == "loop_round"]
    local = [s for s in records["reach"]["steps"] if s["step"] == "loop_local"]
    if local:  # partition-local: the rounds ran inside tasks
        assert local[0]["rounds"] >= 2 and local[0]["seconds"] >= 0, local
    else:
        assert rounds[-1]["next_iteration"] is None and all(s["seconds"] >= 0 for s in rounds)
