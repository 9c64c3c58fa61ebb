"""Operating ddcli from schedulers: concurrency, exit codes, --json, lag, the
Airflow DAG, help texts and benchmark plots.

Concurrency cases are forced, not hoped for: a hook in place of ``storage.faults.point``
runs the competing command at the exact moment the first one has read the store and is
about to commit (``run.before_commit``, ``ingest.before_commit``, ``compact.before_commit``).
After every case the pipeline is run again and its output must equal both a plain fold
of the input files at every time and ``verify`` (the from-scratch evaluation); no file of
a losing writer stays behind, and there is no lock anywhere in the store to go stale.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict, deque

import pytest

from ddcli.cli import app
from storage import faults
from storage.store import Store
from tests.helpers.cli import cli, error_line, jsonl, ok, runner
from tests.helpers.operations import (PIPELINES, REPO, WordStream, ddcli_env, ddcli_process, fold, trace_at,
                                      wordcount_reference)

WORDCOUNT = os.path.join(PIPELINES, "wordcount.py")
SAMPLE = os.path.join(REPO, "sample_data")
DAG_FILE = os.path.join(SAMPLE, "airflow", "ddcli_dag.py")


def one_line_error(res, code: int) -> str:
    assert res.exit_code == code, f"exit {res.exit_code}: {res.stderr!r} {res.stdout!r}"
    return error_line(res.stderr)


def run_at(monkeypatch, point_name: str, action) -> dict:
    """Run ``action`` once, inside the command under test, when it reaches ``point_name``."""
    hit = {"done": False}

    def point(name):
        if name == point_name and not hit["done"]:
            hit["done"] = True
            action()
    monkeypatch.setattr(faults, "point", point)
    return hit


def files_under_traces(store: Store) -> set[str]:
    """The files of the trace folders, but their Delta tables' logs (storage/lake/: a view
    of the ddcli log every command brings up to date, not a writer's files)."""
    out = set()
    for root, folders, names in os.walk(os.path.join(store.path, "traces")):
        folders[:] = [f for f in folders if f != "_delta_log"]
        out.update(os.path.join(root, n) for n in names)
    return out


def referenced_by_any_version(store: Store) -> set[str]:
    out = set()
    for state in store.log.states().values():  # every version still in the log (deltas applied)
        for name, t in state["traces"].items():
            for layer in t["layers"] + t["pending"]:
                out.update(os.path.join(store.trace_dir(name), f["name"]) for f in layer["files"])
    return out


def assert_sound(store: Store, stream: WordStream, pipeline: str = WORDCOUNT) -> None:
    """Nothing lost, doubled or left behind, and no lock: the input equals the fold of its
    files, the output equals the word count of that fold at every time (and ``verify``
    agrees), and every file under the store is named by a committed version."""
    from ops.verify.verify import verify_pipeline

    words = store.trace("words")
    upper = words.upper.elements[0][0]
    for t in range(upper):
        if words.since.beyond((t,)):
            assert trace_at(store, "words", (t,)) == fold(stream.updates, (t,)), f"words at {t}"
    frontier = store.state().pipelines["wordcount"]["frontier"][0][0]
    counts = store.trace("counts")
    for t in range(frontier):
        if counts.since.beyond((t,)):  # an output's since follows its input's on a first run
            assert trace_at(store, "counts", (t,)) == wordcount_reference(stream.updates, (t,)), f"counts at {t}"
    v = verify_pipeline(store, pipeline)
    assert v.ok, v.differences[0].describe()
    assert files_under_traces(store) <= referenced_by_any_version(store), "a losing writer left files behind"
    # and the outputs' current-state tables and the records of how far the Delta tables follow the log
    lake = {"_delta_synced.json", "_tables_synced.json", "tables"}
    kept = {"plans"}  # the pipelines' planned schemas (ops/run/plan_cache.py)
    assert set(os.listdir(store.path)) - lake - kept == {"log", "traces"}, \
        "something besides the log and the traces (a lock?)"


@pytest.fixture
def wc(spark, tmp_path):
    """A store whose trace ``words`` got two files and whose word count ran once."""
    from ops.run.run import run_pipeline
    store = Store(str(tmp_path / "store"))
    stream = WordStream(str(tmp_path), seed=6)
    for _ in range(2):
        store.ingest("words", [stream.next_file()])
    run_pipeline(store, WORDCOUNT)
    return store, stream


# ------------------------------------------------------------------ concurrency


def test_two_runs_of_one_pipeline_one_commits_the_other_exits_3_and_its_retry_has_nothing_to_do(wc, monkeypatch):
    from ops.run.run import run_pipeline
    store, stream = wc
    store.ingest("words", [stream.next_file()])
    hit = run_at(monkeypatch, "run.before_commit", lambda: run_pipeline(Store(store.path), WORDCOUNT))
    err = one_line_error(cli(store.path, "run", WORDCOUNT), 3)
    assert hit["done"]
    assert "another run of pipeline 'wordcount' committed first" in err and "safe to retry" in err
    assert store.state().pipelines["wordcount"]["runs"] == 2  # the first run and the winner
    rec = jsonl(ok(cli(store.path, "run", WORDCOUNT, "--json")).stdout)[0]
    assert rec["noop"] is True
    assert cli(store.path, "run", WORDCOUNT, "--strict-noop").exit_code == 4
    assert_sound(store, stream)


def test_an_ingest_committed_during_a_run_is_left_for_the_next_run(wc, monkeypatch):
    store, stream = wc
    stream.per_file = 40
    store.ingest("words", [stream.next_file()])  # the run reads this one
    stream.per_file = 6
    late = stream.next_file()  # small: the ingest's geometric merge leaves the big layer alone
    hit = run_at(monkeypatch, "run.before_commit", lambda: Store(store.path).ingest("words", [late]))
    res = ok(cli(store.path, "run", WORDCOUNT, "--json"))
    assert hit["done"] and jsonl(res.stdout)[0]["noop"] is False
    lag = [r for r in jsonl(ok(cli(store.path, "status", "--json")).stdout) if r["kind"] == "lag"]
    assert len(lag) == 1 and lag[0]["behind"] is True and lag[0]["layers"] == 1
    assert lag[0]["updates"] == store.trace("words").layers[-1].rows > 0
    monkeypatch.undo()
    assert jsonl(ok(cli(store.path, "run", WORDCOUNT, "--json")).stdout)[0]["noop"] is False
    assert_sound(store, stream)


def test_an_ingest_whose_merge_swallows_what_a_run_read_makes_the_run_a_conflict(wc, monkeypatch):
    """The ingest's geometric merge puts the layer the run read and the new one into one
    layer: no hold can tell them apart any more, so the run must not commit. It exits 3
    and its retry processes both files."""
    store, stream = wc
    store.ingest("words", [stream.next_file()])
    late = stream.next_file()  # as big as the layer the run reads: the merge takes both
    hit = run_at(monkeypatch, "run.before_commit", lambda: Store(store.path).ingest("words", [late]))
    err = one_line_error(cli(store.path, "run", WORDCOUNT), 3)
    assert hit["done"] and "compacted across this run's position" in err and "safe to retry" in err
    monkeypatch.undo()
    assert jsonl(ok(cli(store.path, "run", WORDCOUNT, "--json")).stdout)[0]["noop"] is False
    assert_sound(store, stream)


def test_a_run_committed_during_an_ingest_leaves_the_ingest_to_commit(wc, monkeypatch):
    from ops.run.run import run_pipeline
    store, stream = wc
    store.ingest("words", [stream.next_file()])
    hit = run_at(monkeypatch, "ingest.before_commit", lambda: run_pipeline(Store(store.path), WORDCOUNT))
    ok(cli(store.path, "ingest", "words", stream.next_file()))
    assert hit["done"]
    monkeypatch.undo()
    ok(cli(store.path, "run", WORDCOUNT))
    assert_sound(store, stream)


def ingest_unmerged(store: Store, stream: WordStream, sizes=(40, 12, 4)) -> None:
    """Ingest files whose sizes fall by more than half each time: geometric merging leaves
    each in a layer of its own, so a compaction has something to merge."""
    for n in sizes:
        stream.per_file = n
        store.ingest("words", [stream.next_file()])
    stream.per_file = 12


def test_a_compaction_committed_during_a_run_changes_nothing_the_run_read(wc, monkeypatch):
    store, stream = wc
    ingest_unmerged(store, stream)
    layers_before = len(store.trace("words").layers)
    hit = run_at(monkeypatch, "run.before_commit",
                 lambda: Store(store.path).compact(full=True))
    ok(cli(store.path, "run", WORDCOUNT))
    assert hit["done"]
    assert len(store.trace("words").layers) < layers_before
    monkeypatch.undo()
    assert_sound(store, stream)


def test_a_run_committed_during_a_compaction_moves_the_hold_and_the_compaction_replans(wc, monkeypatch):
    from ops.run.run import run_pipeline
    store, stream = wc
    ingest_unmerged(store, stream)
    hit = run_at(monkeypatch, "compact.before_commit", lambda: run_pipeline(Store(store.path), WORDCOUNT))
    rec = jsonl(ok(cli(store.path, "compact", "words", "--full", "--json")).stdout)[0]
    assert hit["done"] and rec["merges"] >= 1
    monkeypatch.undo()
    assert cli(store.path, "run", WORDCOUNT, "--strict-noop").exit_code == 4
    assert_sound(store, stream)


@pytest.mark.parametrize("first_run", [True, False], ids=["first-run", "later-run"])
def test_advance_since_during_a_run_never_compacts_what_the_pipeline_still_needs(spark, tmp_path, monkeypatch, first_run):
    from ops.run.run import run_pipeline
    store = Store(str(tmp_path / "store"))
    stream = WordStream(str(tmp_path), seed=8)
    for _ in range(3):
        store.ingest("words", [stream.next_file()])
    if not first_run:
        run_pipeline(store, WORDCOUNT)
        for _ in range(2):
            store.ingest("words", [stream.next_file()])
    since = store.trace("words").upper.elements[0][0] - 2
    hit = run_at(monkeypatch, "run.before_commit", lambda: Store(store.path).advance("words", since=str(since)))
    ok(cli(store.path, "run", WORDCOUNT))
    assert hit["done"] and store.trace("words").since.elements[0][0] == since
    # the output never promises more than its input: on a first run its since follows
    assert store.trace("counts").since.elements[0][0] == (since if first_run else 0)
    monkeypatch.undo()
    store.compact(full=True)
    store.ingest("words", [stream.next_file()])
    ok(cli(store.path, "run", WORDCOUNT))
    assert_sound(store, stream)


@pytest.mark.slow
def test_real_processes_a_killed_run_leaves_no_lock_and_two_racing_runs_one_wins(spark, tmp_path):
    """``ddcli run`` in real processes: one killed just before its commit (no lock, nothing
    to clean: the next run starts at once), then two started together — both read the
    store before either commits, one wins and the other exits 3 with one line; its retry
    has nothing to do."""
    store = Store(str(tmp_path / "store"))
    stream = WordStream(str(tmp_path), seed=9)
    for _ in range(2):
        store.ingest("words", [stream.next_file()])
    tmp = {"TMPDIR": str(tmp_path)}  # Spark's scratch, which a killed process leaves behind
    killed = ddcli_process(["run", WORDCOUNT], store.path,  # in a process of its own, which dies
                           env={"DDCLI_FAULT": "run.before_commit", "DDCLI_SERVICE": "0", **tmp})
    killed.communicate(timeout=300)
    assert killed.returncode == 137
    assert "wordcount" not in store.state().pipelines
    store.ingest("words", [stream.next_file()])
    racers = [ddcli_process(["run", WORDCOUNT, "--json"], store.path, env=tmp) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in racers]
    codes = sorted(p.returncode for p in racers)
    assert codes in ([0, 3], [0, 0]), (codes, outs)
    for p, (out, err) in zip(racers, outs):
        if p.returncode == 3:
            assert err.startswith("error: ") and err.count("\n") == 1 and "safe to retry" in err, err
        else:
            assert err == "" and json.loads(out)["command"] == "run", (out, err)
    if codes == [0, 0]:  # the slower one started after the winner committed: a no-op
        assert sorted(json.loads(o)["noop"] for o, _ in outs) == [False, True]
    assert store.state().pipelines["wordcount"]["runs"] == 1
    assert jsonl(ok(cli(store.path, "run", WORDCOUNT, "--json")).stdout)[0]["noop"] is True  # the retry
    store.compact(grace_seconds=0)  # the killed run's and the loser's files are garbage
    assert_sound(store, stream)


# ------------------------------------------------------------------ exit codes, --json, lag


def test_every_reporting_command_speaks_json_lines(wc, tmp_path):
    store, stream = wc
    s = store.path
    f = stream.next_file()
    recs = {
        "ingest": jsonl(ok(cli(s, "ingest", "words", f, "--json")).stdout),
        "advance": jsonl(ok(cli(s, "advance", "words", "--since", "2", "--json")).stdout),
        "compact": jsonl(ok(cli(s, "compact", "--json")).stdout),
        "run": jsonl(ok(cli(s, "run", WORDCOUNT, "--json")).stdout),
        "verify": jsonl(ok(cli(s, "verify", WORDCOUNT, "--json")).stdout),
        "query": jsonl(ok(cli(s, "query", "counts", "--json")).stdout),
        "history": jsonl(ok(cli(s, "history", "words", "--json")).stdout),
        "sql": jsonl(ok(cli(s, "sql", "SELECT COUNT(*) AS n FROM words", "--json")).stdout),
        "status": jsonl(ok(cli(s, "status", "--json")).stdout),
    }
    for cmd in ("ingest", "advance", "compact", "run", "verify"):
        assert len(recs[cmd]) == 1 and recs[cmd][0]["command"] == cmd, recs[cmd]
    assert recs["verify"][0]["ok"] is True
    assert recs["run"][0]["noop"] is False and recs["run"][0]["outputs"]["counts"] > 0
    assert {"word", "count", "multiplicity"} == set(recs["query"][0])
    assert {"word", "time", "diff"} == set(recs["history"][0])
    assert recs["sql"] == [{"n": store.trace("words").rows()}]
    assert {r["kind"] for r in recs["status"]} == {"trace", "pipeline", "lag"}
    bench = jsonl(ok(runner.invoke(app, ["bench", "storage", "--updates", "400", "--keys", "40", "--small-ingests",
                                         "3", "--small-size", "5", "--repeat", "1", "--meta-ingests", "0",
                                         "--json"])).stdout)
    assert bench[0]["benchmark"] == "storage"


def test_status_reports_the_lag_of_every_pipeline_input(wc, tmp_path):
    store, stream = wc
    s = store.path
    lag = [r for r in jsonl(ok(cli(s, "status", "--format", "jsonl")).stdout) if r["kind"] == "lag"]
    upper = str(store.trace("words").upper.elements[0][0])
    assert lag == [{"kind": "lag", "pipeline": "wordcount", "input": "words", "behind": False,
                    "consumed": upper, "upper": upper, "layers": 0, "updates": 0, "pending": 0,
                    "consumed_seq": 2, "input_seq": 2, "frontier": upper,
                    "holds_back": False, "behind_by": None}]
    added = 0
    for _ in range(2):
        added += store.ingest("words", [stream.next_file()]).rows
    store.compact("words", full=True)  # merging the unprocessed layers keeps them apart from the processed ones
    lag = [r for r in jsonl(ok(cli(s, "status", "words", "--json")).stdout) if r["kind"] == "lag"]
    new_upper = str(store.trace("words").upper.elements[0][0])
    assert lag[0]["behind"] is True and lag[0]["consumed"] == upper and lag[0]["upper"] == new_upper
    assert lag[0]["consumed_seq"] == 2 and lag[0]["input_seq"] == 4
    assert lag[0]["updates"] == sum(l.rows for l in store.trace("words").layers if l.seq_lo >= 2) > 0
    assert lag[0]["layers"] >= 1
    table = ok(cli(s, "status", "--lag", "--format", "csv")).stdout.splitlines()
    assert table[0].startswith("pipeline,input,behind,consumed,upper,layers,updates")
    assert table[1].startswith(f"wordcount,words,true,{upper},{new_upper},")
    terminal = ok(cli(s, "status")).stdout
    assert "lag" in terminal and "wordcount" in terminal
    ok(cli(s, "run", WORDCOUNT))
    lag = [r for r in jsonl(ok(cli(s, "status", "--json")).stdout) if r["kind"] == "lag"]
    assert lag[0]["behind"] is False and lag[0]["updates"] == 0 and lag[0]["consumed"] == new_upper


def test_exit_codes_are_documented_in_help_and_match_the_code():
    from ddcli import app as C
    assert (C.EXIT_OK, C.EXIT_INTERNAL, C.EXIT_USER, C.EXIT_CONFLICT, C.EXIT_NOOP) == (0, 1, 2, 3, 4)
    text = " ".join(ok(runner.invoke(app, ["--help"])).stdout.split())
    for phrase in ["0 success", "1 internal error", "2 user error", "3 conflict", "safe to retry", "4 nothing to do"]:
        assert phrase in text
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    for code, meaning in [(0, "success"), (1, "internal error"), (2, "user error"), (3, "conflict"), (4, "nothing to do")]:
        assert f"| `{code}` | {meaning}" in readme, f"README.md's exit code table lacks {code}"


def _all_commands():
    from typer.main import get_command
    root = get_command(app)
    for name, cmd in root.commands.items():
        subs = getattr(cmd, "commands", None)
        if subs:
            for sub in subs:
                yield [name, sub]
        else:
            yield [name]


def test_every_command_has_help_with_examples_and_the_exit_codes():
    commands = list(_all_commands())
    assert {c[0] for c in commands} >= {"ingest", "advance", "compact", "run", "verify", "query", "history",
                                        "sql", "status", "bench"}
    for c in commands:
        text = " ".join(ok(runner.invoke(app, [*c, "--help"])).stdout.split())
        assert "Example" in text, f"ddcli {' '.join(c)} --help has no example"
        assert f"ddcli {' '.join(c)} " in text, f"ddcli {' '.join(c)} --help shows no example of itself"
        assert "Exit codes: 0 success" in text and "3 conflict" in text, c


# ------------------------------------------------------------------ the Airflow DAG


EXPECTED_TASKS = {"ingest_words", "ingest_orders", "ingest_customers", "ingest_strings", "advance_words",
                  "advance_strings", "run_wordcount", "run_length_count", "run_join_example", "compact", "status"}


def _check_dag_shape(tasks: dict[str, dict]) -> None:
    """tasks: task_id -> {"command", "upstream"}; only ddcli commands, in the right order."""
    assert set(tasks) == EXPECTED_TASKS
    for tid, t in tasks.items():
        cmd = t["command"]
        last = cmd.split("; ")[-1]
        assert last.startswith("ddcli "), f"{tid} runs {last!r}, not a ddcli command"
        assert not any(m in cmd for m in ("{{", "{%", "{#")), f"{tid}: Airflow would render {cmd!r} with Jinja"
    up = {tid: set(t["upstream"]) for tid, t in tasks.items()}
    assert up["advance_words"] == {"ingest_words"} and up["run_wordcount"] == {"advance_words"}
    assert up["run_join_example"] == {"ingest_orders", "ingest_customers"}
    assert up["compact"] == {"run_wordcount", "run_length_count", "run_join_example"}
    assert up["status"] == {"compact"}


AIRFLOW_MISSING = "apache-airflow is not installed (pip install -e '.[airflow]'; .ci/run does)"


def _airflow_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("airflow") is not None


@pytest.mark.skipif(not _airflow_installed() and not os.environ.get("DDCLI_REQUIRE_AIRFLOW"), reason=AIRFLOW_MISSING + ": the DAG is checked with a stub of "
                    "the Airflow API instead (test_airflow_dag_runs_the_sample_job_with_a_stub_airflow)")
def test_airflow_dag_loads_in_airflows_dagbag(tmp_path):
    code = r"""
import inspect, json, sys
try:
    from airflow.dag_processing.dagbag import DagBag  # Airflow 3
except ImportError:
    from airflow.models.dagbag import DagBag  # Airflow 2
kw = {"include_examples": False} if "include_examples" in inspect.signature(DagBag.__init__).parameters else {}
bag = DagBag(dag_folder=sys.argv[1], **kw)
dag = bag.dags.get("ddcli")
print("RESULT " + json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "tasks": {t.task_id: {"command": t.bash_command, "upstream": sorted(t.upstream_task_ids),
                          "type": type(t).__name__} for t in dag.tasks} if dag else None}))
"""
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path / "airflow"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               DDCLI_STORE=str(tmp_path / "store"))
    res = subprocess.run([sys.executable, "-c", code, os.path.dirname(DAG_FILE)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    line = [l for l in res.stdout.splitlines() if l.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT "):])
    assert out["errors"] == {}, out["errors"]
    assert out["tasks"] is not None, "no DAG named ddcli"
    assert {t["type"] for t in out["tasks"].values()} == {"BashOperator"}
    _check_dag_shape(out["tasks"])


class _StubTask:
    """Just enough of an Airflow operator: an id, a command, and ``>>`` for dependencies."""

    def __init__(self, dag, task_id, bash_command, **kw):
        self.task_id, self.bash_command, self.kw = task_id, bash_command, kw
        self.upstream: set[str] = set()
        dag.tasks[task_id] = self

    def __rshift__(self, other):
        for o in other if isinstance(other, list) else [other]:
            o.upstream.add(self.task_id)
        return other

    def __rrshift__(self, other):
        for o in other if isinstance(other, list) else [other]:
            self.upstream.add(o.task_id)
        return self


def load_dag_with_stub(monkeypatch, env: dict):
    """Execute the DAG file against a stub ``airflow`` package; returns the stub DAG."""
    import types
    current = []

    class DAG:
        def __init__(self, dag_id, **kw):
            self.dag_id, self.kw, self.tasks = dag_id, kw, {}

        def __enter__(self):
            current.append(self)
            return self

        def __exit__(self, *exc):
            current.pop()

    def BashOperator(task_id, bash_command, **kw):
        return _StubTask(current[-1], task_id, bash_command, **kw)

    mods = {name: types.ModuleType(name) for name in
            ["airflow", "airflow.sdk", "airflow.providers", "airflow.providers.standard",
             "airflow.providers.standard.operators", "airflow.providers.standard.operators.bash"]}
    mods["airflow.sdk"].DAG = DAG
    mods["airflow.providers.standard.operators.bash"].BashOperator = BashOperator
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ns = {"__name__": "ddcli_dag", "__file__": DAG_FILE}
    exec(compile(open(DAG_FILE, encoding="utf-8").read(), DAG_FILE, "exec"), ns)
    return ns["dag"]


def _topological(tasks: dict) -> list[str]:
    indeg = {t: len(v.upstream) for t, v in tasks.items()}
    down = defaultdict(list)
    for t, v in tasks.items():
        for u in v.upstream:
            down[u].append(t)
    ready = deque(sorted(t for t, n in indeg.items() if n == 0))
    order = []
    while ready:
        t = ready.popleft()
        order.append(t)
        for d in sorted(down[t]):
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    assert len(order) == len(tasks), "the DAG has a cycle"
    return order


@pytest.mark.slow
def test_airflow_dag_runs_the_sample_job_with_a_stub_airflow(spark, tmp_path, monkeypatch):
    """Every task's command, run by bash in the DAG's order against a copy of the sample
    files, does the job; a second DAG run has nothing new, so every ingest and run task
    exits 4 (which the DAG maps to "skipped") and the store does not change."""
    from ops.verify.verify import verify_pipeline
    from tests.conftest import tree_digest

    incoming = tmp_path / "incoming"
    incoming.mkdir()
    for name in os.listdir(SAMPLE):
        if name.endswith(".csv"):
            shutil.copy(os.path.join(SAMPLE, name), incoming / name)
    store = str(tmp_path / "store")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ddcli").write_text(f"#!/bin/sh\nexec {sys.executable} -m ddcli \"$@\"\n")
    (bindir / "ddcli").chmod(0o755)
    env = {"DDCLI_STORE": store, "DDCLI_INCOMING": str(incoming), "DDCLI_PIPELINES": PIPELINES}
    dag = load_dag_with_stub(monkeypatch, env)
    assert dag.dag_id == "ddcli"
    _check_dag_shape({t: {"command": v.bash_command, "upstream": v.upstream} for t, v in dag.tasks.items()})
    for t in dag.tasks.values():
        if t.task_id.startswith(("ingest_", "run_")):
            assert t.kw.get("skip_on_exit_code") == 4, t.task_id
        if t.upstream:
            assert t.kw.get("trigger_rule") == "none_failed", t.task_id

    penv = ddcli_env({"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})

    def dag_run() -> dict[str, int]:
        codes = {}
        for tid in _topological(dag.tasks):
            res = subprocess.run(["bash", "-c", dag.tasks[tid].bash_command], env=penv, capture_output=True,
                                 text=True, timeout=300, cwd=str(tmp_path))
            assert res.returncode in (0, 4), f"{tid}: exit {res.returncode}\n{res.stderr}"
            if res.returncode == 0:
                assert res.stderr == "" and all(json.loads(l) for l in res.stdout.splitlines() if l.strip()), tid
            codes[tid] = res.returncode
        return codes

    first = dag_run()
    assert all(c == 0 for c in first.values()), first
    st = Store(store)
    for p in ("wordcount", "length_count", "join_example"):
        v = verify_pipeline(st, os.path.join(PIPELINES, f"{p}.py"))
        assert v.ok, v.differences[0].describe()
    assert trace_at(st, "length_counts", (1, 1)) == {(1, 1): 1, (2, 1): 1}
    before = tree_digest(os.path.join(store, "traces"))
    second = dag_run()
    assert {t for t, c in second.items() if c == 4} == {t for t in dag.tasks if t.startswith(("ingest_", "run_"))}
    assert tree_digest(os.path.join(store, "traces")) == before


# ------------------------------------------------------------------ bench plots


def assert_png_plot(png) -> None:
    """A real PNG with something drawn in it (an empty figure is a few kB)."""
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_bench_storage_saves_json_and_a_png_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra: pip install -e '.[test]'")
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    ok(runner.invoke(app, ["bench", "storage", "--updates", "2000", "--keys", "200", "--small-ingests", "12",
                           "--small-size", "20", "--repeat", "1", "--meta-ingests", "0", "--delta-ingests", "0",
                           "--out", str(out),
                           "--plot", str(png)]))
    fig = json.loads(out.read_text())
    small = fig["small_ingests"]
    assert len(small["latencies_s"]) == 12 and all(x > 0 for x in small["latencies_s"])
    assert small["latency_s"]["p50"] <= small["latency_s"]["p99"] <= small["latency_s"]["max"]
    assert len(fig["layers"]["after_each_ingest"]) == 12
    assert_png_plot(png)


def test_bench_plot_to_an_unwritable_place_is_refused_before_any_work(tmp_path):
    res = runner.invoke(app, ["bench", "storage", "--plot", str(tmp_path / "nope" / "b.png")])
    assert res.exit_code == 2 and "cannot write --plot" in res.stderr


def test_bench_incremental_saves_json_and_a_cdf_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra: pip install -e '.[test]'")
    out, png = tmp_path / "incr.json", tmp_path / "incr.png"
    ok(runner.invoke(app, ["bench", "incremental", "--updates", "3000", "--keys", "300", "--new-updates", "20",
                           "--scale", "3", "--repeat", "3", "--out", str(out), "--plot", str(png)]))
    fig = json.loads(out.read_text())
    base, scaled = fig["figures"]["base"], fig["figures"]["scaled"]
    assert base["verified"] is True  # the incremental output equals the from-scratch evaluation
    assert len(base["incremental_runs_s"]) == len(scaled["incremental_runs_s"]) == 3
    assert sorted(base["incremental_runs_s"])[1] == base["incremental_s"]  # the median
    assert fig["speedup_vs_from_scratch"] == pytest.approx(base["from_scratch_s"] / base["incremental_s"])
    assert scaled["prior_state_rows"] == 3 * base["prior_state_rows"]  # every key once, advanced
    assert_png_plot(png)


def test_bench_reach_saves_json_and_a_cdf_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra: pip install -e '.[test]'")
    out, png = tmp_path / "reach.json", tmp_path / "reach.png"
    ok(runner.invoke(app, ["bench", "reach", "--nodes", "20", "--edges", "30", "--roots", "2", "--batch", "10",
                           "--points", "10,30", "--repeat", "1", "--filler", "10", "--throughput", "10",
                           "--out", str(out), "--plot", str(png)]))
    fig = json.loads(out.read_text())
    assert [p["processed"] for p in fig["latency"]] == [10, 30]
    assert all(len(p["run_seconds"]) == 1 and p["store_bytes"] > 0 for p in fig["latency"])
    row = fig["throughput"][0]
    assert row["scaling"] == pytest.approx(row["local[2]"]["updates_per_second"] / row["local[1]"]["updates_per_second"])
    assert_png_plot(png)


def test_bench_reach_sustained_measures_one_store_at_growing_totals_compacted_between_runs(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra: pip install -e '.[test]'")
    out, png = tmp_path / "sustained.json", tmp_path / "sustained.png"
    ok(runner.invoke(app, ["bench", "reach", "--sustained", "--nodes", "20", "--edges", "30", "--roots", "2",
                           "--sustained-run", "10", "--sustained-total", "2000", "--filler", "1000",
                           "--repeat", "2", "--out", str(out), "--plot", str(png)]))
    fig = json.loads(out.read_text())
    assert [p["processed"] for p in fig["latency"]] == [1000, 2000] and fig["reached"] == 2000
    first, last = fig["latency"]
    assert first["filled"] == 1000 and last["filled"] == 2000 - 1000 - 2 * 10  # the timed runs count too
    assert all(len(p["run_seconds"]) == 2 == len(p["load_average"]) for p in fig["latency"])
    assert fig["latest_over_first"] == pytest.approx(min(last["run_seconds"]) / min(first["run_seconds"]), abs=1e-3)
    # a window of 30 edges, advanced and compacted after every run: the input holds no history
    assert 0 < last["rows_by_trace"]["edges"] <= 30
    assert_png_plot(png)


def test_bench_reach_refuses_loop_paths_with_sustained_in_one_line():
    res = runner.invoke(app, ["bench", "reach", "--loop-paths", "--sustained"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "two different benchmarks" in res.stderr, res.stderr


def test_bench_reach_loop_paths_refuses_an_unknown_path_or_query_in_one_line(tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its work folder would be left
    for args, said in ((["--paths", "local,fast"], "--paths: unknown loop path 'fast': use round, local"),
                       (["--samples", "reach,pagerank"], "--samples: unknown query 'pagerank': use reach, bfs, cc")):
        res = runner.invoke(app, ["bench", "reach", "--loop-paths", "--no-pathway", *args])
        assert res.exit_code == 2, res.stderr
        assert res.stderr.startswith("error: ") and said in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert os.listdir(tmp_path) == []  # its work folder is removed


def test_bench_reduce_checks_every_output_against_duckdb_and_saves_json_and_a_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra: pip install -e '.[test]'")
    out, png = tmp_path / "reduce.json", tmp_path / "reduce.png"
    ok(runner.invoke(app, ["bench", "reduce", "--updates", "3000", "--hot-keys", "3", "--uniform-keys", "300",
                           "--times", "50", "--new-updates", "20", "--repeat", "1", "--one-key", "2000",
                           "--one-key-times", "40", "--out", str(out), "--plot", str(png)]))
    fig = json.loads(out.read_text())
    for label, keys in (("hot", 3), ("uniform", 300)):
        f = fig["figures"][label]
        # every output was compared with DuckDB at every (key, time) of the input
        assert set(f["checked_points"]) == {"n", "total", "least", "top3"}
        assert min(f["checked_points"].values()) >= min(keys, 50)
        assert f["peak_memory_bytes"] > 0 and len(f["incremental_runs_s"]) == 1
    assert fig["hot_over_uniform"] == pytest.approx(fig["figures"]["hot"]["run_s"] / fig["figures"]["uniform"]["run_s"])
    assert fig["one_key"]["updates"] == 2000 and fig["one_key"]["run_s"] > 0
    # the one-key outputs are checked against DuckDB too, at every time of the one key
    assert set(fig["one_key"]["checked_points"]) == {"n", "total", "least", "top3"}
    assert min(fig["one_key"]["checked_points"].values()) == 40
    assert_png_plot(png)


def test_a_wrong_output_fails_the_reduce_bench_check(tmp_path):
    """The DuckDB check of bench reduce can fail: an output off by one at one time."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ddcli.bench.against_duckdb import reduce as br
    from ops.reduce.kernel import Count, reduce_delta
    raw = br._raw_table(500, 3, 20, seed=3)
    path = str(tmp_path / "raw.parquet")
    pq.write_table(raw, path)
    counts = reduce_delta(raw.append_column("_new", pa.array(np.ones(raw.num_rows, bool))), ["key"],
                          ["id", "amount", "carrier"], 1, Count())

    class Outputs:  # the store's two calls the check makes, over in-memory traces
        def trace(self, name):
            return name

        def read_updates(self, name):
            return counts

    reference, _ = br.duckdb_reference(path)
    assert br.check_outputs(Outputs(), path, reference, outputs=["n"])["n"] > 0
    counts = counts.set_column(counts.schema.get_field_index("count"), "count",
                               pa.array(np.r_[counts.column("count").to_numpy()[:-1], 10**6]))
    with pytest.raises(AssertionError, match="differs from DuckDB"):
        br.check_outputs(Outputs(), path, reference, outputs=["n"])


def test_pipeline_bench_plot_to_an_unwritable_place_is_refused_before_any_work(tmp_path):
    for bench in ("incremental", "reach", "reduce"):
        res = runner.invoke(app, ["bench", bench, "--plot", str(tmp_path / "nope" / "b.png")])
        assert res.exit_code == 2 and "cannot write --plot" in res.stderr, bench
