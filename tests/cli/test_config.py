"""The configuration file: ``ddcli.toml`` / ``--config`` / ``$DDCLI_CONFIG``, every setting of
the registry (storage/settings.py), precedence option > environment > file > default,
``ddcli config``, and one error line (exit 2, nothing changed) for an unknown key or a bad
value. The file's values must reach the code that reads them: the library, and Spark's
Python workers.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

import pytest

from tests.conftest import tree_digest
from tests.helpers import REPO
from tests.helpers.cli import WORDS, jsonl, ok, one_line_error, runner, write

from ddcli.cli import app


def invoke(*args: str, env: dict | None = None):
    return runner.invoke(app, list(args), env=env)


def settings_of(res) -> dict[str, dict]:
    return {r["key"]: r for r in jsonl(ok(res).stdout)}


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working folder of its own (where ``ddcli.toml`` is looked for)."""
    monkeypatch.chdir(tmp_path)
    for name in ("DDCLI_CONFIG", "DDCLI_SPARK_MASTER", "DDCLI_REDUCE_MEMORY", "DDCLI_LOOP_PATH", "DDCLI_SPARK_MEMORY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


# ---------------------------------------------------------------- the registry's kinds


def _bytes(text: str) -> int:
    """An independent reading of a size: digits and one unit letter."""
    m = re.fullmatch(r"(\d+)([kmg]?)", text)
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2)]


def test_sizes_are_kept_exactly_in_a_form_every_reader_takes():
    from storage.settings import BY_KEY
    from ops.reduce.kernel import memory_budget
    from storage.files.limits import size_setting
    check = BY_KEY["reduce_memory"].check
    rng = random.Random(3)
    for _ in range(300):
        n, unit = rng.randint(1, 5000), rng.choice(["", "k", "m", "g", "K", "MiB", "gb"])
        scale = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[unit[:1].lower()]
        text = check(f"{n}{unit}")
        assert _bytes(text) == n * scale, (n, unit, text)
        os.environ["DDCLI_REDUCE_MEMORY"] = text
        try:
            assert memory_budget() == size_setting("DDCLI_REDUCE_MEMORY", 0) == n * scale
        finally:
            del os.environ["DDCLI_REDUCE_MEMORY"]
    for bad in ("lots", "0", "-1g", "2x", ""):
        with pytest.raises(ValueError):
            check(bad)


def test_the_registry_defaults_are_what_the_code_uses_when_nothing_is_set(monkeypatch):
    """Each default of the registry, set explicitly, reads as the code's own default."""
    from ops.loops import route
    from ops.loops.plan import loop_path
    from ops.reduce import budget, kernel
    from ops.spark import class_archive, session
    from storage.files import limits
    from storage.lake import follow
    from storage.settings import BY_ENV
    from storage.store import merge_rows
    from storage.writes.lease import ttl_seconds
    readers = {"DDCLI_REDUCE_MEMORY": kernel.memory_budget, "DDCLI_REDUCE_TASK_ROWS": budget.task_rows,
               "DDCLI_LOOP_TASK_ROWS": route.task_rows, "DDCLI_LOOP_TASKS": route.resident_task_cap,
               "DDCLI_LOOP_PATH": loop_path, "DDCLI_MAX_LINE_BYTES": limits.max_line_bytes,
               "DDCLI_INGEST_MEMORY": lambda: limits.ReadBudget().limit, "DDCLI_LEASE_SECONDS": ttl_seconds,
               "DDCLI_SPARK_CONNECT_TIMEOUT": session.connect_timeout, "DDCLI_SPARK_MASTER": session.master_url,
               "DDCLI_SPARK_CDS": class_archive.enabled, "DDCLI_DELTA": follow.enabled,
               "DDCLI_MERGE_ROWS": merge_rows}
    for env, read in readers.items():
        monkeypatch.delenv(env, raising=False)
        unset = read()
        monkeypatch.setenv(env, BY_ENV[env].default)
        assert read() == unset, env
    from ops.reduce.operator import SPLIT_ROWS
    from storage.log.commit import DEFAULT_RETENTION_SECONDS
    assert int(BY_ENV["DDCLI_REDUCE_SPLIT_ROWS"].default) == SPLIT_ROWS
    from ops.run.in_driver import DRIVER_ROWS
    assert int(BY_ENV["DDCLI_DRIVER_ROWS"].default) == DRIVER_ROWS
    assert float(BY_ENV["DDCLI_LOG_RETENTION"].default) == DEFAULT_RETENTION_SECONDS


def test_every_ddcli_variable_the_code_reads_is_a_setting_or_named_as_left_out():
    from storage.settings import BY_ENV, CONFIG_ENV
    left_out = {"DDCLI_FAULT", "DDCLI_TEST_NOW", CONFIG_ENV}
    found = set()
    for top in ("ddcli", "ops", "storage"):
        for folder, _, names in os.walk(os.path.join(REPO, top)):
            for n in names:
                if n.endswith(".py"):
                    with open(os.path.join(folder, n), encoding="utf-8") as fh:
                        text = fh.read()
                    found |= set(re.findall(r"[\"'](DDCLI_[A-Z0-9_]+)[\"']", text))  # a variable's name, whole
    assert len(found) > 20, found
    assert found - left_out <= set(BY_ENV), sorted(found - left_out - set(BY_ENV))


def test_a_clusters_executors_are_handed_the_settings_tasks_read(monkeypatch):
    from ops.spark.session import executor_settings
    from storage.settings import SETTINGS
    for s in SETTINGS:
        monkeypatch.delenv(s.env, raising=False)
    monkeypatch.setenv("DDCLI_REDUCE_MEMORY", "2g")
    monkeypatch.setenv("DDCLI_STORE", "/elsewhere")  # the driver's alone
    monkeypatch.setenv("DDCLI_LOOP_EXCHANGE_TIMEOUT", "60")
    assert executor_settings() == {"DDCLI_REDUCE_MEMORY": "2g", "DDCLI_LOOP_EXCHANGE_TIMEOUT": "60"}


# ---------------------------------------------------------------- precedence and ddcli config


def test_precedence_is_option_then_environment_then_file_then_default(here, monkeypatch):
    write(here / "ddcli.toml", 'store = "from_file"\nspark_master = "local[1]"\nreduce_memory = 2048\n'
                               'loop_path = "round"\nstrict_noop = true\n')
    monkeypatch.setenv("DDCLI_LOOP_PATH", "LOCAL")
    got = settings_of(invoke("config", "--json"))
    assert got["store"]["value"] == str(here / "from_file") and got["store"]["source"] == "file"  # the file's folder
    assert got["store"]["file"] == str(here / "ddcli.toml")
    assert got["reduce_memory"]["value"] == "2k" and got["strict_noop"]["value"] == "1"
    assert got["loop_path"] == {**got["loop_path"], "value": "local", "source": "env", "file": None}
    assert got["spark_memory"]["source"] == "default" and got["spark_memory"]["value"] == "3g"
    got = settings_of(invoke("config", "--json", "--store", "opt", "--master", "local[3]",
                             env={"DDCLI_STORE": "from_env"}))
    assert (got["store"]["value"], got["store"]["source"]) == ("opt", "option")
    assert (got["spark_master"]["value"], got["spark_master"]["source"]) == ("local[3]", "option")
    got = settings_of(invoke("config", "--json", env={"DDCLI_STORE": "from_env"}))
    assert (got["store"]["value"], got["store"]["source"]) == ("from_env", "env")
    # the command put back what it set: nothing of the file stays in this process
    assert "DDCLI_STORE" not in os.environ and "DDCLI_STRICT_NOOP" not in os.environ
    assert os.environ["DDCLI_LOOP_PATH"] == "LOCAL"
    # another file, named by --config or $DDCLI_CONFIG; its relative paths from its own folder
    (here / "etc").mkdir()
    write(here / "etc" / "other.toml", 'store = "../elsewhere"\n')
    for how in (["--config", "etc/other.toml"], []):
        env = {} if how else {"DDCLI_CONFIG": str(here / "etc" / "other.toml")}
        got = settings_of(invoke(*how, "config", "--json", env=env))
        assert got["store"]["value"] == str(here / "elsewhere") and got["store"]["source"] == "file"
    table = ok(invoke("config")).stdout
    assert "from_file" in table and "configuration file" in table


def test_the_files_settings_reach_the_commands(here, tmp_path):
    """``store`` and ``max_line_bytes`` of the file steer ingest; the environment beats the file."""
    long = tmp_path / "long.csv"
    write(long, "word,time\nshort,1\n" + "x" * 3000 + ",2\n")
    write(here / "ddcli.toml", 'store = "st"\nmax_line_bytes = "1k"\nstrict_noop = true\n')
    err = one_line_error(invoke("ingest", "words", str(long)))
    assert "1 KiB (DDCLI_MAX_LINE_BYTES)" in err and tree_digest(str(here / "st")) is None
    ok(invoke("ingest", "words", str(long), env={"DDCLI_MAX_LINE_BYTES": "64k"}))
    rows = jsonl(ok(invoke("query", "words", "--json")).stdout)
    assert {r["word"] for r in rows} == {"short", "x" * 3000} and os.path.isdir(here / "st" / "log")
    ok(invoke("ingest", "w", str(WORDS[0])))
    res = invoke("ingest", "w", str(WORDS[0]))  # already ingested: nothing to do, strict_noop from the file
    assert res.exit_code == 4, res.stderr


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("text, needles", [
    ("stor = \"x\"\n", ["unknown key 'stor'", "did you mean 'store'"]),
    ("reduce_memory = \"lots\"\n", ["reduce_memory = 'lots'", "not a size"]),
    ("loop_tasks = 0\n", ["loop_tasks = 0", "at least 1"]),
    ("strict_noop = \"maybe\"\n", ["strict_noop = 'maybe'", "true or false"]),
    ("spark_memory = 3\n", ["spark_memory = 3", "JVM memory size"]),
    ("lineage_timeout = -2\n", ["lineage_timeout = -2", "positive"]),
    # TOML's types are kept apart: a boolean is no number, a number no flag, a float no count
    ("run_history = true\n", ["run_history = true is a TOML boolean", "whole number"]),
    ("run_history = 2.0\n", ["run_history = 2.0 is a TOML float", "whole number"]),
    ("reduce_memory = 1.5\n", ["reduce_memory = 1.5 is a TOML float", "size"]),
    ("strict_noop = 1\n", ["strict_noop = 1 is a TOML integer", "true or false"]),
    ("lineage_timeout = false\n", ["lineage_timeout = false is a TOML boolean", "seconds"]),
    ("loop_path = 1\n", ["loop_path = 1 is a TOML integer", "a string"]),
    # a file of settings larger than 1 MiB is refused before it is read whole
    ("store = \"st\"\n" + "#" * (1 << 20) + "\n", ["larger than 1 MiB"]),
    ("[spark]\nmaster = \"local\"\n", ["unknown key 'spark'"]),
    ("store = [\"a\"]\n", ["store = <a TOML list>"]),
    ("store = \"a\"\nstore = \"b\"\n", ["not valid TOML"]),
])
def test_an_unknown_key_or_bad_value_is_one_line_naming_file_key_and_value(here, text, needles):
    write(here / "ddcli.toml", text)
    store = str(here / "st")
    empty = write(here / "empty.toml", "")
    ok(invoke("ingest", "words", str(WORDS[0]), "--store", store, env={"DDCLI_CONFIG": empty}))
    before = tree_digest(store)
    for args in (["ingest", "words", str(WORDS[1]), "--store", store], ["config"], ["query", "words", "--store", store]):
        err = one_line_error(invoke(*args))
        assert "configuration file ddcli.toml:" in err and all(n in err for n in needles), err
    assert tree_digest(store) == before


def test_a_file_not_utf8_is_one_line(here):
    (here / "ddcli.toml").write_bytes(b'store = "\xff"\n')
    err = one_line_error(invoke("status"))
    assert "configuration file ddcli.toml: not valid TOML: not UTF-8" in err


def test_a_missing_file_or_a_bad_environment_value_is_one_line(here):
    err = one_line_error(invoke("--config", "nowhere.toml", "status"))
    assert "configuration file nowhere.toml (--config) does not exist" in err
    err = one_line_error(invoke("status", env={"DDCLI_CONFIG": "gone.toml"}))
    assert "gone.toml (DDCLI_CONFIG) does not exist" in err
    err = one_line_error(invoke("status", env={"DDCLI_LOOP_PATH": "sideways"}))
    assert "DDCLI_LOOP_PATH='sideways'" in err and "auto, round, local, resident" in err


# ---------------------------------------------------------------- Spark's workers


def test_spark_workers_see_the_files_settings(tmp_path):
    """The file's values are in the environment before Spark starts, so its Python
    workers read them (a fresh process: its JVM starts after the file is read)."""
    write(tmp_path / "ddcli.toml", 'reduce_memory = "3m"\nloop_exchange_timeout = 77\n'
                                   'spark_conf = " spark.sql.codegen.wholeStage = false;spark.ddcli.probe=a b; "\n')
    script = ("import os, json\n"
              "from ddcli import config\n"
              "config.apply(None)\n"
              "from ops.spark.session import get_spark\n"
              "sc = get_spark().sparkContext\n"
              "seen = sc.parallelize([0], 1).map(lambda _: (os.environ.get('DDCLI_REDUCE_MEMORY'),\n"
              "    __import__('ops.reduce.kernel', fromlist=['x']).memory_budget(),\n"
              "    __import__('ops.loops.exchange', fromlist=['x']).WAIT_SECONDS)).collect()\n"
              "conf = get_spark().conf\n"
              "print(json.dumps([conf.get('spark.sql.codegen.wholeStage'), conf.get('spark.ddcli.probe')]))\n"
              "print(json.dumps(seen))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DDCLI_REDUCE_MEMORY", "DDCLI_LOOP_EXCHANGE_TIMEOUT", "DDCLI_SPARK_CONF")}
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env={**env, "PYTHONPATH": REPO},
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == [["3m", 3 << 20, 77.0]]
    # spark_conf: the session holds its settings
    assert json.loads(res.stdout.splitlines()[-2]) == ["false", "a b"]


def test_spark_conf_is_name_value_pairs_and_anything_else_is_one_line(here):
    from storage.settings import BY_ENV
    check = BY_ENV["DDCLI_SPARK_CONF"].check
    assert check(" spark.a.b = 1 ;; spark.c=x y;") == "spark.a.b=1;spark.c=x y"
    assert check("spark.a=-Dx=1 -Dy=2") == "spark.a=-Dx=1 -Dy=2"  # a value may hold = and spaces
    assert check("") == ""
    for bad in ("spark.a", "a.b=1", "spark.a=1;nope", "=1", "spark. a=1"):
        with pytest.raises(ValueError):
            check(bad)
    err = one_line_error(invoke("status", env={"DDCLI_SPARK_CONF": "spark.a=1;spark.b"}))
    assert "DDCLI_SPARK_CONF='spark.a=1;spark.b'" in err and "at 'spark.b'" in err, err
