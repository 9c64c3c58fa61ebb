"""The bad-input corpus through the command line: every case is exit code 2, one line on
stderr (``error: …``, no traceback) saying what is wrong, and a store left byte-identical
(every file and directory under it hashed before and after).

* ``tests/data/bad_inputs/`` — update files (wrong types, missing and extra columns,
  overflowing integers, NaN, broken CSV quoting, invalid UTF-8, empty files, …), ingested
  into a store that already holds traces; a case with a ``schema`` (or ``d``) goes into an
  existing trace of that schema, the others into a new trace (which must not appear);
* ``tests/data/bad_inputs_ops/`` — update files that are wrong for the state of an
  existing trace (times not beyond its upper, columns or key of another trace, …);
* huge lines, generated here (megabytes on one line);
* ``tests/data/bad_pipelines/`` — pipeline files and arguments for ``ddcli run`` and
  ``ddcli verify``: syntax errors, a pipeline that raises, one that never converges,
  unknown inputs and columns, join keys of different types, outputs clashing with inputs
  and other traces, names like ``../x``, …

The commands run in this process (``typer.testing.CliRunner``, on the test session's Spark);
one case per kind also runs as a real ``python -m ddcli`` process, whose whole stderr must be
the one line (PySpark and the JVM print nothing of their own).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ddcli.cli import app
from tests.conftest import tree_digest
from tests.helpers.cli import error_line
from tests.helpers.operations import REPO, ddcli_env
from tests.helpers.s3 import place_store

DATA = os.path.join(REPO, "tests", "data")
BAD_INPUTS = os.path.join(DATA, "bad_inputs")
BAD_OPS = os.path.join(DATA, "bad_inputs_ops")
BAD_PIPELINES = os.path.join(DATA, "bad_pipelines")
SAMPLE = os.path.join(REPO, "sample_data")
runner = CliRunner()


def _load(directory: str) -> dict:
    with open(os.path.join(directory, "cases.json"), encoding="utf-8") as fh:
        return json.load(fh)


INPUT_CASES = _load(BAD_INPUTS)
OPS_CASES = _load(BAD_OPS)
PIPELINE_CASES = _load(BAD_PIPELINES)


def test_the_corpus_has_at_least_fifty_files_and_every_file_is_a_case():
    files = {d: sorted(f for f in os.listdir(d) if f != "cases.json") for d in (BAD_INPUTS, BAD_OPS, BAD_PIPELINES)}
    assert sum(len(f) for f in files.values()) >= 50
    assert set(files[BAD_INPUTS]) == set(INPUT_CASES)
    assert set(files[BAD_OPS]) == set(OPS_CASES)
    used = {c["file"] for c in PIPELINE_CASES.values()}
    assert set(files[BAD_PIPELINES]) <= used, set(files[BAD_PIPELINES]) - used


def one_line_error(res, where: str) -> str:
    assert res.exit_code == 2, f"{where}: exit {res.exit_code}\nstdout {res.stdout!r}\nstderr {res.stderr!r}"
    assert res.stdout == "", f"{where}: {res.stdout!r}"
    return error_line(res.stderr)


def check_refused(store: str, args: list[str], expect: list[str], where: str) -> str:
    before = tree_digest(store)
    res = runner.invoke(app, [*args, "--store", store])
    err = one_line_error(res, where)
    for e in expect:
        assert e in err, f"{where}: {e!r} not in {err!r}"
    assert tree_digest(store) == before, f"{where}: the store changed"
    return err


# ------------------------------------------------------------------ update files


def _write_one_row(path: str, schema: dict[str, str], d: int) -> str:
    """A valid update file of that schema (one row at time 0) to create a trace with."""
    samples = {"string": "a", "int64": 1, "int32": 1, "double": 1.5, "bool": True}
    cols = {}
    for name, t in schema.items():
        typ = pa.timestamp("us") if t == "timestamp[us]" else pa.type_for_alias(t)
        value = 0 if t == "timestamp[us]" else samples[t]
        cols[name] = pa.array([value], typ)
    for c in (["time"] if d == 1 else [f"time_{i}" for i in range(d)]):
        cols[c] = pa.array([0], pa.int64())
    pq.write_table(pa.table(cols), path)
    return path


@pytest.fixture(scope="module")
def input_store(tmp_path_factory):
    """A store with ``words`` and one trace per schema (and time dimension) the corpus needs;
    returns (path, {case: trace to ingest into})."""
    root = tmp_path_factory.mktemp("bad_inputs")
    store = str(root / "store")
    for f in ("words_1.csv", "words_2.csv"):
        assert runner.invoke(app, ["ingest", "words", os.path.join(SAMPLE, f), "--store", store]).exit_code == 0
    target, made = {}, {}
    for name, case in sorted(INPUT_CASES.items()):
        if "schema" not in case and "d" not in case:
            target[name] = "fresh"  # a trace that does not exist yet, and must not after
            continue
        schema = case.get("schema") or {"word": "string"}
        d = case.get("d", 1)
        key = (json.dumps(schema, sort_keys=True), d)
        if key not in made:
            made[key] = f"t{len(made)}"
            path = _write_one_row(str(root / f"{made[key]}.parquet"), schema, d)
            extra = ["--upper", "(1," + ",".join(["0"] * (d - 1)) + ")"] if d > 1 else []
            res = runner.invoke(app, ["ingest", made[key], path, *extra, "--store", store])
            assert res.exit_code == 0, res.stderr
        target[name] = made[key]
    return store, target


_ON_S3: dict[str, str] = {}  # the module's input store, uploaded once per test process


# every case on a local folder; every fourth also on the object store (its requests are slow)
@pytest.mark.parametrize("name, store_location",
                         [(n, "local") for n in sorted(INPUT_CASES)]
                         + [(n, "s3") for n in sorted(INPUT_CASES)[::4]], indirect=["store_location"])
def test_bad_update_file_into_an_existing_store(input_store, name, store_location):
    store, target = input_store
    if store_location.startswith("s3://"):
        if store not in _ON_S3:
            _ON_S3[store] = place_store(store, store_location)
        store = _ON_S3[store]
    case = INPUT_CASES[name]
    args = ["ingest", target[name], os.path.join(BAD_INPUTS, name)]
    if "time" in case:
        t = case["time"]
        args += ["--time", str(t[0]) if len(t) == 1 else "(" + ",".join(map(str, t)) + ")"]
    check_refused(store, args, [name, case["expect"]], name)  # (a new trace would change the store)


@pytest.fixture(scope="module")
def ops_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_ops")
    store = str(root / "store")

    def ingest(*args):
        res = runner.invoke(app, ["ingest", *args, "--store", store])
        assert res.exit_code == 0, res.stderr
    ingest("words", os.path.join(SAMPLE, "words_1.csv"), os.path.join(SAMPLE, "words_2.csv"))
    (root / "pairs.csv").write_text("word,n,time\na,1,5\n")
    ingest("pairs", str(root / "pairs.csv"))
    ingest("strings", os.path.join(SAMPLE, "strings_1.csv"), "--upper", "(1,0)")
    ingest("strings", os.path.join(SAMPLE, "strings_2.csv"), "--upper", "(2,0)")
    return store


@pytest.mark.parametrize("name", sorted(OPS_CASES))
def test_update_file_wrong_for_the_trace_it_goes_into(ops_store, name):
    case = OPS_CASES[name]
    args = ["ingest", case["trace"], os.path.join(BAD_OPS, name), *case.get("args", [])]
    named = [] if case.get("about_an_option") else [name]  # a wrong option needs not name the file
    check_refused(ops_store, args, [*named, case["expect"], *case.get("also", [])], name)


HUGE = {
    "huge_line.csv": ("word,time\n" + ",".join(["1"] * 600_000) + "\n", "expected 2 fields like the header"),
    "huge_then_wrong.jsonl": ('{"word": "' + "y" * 3_000_000 + '", "time": 7}\n{"word": 5, "time": 8}\n',
                              "row 2, column word: 5 is a number"),
    "huge_unterminated_quote.csv": ('word,time\n"' + "z" * 3_000_000 + ",7\n", "huge_unterminated_quote.csv"),
}


@pytest.mark.parametrize("name", sorted(HUGE))
def test_huge_lines(ops_store, tmp_path, name):
    text, expect = HUGE[name]
    path = tmp_path / name
    path.write_text(text)
    check_refused(ops_store, ["ingest", "words", str(path)], [name, expect], name)


# ------------------------------------------------------------------ pipelines


@pytest.fixture(scope="module")
def pipeline_store(spark, tmp_path_factory):
    """Inputs of every kind the bad pipelines use, and the sample word count run once."""
    root = tmp_path_factory.mktemp("bad_pipelines")
    store = str(root / "template")

    def ingest(trace, text, *args):
        path = root / f"{trace}.csv"
        path.write_text(text)
        res = runner.invoke(app, ["ingest", trace, str(path), *args, "--store", store])
        assert res.exit_code == 0, res.stderr
    ingest("words", "word,time\napple,0\nmango,1\nfig,2\nlemon,2\n")
    ingest("xs", "k,v,time\n1,a,0\n2,b,1\n")
    ingest("names", "k,name,time\nk1,one,0\n")
    ingest("strings", "s,time_0,time_1\na,0,0\n", "--upper", "(1,0)")
    res = runner.invoke(app, ["run", os.path.join(SAMPLE, "pipelines", "wordcount.py"), "--store", store])
    assert res.exit_code == 0, res.stderr
    return store


def _pipeline_args(case: dict) -> list[str]:
    return [case.get("command", "run"), os.path.normpath(os.path.join(BAD_PIPELINES, case["file"])),
            *case.get("args", [])]


@pytest.mark.parametrize("name", sorted(PIPELINE_CASES))
def test_bad_pipeline(pipeline_store, tmp_path, name):
    case = PIPELINE_CASES[name]
    if "xfail" in case:
        pytest.xfail(case["xfail"])
    store = str(tmp_path / "store")
    shutil.copytree(pipeline_store, store)  # each case on its own copy: one failure cannot spoil the next
    check_refused(store, _pipeline_args(case), [case["expect"]], name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["unknown_column_in_expression", "never_converges", "division_by_zero_on_the_data"])
def test_bad_pipeline_in_a_real_process_prints_one_line(pipeline_store, tmp_path, name):
    """Nothing but the one line reaches stderr: not PySpark's JSON error log, not the JVM."""
    case = PIPELINE_CASES[name]
    store = str(tmp_path / "store")
    shutil.copytree(pipeline_store, store)
    before = tree_digest(store)
    res = subprocess.run([sys.executable, "-m", "ddcli", *_pipeline_args(case), "--store", store],
                         env=ddcli_env({"TMPDIR": str(tmp_path)}), capture_output=True, text=True, timeout=600)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr[:3000]
    assert case["expect"] in res.stderr and res.stdout == ""
    assert tree_digest(store) == before
