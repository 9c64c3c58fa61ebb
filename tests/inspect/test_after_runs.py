"""What explain, runs and report say about a pipeline that really ran, in one Spark session.

A pipeline of three loops (reachability: in tasks by root; connected components:
resident; one with a Spark-only function: round by round) runs twice over a random
sliding window of edges. Explain's paths, said before the first run, must be the paths
the run took; afterwards its state sizes must be what the store's files hold. Each run's
figures must be in the history, committed in the very version of the run, with the
updates the test ingested and the ones the run wrote. The report page is then opened in
headless Chromium (tests/helpers/chromium.py): it renders, its lineage graph and plots
have a size, it names every trace and pipeline, and it requests nothing but itself.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime

import pyarrow.parquet as pq
import pytest

from ops.explain.explain import explain_pipeline
from storage.state import history
from storage.state.transitions import State
from tests.helpers.cli import cli, jsonl, ok, parse_csv
from tests.helpers.graphs import EDGES, ROOTS, Bench, sliding_window_runs
from tests.inspect.graph_pipeline import PIPELINE


@pytest.fixture(scope="module")
def ran(spark, tmp_path_factory):
    """The bench after two runs: (bench, pipeline path, explanation before the first run,
    run results, updates ingested before each run)."""
    with pytest.MonkeyPatch.context() as mp:
        for v in ("DDCLI_LOOP_PATH", "DDCLI_LOOP_TASKS", "DDCLI_SPARK_MASTER", "DDCLI_RUN_HISTORY"):
            mp.delenv(v, raising=False)
        bench = Bench(tmp_path_factory.mktemp("ran"))
        path = bench.pipeline("graph", PIPELINE)
        before, results, ingested = None, [], []
        for eu, ru, upper in sliding_window_runs(11, nodes=10, edges=16, steps=[4, 3]):
            bench.ingest("edges", EDGES, eu, upper=upper)
            bench.ingest("roots", ROOTS, ru, upper=upper)
            ingested.append(_consolidated(eu) + _consolidated(ru))
            if before is None:
                before = explain_pipeline(bench.store, path)
            results.append(bench.run(path))
        yield bench, path, before, results, ingested


def test_explain_says_the_path_each_loop_then_takes(ran):
    _, _, before, results, _ = ran
    taken = {s["loop"]: s for s in results[0].steps if s["step"] == "loop_path"}
    said = {l.name: l for l in before.loops}
    assert set(said) == set(taken) == {"reach", "cc", "spark_only"}
    for name, step in taken.items():
        path = "one_task" if step["path"] == "local" and not step.get("by") else step["path"]
        assert said[name].path == path, (name, said[name], step)
        if path == "local":
            assert said[name].by == step["by"]
        if path == "resident":
            assert said[name].tasks == step["tasks"]


def test_explain_after_the_runs_gives_state_sizes_from_the_store(ran):
    bench, path, _, _, _ = ran
    ex = explain_pipeline(bench.store, path)
    assert ex.runs == 2 and ex.next_run.startswith("nothing to do")
    state = bench.store.state()
    written = [s for s in ex.state if s.exists]
    assert written and {s.name for s in written} <= set(state.pipelines["graph"]["state"])
    for s in written:
        files = bench.store.layer_paths(state.traces[s.name])
        assert s.rows == sum(pq.ParquetFile(f).metadata.num_rows for f in files), s
        assert s.bytes == sum(os.path.getsize(f) for f in files), s
    assert all(i.lag.updates == 0 and not i.lag.behind for i in ex.inputs)


def test_explain_names_the_operators_an_edit_changed_as_a_run_would(ran, tmp_path):
    bench, path, _, _, _ = ran
    assert {o.change for o in explain_pipeline(bench.store, path).operators} == {"unchanged"}
    edited = PIPELINE.replace("by_node.count(by=\"node\")", "by_node.filter(\"next > 1\").count(by=\"node\")")
    edited = edited.replace('    p.output("odd", spark_only)\n', "")
    assert edited.count("next > 1") == 1 and 'p.output("odd"' not in edited
    (tmp_path / "graph.py").write_text(edited)
    text = ok(cli(bench.store.path, "explain", str(tmp_path / "graph.py"))).stdout
    line = next(i for i, l in enumerate(edited.splitlines(), 1) if "next > 1" in l)
    assert f"graph.py:{line}  [new since the last run] filter_" in text, text
    assert f"graph.py:{line}  [affected since the last run] reduce_" in text, text
    assert "[removed since the last run] output" in text and "refuses to run: its dataflow changed" in text, text


def test_each_run_is_in_the_history_committed_with_the_run(ran):
    bench, _, _, results, ingested = ran
    res = ok(cli(bench.store.path, "runs", "graph", "--json"))
    rows = jsonl(res.stdout)
    assert [r["run"] for r in rows] == [1, 2]
    for r, result, n in zip(rows, results, ingested):
        assert r["rows_in"] == n and r["rows_out"] == sum(result.outputs.values())
        assert r["outputs"] == result.outputs and r["spark_jobs"] == result.spark_jobs > 0
        assert r["seconds"] > 0 and datetime.fromisoformat(r["when"]).tzinfo is not None
        assert {s["step"] for s in r["steps"]} >= {"spark_start", "loop_path", "write"}
    csv = parse_csv(ok(cli(bench.store.path, "runs", "--format", "csv")).stdout)
    assert [(c["pipeline"], c["run"]) for c in csv] == [("graph", "1"), ("graph", "2")]
    table = ok(cli(bench.store.path, "runs", "--last", "1")).stdout
    assert "graph" in table and "rows_in" in table
    # the version that records run k is the version that holds its figures
    for version, raw in sorted(bench.store.log.states().items()):
        rec = State.from_json(version, raw).pipelines.get("graph")
        if rec:
            assert sorted(rec.get(history.HISTORY_KEY, {})) == [history.run_key(k) for k in range(1, rec["runs"] + 1)]


def test_the_report_renders_in_chromium_with_its_graph_and_plots_and_fetches_nothing(ran, tmp_path):
    from tests.helpers.chromium import Browser, find_chromium

    exe = find_chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs Debian's package before the tests")
        pytest.skip("chromium is not installed here (apt-get install chromium); CI installs it and runs this test")
    bench = ran[0]
    page = tmp_path / "store.html"
    ok(cli(bench.store.path, "report", "-o", str(page)))
    html = page.read_text()
    assert "Content-Security-Policy" in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    with Browser(exe) as b:
        b.open(page.as_uri())
        sizes = b.evaluate("""JSON.stringify({
            lineage: (r => [r.width, r.height])(document.querySelector('svg#lineage').getBoundingClientRect()),
            nodes: [...document.querySelectorAll('svg#lineage g.node')].map(g => [g.dataset.id,
                     g.getBoundingClientRect().width, g.getBoundingClientRect().height]),
            edges: document.querySelectorAll('svg#lineage path.edge').length,
            charts: [...document.querySelectorAll('svg.chart')].map(s => [s.getBoundingClientRect().width,
                     s.getBoundingClientRect().height, s.querySelectorAll('rect, polyline').length]),
            traces: [...document.querySelectorAll('table.traces tbody tr td:first-child')].map(t => t.textContent),
            pipelines: [...document.querySelectorAll('table.pipelines tbody tr td:first-child')].map(t => t.textContent),
            external: [...document.querySelectorAll('[src], [href], link, script')].map(e => e.outerHTML)})""")
        import json
        got = json.loads(sizes)
        shot = b.screenshot(str(tmp_path / "store.png"))
        urls = b.requested_urls()
    state = bench.store.state()
    assert got["lineage"][0] > 100 and got["lineage"][1] > 40
    ids = {n[0] for n in got["nodes"]}
    assert ids == {f"trace:{t}" for t in state.traces if "." not in t} | {"pipeline:graph"}
    assert all(w > 20 and h > 20 for _, w, h in got["nodes"]) and got["edges"] == 2 + 5
    assert len(got["charts"]) >= 3 and all(w > 100 and h > 100 and marks > 0 for w, h, marks in got["charts"])
    assert sorted(got["traces"]) == sorted(state.traces) and got["pipelines"] == ["graph"]
    assert got["external"] == [] and urls == [page.as_uri()], urls
    assert _not_blank(shot)


def _consolidated(updates) -> int:
    """How many updates ``[(row, time, diff)]`` are once those of equal row and time are summed."""
    sums = Counter()
    for row, t, diff in updates:
        sums[(tuple(row), tuple(t))] += diff
    return sum(1 for v in sums.values() if v != 0)


def _not_blank(png: bytes) -> bool:
    """More than a handful of colours in the screenshot (a blank page has one)."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    return len(img.getcolors(maxcolors=1 << 20) or []) > 8
