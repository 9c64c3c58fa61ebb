"""README.md keeps its promises: every example of the guide runs, and the set-up commands
are the ones CI runs.

The README's fenced blocks are read by their info string:

* ```` ```sh ```` — an example: run by bash, in document order, in one temporary
  directory holding a copy of ``sample_data/`` (so the default store ``./ddstore`` is
  fresh), with ``ddcli`` on the PATH; each block must exit 0;
* ```` ```python file=NAME ```` — a pipeline file the examples use: written to NAME first;
* ```` ```python ```` — a listing: must appear verbatim in a sample pipeline, so it
  cannot drift from code that runs;
* ```` ```bash ```` — the two set-up commands: exactly two, the second is what ``.ci/run``
  runs, the first runs ``sample_data/run_samples.sh`` (run here too, on its own);
* ```` ```cron ```` — a crontab entry (its script is an ``sh`` example).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers.operations import PIPELINES, REPO, ddcli_env, trace_at

README = os.path.join(REPO, "README.md")
SAMPLE = os.path.join(REPO, "sample_data")
FENCE = re.compile(r"^```([A-Za-z]*)([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks() -> list[tuple[str, str, str]]:
    """(language, rest of the info string, body) of every fenced block, in order."""
    with open(README, encoding="utf-8") as fh:
        text = fh.read()
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(text)]


def test_every_fenced_block_is_of_a_known_kind():
    kinds = [(lang, info) for lang, info, _ in blocks()]
    for lang, info in kinds:
        assert lang in ("sh", "python", "bash", "cron", "sql"), f"README block ```{lang} {info}: unknown kind"
        if lang == "python":
            assert info == "" or re.fullmatch(r"file=[\w.]+", info), info
    assert sum(1 for lang, _ in kinds if lang == "sh") >= 10


def test_every_sql_block_shows_views_of_a_sample_model():
    """A SQL block of the guide is taken from a model that run_samples.sh runs: each view
    it declares is declared there, word for word up to spacing."""
    models = " ".join(open(f, encoding="utf-8").read() for f in glob.glob(os.path.join(SAMPLE, "models", "*.sql")))
    squeeze = lambda text: " ".join(line.split("--")[0] for line in text.splitlines()).split()  # noqa: E731
    shown = [body for lang, _, body in blocks() if lang == "sql"]
    assert shown
    for body in shown:
        for statement in " ".join(squeeze(body)).split(";"):
            if statement.strip():
                assert statement.strip() in " ".join(squeeze(models)), statement


def test_the_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    setup = [body.strip() for lang, _, body in blocks() if lang == "bash"]
    assert len(setup) == 2, setup
    assert all("\n" not in s for s in setup), "each set-up command is one line"
    main_job, tests = setup
    for s in setup:
        assert s.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -e ")
    assert main_job.endswith("sample_data/run_samples.sh")
    assert tests.endswith("python -m pytest") and "'.[test]'" in tests
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as fh:
        ci = fh.read()
    assert ci.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in ci
    ci_lines = [line.strip() for line in ci.splitlines()]
    assert tests in ci_lines, ".ci/run does not run the README's test command"
    assert main_job in ci_lines, ".ci/run does not run the README's main-job command"
    assert os.access(os.path.join(REPO, "sample_data", "run_samples.sh"), os.X_OK)


def test_python_listings_are_verbatim_copies_of_sample_pipelines():
    samples = ""
    for name in sorted(os.listdir(PIPELINES)):
        if name.endswith(".py"):
            with open(os.path.join(PIPELINES, name), encoding="utf-8") as fh:
                samples += fh.read() + "\n"
    for lang, info, body in blocks():
        if lang == "python" and not info:
            assert body in samples, f"README listing is in no sample pipeline:\n{body}"


def _workdir(tmp_path) -> tuple[str, dict]:
    """An empty directory with a copy of sample_data/ and ``ddcli`` on the PATH."""
    work = tmp_path / "work"
    shutil.copytree(SAMPLE, work / "sample_data", ignore=shutil.ignore_patterns("__pycache__", "ddstore"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "ddcli"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m ddcli \"$@\"\n")
    shim.chmod(0o755)
    env = ddcli_env({"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    return str(work), env


def _stderr_is_one_line_errors(stderr: str) -> bool:
    return all(line.startswith("error: ") for line in stderr.splitlines() if line.strip())


@pytest.mark.slow
def test_every_example_of_the_guide_runs(spark, tmp_path):
    from ops.verify.verify import verify_pipeline
    from storage.store import Store

    work, env = _workdir(tmp_path)
    outputs = []
    for i, (lang, info, body) in enumerate(blocks()):
        if lang == "python" and info.startswith("file="):
            with open(os.path.join(work, info[len("file="):]), "w", encoding="utf-8") as fh:
                fh.write(body)
        if lang != "sh":
            continue
        res = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=work, env=env,
                             capture_output=True, text=True, timeout=600)
        where = f"README sh block #{i}:\n{body}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"
        assert res.returncode == 0, where
        assert "Traceback" not in res.stdout + res.stderr, where
        assert _stderr_is_one_line_errors(res.stderr), where
        outputs.append((body, res.stdout))

    def out(command: str) -> str:
        return next(o for b, o in outputs if command in b)

    # the examples show what the guide says they show
    assert "nothing to do" in out("ddcli ingest words sample_data/words_2.csv      # again")
    assert "exit code 2" in out("ddcli ingest words bad.csv")
    assert "verified" in out("ddcli verify letters.py")
    assert '"behind":true' in out("grep '\"kind\":\"lag\"'")
    assert "exit code 4" in out("--strict-noop")
    assert out("ddcli config --json").count('"source":"file"') == 2 and "\nJava " in out("ddcli --version")
    assert "exit code 2: history before since 4 is merged" in out("ddcli advance words --since 4")
    store = Store(os.path.join(work, "ddstore"))
    assert store.state().pipelines["wordcount"]["runs"] == 3  # the guide's two runs and the cron job's
    assert trace_at(store, "counts", (4,)) == {("apple", 1): 1, ("cherry", 2): 1, ("date", 1): 1,
                                               ("elderberry", 1): 1}
    assert ("kiwi", 1) in trace_at(store, "counts", (8,))
    for pipeline in (os.path.join(PIPELINES, "wordcount.py"), os.path.join(work, "letters.py")):
        v = verify_pipeline(store, pipeline)
        assert v.ok, v.differences[0].describe()


@pytest.mark.slow
def test_the_main_job_runs_on_the_sample_data_and_again_changes_nothing(spark, tmp_path):
    """``sample_data/run_samples.sh`` (the README's first set-up command, after the install)."""
    from ops.verify.verify import verify_pipeline
    from storage.store import Store
    from tests.conftest import tree_digest

    work, env = _workdir(tmp_path)
    script = os.path.join(work, "sample_data", "run_samples.sh")
    first = subprocess.run([script], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Traceback" not in first.stdout + first.stderr
    for p in ("wordcount", "length_count", "join_example", "reach"):
        assert f"pipeline '{p}' ran" in first.stdout
    store_dir = os.path.join(work, "ddstore")
    store = Store(store_dir)
    assert trace_at(store, "length_counts", (1, 1)) == {(1, 1): 1, (2, 1): 1}  # the reduce example of docs/architecture.md
    assert trace_at(store, "revenue", (5,)) == {("north", 50): 1, ("south", 70): 1, ("west", 45): 1}
    assert {n for (_, n) in trace_at(store, "reach", (2,))} >= {"a", "b", "c", "d", "e"}
    for p in ("wordcount", "length_count", "join_example", "reach"):
        v = verify_pipeline(store, os.path.join(work, "sample_data", "pipelines", f"{p}.py"))
        assert v.ok, v.differences[0].describe()

    before = tree_digest(os.path.join(store_dir, "traces"))
    again = subprocess.run([script], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "ran:" not in again.stdout and again.stdout.count("nothing to do") >= 8
    assert tree_digest(os.path.join(store_dir, "traces")) == before
    answers = lambda text: text[text.index("counts as of"):]  # noqa: E731 - the query part
    assert answers(again.stdout) == answers(first.stdout)
