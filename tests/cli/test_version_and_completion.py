"""``ddcli --version`` (no JVM of Spark's, Java's version from the Java Spark would use) and
shell completion: Typer's install/show, and trace and pipeline names from the store,
through the completion callbacks and through the shell's completion protocol."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.helpers.cli import WORDS, ok, runner, write

from ddcli.cli import app

SAMPLE = os.path.join(REPO, "sample_data")
BIN = os.path.dirname(sys.executable)


def _version_process(env: dict | None = None) -> subprocess.CompletedProcess:
    """``ddcli --version`` in a fresh process, saying afterwards whether pyspark was imported."""
    script = ("import sys\nfrom ddcli.cli import app\n"
              "try:\n    app(['--version'], prog_name='ddcli')\nexcept SystemExit as e:\n    code = e.code\n"
              "print('pyspark imported' if 'pyspark' in sys.modules else 'no pyspark', code)\n")
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": REPO, **(env or {})})


def test_version_names_every_part_one_line_each_without_spark():
    import duckdb
    import pyarrow
    import pyspark
    res = _version_process()
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[-1] == "no pyspark 0", lines
    by = dict(line.split(" ", 1) for line in lines[:-1])
    assert list(by) == ["ddcli", "Python", "pyspark", "duckdb", "pyarrow", "deltalake", "Java"], lines
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", by["ddcli"])
    assert by["Python"].startswith(platform.python_version() + " ")
    assert (by["pyspark"], by["duckdb"], by["pyarrow"]) == (pyspark.__version__, duckdb.__version__, pyarrow.__version__)
    from importlib.metadata import version
    assert by["deltalake"] == version("deltalake")
    java = shutil.which("java")
    if java:  # the same version `java -version` reports, and which java it is
        said = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
        assert by["Java"].split(" ")[0] == re.search(r'version "([^"]+)"', said).group(1)
        assert os.path.realpath(java) in by["Java"]


def test_version_says_when_java_is_missing(tmp_path):
    res = _version_process({"JAVA_HOME": str(tmp_path)})
    java = res.stdout.splitlines()[-2]
    assert java.startswith("Java not found (JAVA_HOME=" + str(tmp_path) + " has no bin/java"), java
    res = _version_process({"JAVA_HOME": "", "PATH": str(tmp_path)})
    assert res.stdout.splitlines()[-2].startswith("Java not found (no java on the PATH"), res.stdout


# ---------------------------------------------------------------- completion


@pytest.fixture(scope="module")
def ran_store(tmp_path_factory, spark):
    """A store with ingested traces and the pipeline join_example run over two of them."""
    from ops.run.run import run_pipeline
    from storage.store import Store
    path = str(tmp_path_factory.mktemp("completion") / "store")
    st = Store(path)
    st.ingest("words", [str(w) for w in WORDS])
    st.ingest("orders", [os.path.join(SAMPLE, "orders_1.csv")], key=["customer"])
    st.ingest("customers", [os.path.join(SAMPLE, "customers_1.csv")])
    st.ingest("roots", [os.path.join(SAMPLE, "roots_1.csv")])
    run_pipeline(st, os.path.join(SAMPLE, "pipelines", "join_example.py"))
    return path


def complete(words: str, *, cwd: str | None = None, env: dict | None = None, shell: str = "bash") -> list[str]:
    """What the shell is offered for the last word of ``words``, through the completion
    protocol Typer's scripts use (in this process)."""
    parts = words.split(" ")
    env = {"_DDCLI_COMPLETE": f"complete_{shell}", **(env or {})}
    if shell == "bash":
        env |= {"COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    else:
        env |= {"_TYPER_COMPLETE_ARGS": words}
    old = os.getcwd()
    try:
        if cwd:
            os.chdir(cwd)
        res = runner.invoke(app, [], env=env, prog_name="ddcli")
    finally:
        os.chdir(old)
    assert res.exit_code == 0 and not res.stderr, (res.exit_code, res.stderr)
    return res.stdout.split()


def test_trace_and_pipeline_names_complete_from_the_store(ran_store, tmp_path, monkeypatch):
    monkeypatch.delenv("DDCLI_STORE", raising=False)
    assert complete(f"ddcli query --store {ran_store} ") == ["customers", "orders", "revenue", "roots", "words"]
    assert complete(f"ddcli history --store {ran_store} o") == ["orders"]
    assert complete(f"ddcli status --store {ran_store} join_example.") == [
        t for t in _traces(ran_store) if t.startswith("join_example.")] != []
    assert complete(f"ddcli drop --store {ran_store} ") == ["join_example"]
    assert complete(f"ddcli run x.py --store {ran_store} --name j") == ["join_example"]
    for cmd in ("advance", "compact", "check"):
        assert complete(f"ddcli {cmd} --store {ran_store} r") == ["revenue", "roots"], cmd
    assert complete(f"ddcli ingest --store {ran_store} r") == ["roots"]  # no pipeline's output
    # the store as the command would find it: $DDCLI_STORE, ddcli.toml here, --config
    assert complete("ddcli query w", env={"DDCLI_STORE": ran_store}) == ["words"]
    assert complete(f"ddcli --store {ran_store} query w", env={"DDCLI_STORE": str(tmp_path)}) == ["words"]
    assert complete(f"ddcli --store {tmp_path} query --store {ran_store} w") == ["words"]
    write(tmp_path / "ddcli.toml", f'store = "{ran_store}"\n')
    assert complete("ddcli query re", cwd=str(tmp_path)) == ["revenue"]
    write(tmp_path / "other.toml", f'store = "{ran_store}"\n')
    assert complete(f"ddcli --config {tmp_path / 'other.toml'} query re") == ["revenue"]
    # zsh and fish get each name with who writes it
    out = runner.invoke(app, [], prog_name="ddcli", env={"_DDCLI_COMPLETE": "complete_zsh",
                                                         "_TYPER_COMPLETE_ARGS": f"ddcli query --store {ran_store} re"})
    assert '"revenue":"written by pipeline join_example"' in out.stdout, out.stdout
    # no store there, or a broken configuration: nothing offered, nothing said
    assert complete(f"ddcli query --store {tmp_path / 'none'} ") == []
    write(tmp_path / "bad.toml", "store = [1]\n")
    assert complete(f"ddcli --config {tmp_path / 'bad.toml'} query ") == []


def _traces(store: str) -> list[str]:
    """The trace folders of a store, read from the disk (not from ddcli's metadata)."""
    return sorted(os.listdir(os.path.join(store, "traces")))


def test_completion_callbacks_read_the_store_named_on_the_line(ran_store, monkeypatch):
    from typer.main import get_command

    from ddcli.completion import complete_pipelines, complete_traces
    monkeypatch.delenv("DDCLI_STORE", raising=False)
    root = get_command(app)
    root_ctx = root.make_context("ddcli", ["query"], resilient_parsing=True)
    ctx = root.get_command(root_ctx, "query").make_context("query", ["--store", ran_store], parent=root_ctx,
                                                           resilient_parsing=True)
    names = [n for n, _ in complete_traces(ctx, "")]
    assert names == [t for t in _traces(ran_store) if "." not in t]
    helps = dict(complete_traces(ctx, ""))
    assert helps["words"] == "ingested" and helps["revenue"] == "written by pipeline join_example"
    assert complete_pipelines(ctx, "") == [("join_example", os.path.join(SAMPLE, "pipelines", "join_example.py"))]
    assert complete_pipelines(ctx, "x") == []


def test_the_shell_script_completes_in_bash(ran_store, tmp_path):
    """``--show-completion`` prints the script; sourced in bash, it completes trace names.
    ``--install-completion`` writes it under the home folder."""
    if not shutil.which("bash") or not os.path.exists(os.path.join(BIN, "ddcli")):
        pytest.skip("needs bash and the ddcli script")
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path),
           "DDCLI_STORE": ran_store, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    script = subprocess.run(["ddcli", "--show-completion", "bash"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert script.returncode == 0 and "_DDCLI_COMPLETE=complete_bash" in script.stdout, script.stderr
    path = write(tmp_path / "ddcli-completion.sh", script.stdout)
    got = subprocess.run(["bash", "-c", f"source {path}; COMP_WORDS=(ddcli query w); COMP_CWORD=2; "
                                        f"_ddcli_completion ddcli; echo \"${{COMPREPLY[@]}}\""],
                         env=env, capture_output=True, text=True, timeout=60)
    assert got.stdout.split() == ["words"], (got.stdout, got.stderr)
    res = subprocess.run(["ddcli", "--install-completion", "bash"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / ".bash_completions" / "ddcli.sh").read_text().strip() == script.stdout.strip()
    assert "ddcli.sh" in (tmp_path / ".bashrc").read_text()
    ok(runner.invoke(app, ["--help"]))
