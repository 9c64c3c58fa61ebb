"""Command lines the warm engine must take as a command in its own process would: ddcli's
own options before the command (``ddcli --store PATH run p.py`` is a run, for the service;
the settings of ``ddcli --config PATH`` are the client's too), and a pipeline file that ends its process while it loads (``os._exit``, ``sys.exit``): one
error line, exit 2, and the service lives on for the next command. Real processes, with a
folder of services of the test's own (tests/service/test_service.py)."""

from __future__ import annotations

import os
import re

from tests.service.test_service import WORDCOUNT, WORDS, collection, ddcli, fold_csv, ok, own_services, services

assert own_services  # the fixture (autouse): a folder of services for each test, stopped at its end


def test_options_before_the_command_and_a_pipeline_that_exits_while_loaded(tmp_path):
    from ddcli.service.folder import log_path

    ok(ddcli(["--store", "st", "ingest", "words", WORDS[0]], tmp_path))
    ok(ddcli(["--store", "st", "run", WORDCOUNT], tmp_path))
    (key, pid), = services().items()  # the run went to a service
    assert collection(str(tmp_path / "st"), "counts") == {
        (("count", n), ("word", w)): 1 for w, n in fold_csv(WORDS[:1]).items()}
    assert not (tmp_path / "ddstore").exists()

    (tmp_path / "ends.py").write_text("import os\nos._exit(0)\n")
    (tmp_path / "exits.py").write_text("def pipeline(p):\n    raise SystemExit('bye')\n")
    for args, call in ((["--store", "st", "run", "ends.py"], "ends.py:2: the pipeline file calls os._exit(0)"),
                       (["run", "ends.py", "--store", "st"], "ends.py:2: the pipeline file calls os._exit(0)"),
                       (["verify", "exits.py", "--store", "st"], "exits.py:2: the pipeline file calls sys.exit('bye')")):
        res = ddcli(args, tmp_path)
        assert res.returncode == 2 and res.stdout == "", (args, res.returncode, res.stdout, res.stderr)
        assert res.stderr.startswith(f"error: {call} while it is loaded") and res.stderr.count("\n") == 1, res.stderr
        assert services() == {key: pid}, args  # the service lives on
    with open(log_path(os.environ["DDCLI_SERVICE_DIR"], key)) as fh:
        ran = [line for line in fh if re.search(r"\] ran \S+ for pid ", line)]
    assert [line.split(": exit ")[1].split()[0] for line in ran] == ["0", "2", "2", "2"], ran  # the service ran them

    ok(ddcli(["--store", "st", "ingest", "words", WORDS[1]], tmp_path))
    ok(ddcli(["--store", "st", "run", WORDCOUNT], tmp_path))
    assert services() == {key: pid}
    assert collection(str(tmp_path / "st"), "counts") == {
        (("count", n), ("word", w)): 1 for w, n in fold_csv(WORDS).items()}


def test_the_client_reads_the_configuration_file_named_before_the_command(tmp_path):
    """``ddcli --config F run``: the client decides with F's settings, as the command does
    (here F turns the warm engine off: no service starts)."""
    ok(ddcli(["--store", "st", "ingest", "words", WORDS[0]], tmp_path))
    (tmp_path / "no_service.toml").write_text("service = false\n")
    ok(ddcli(["--config", "no_service.toml", "--store", "st", "run", WORDCOUNT], tmp_path))
    assert services() == {}
    assert collection(str(tmp_path / "st"), "counts") == {
        (("count", n), ("word", w)): 1 for w, n in fold_csv(WORDS[:1]).items()}


def test_a_small_ingest_joins_a_running_service_and_never_starts_one(tmp_path):
    """``ddcli ingest`` of a few rows: in its own process while no service runs (it starts
    none: an ingest needs no Spark), by the service once one runs (no second of imports),
    and in its own process again when it must die where it is (a fault point); the store
    is the same either way."""
    from ddcli.service.folder import log_path

    ok(ddcli(["--store", "st", "ingest", "words", WORDS[0]], tmp_path))
    assert services() == {}, "an ingest started a service"
    ok(ddcli(["--store", "st", "run", WORDCOUNT], tmp_path))
    (key, pid), = services().items()
    ok(ddcli(["--store", "st", "ingest", "words", WORDS[1]], tmp_path))
    (tmp_path / "late.csv").write_text("word,time,diff\nzucchini,9,1\n")
    res = ddcli(["--store", "st", "ingest", "words", "late.csv"], tmp_path, env={"DDCLI_FAULT": "ingest.before_commit"})
    assert res.returncode == 137, (res.returncode, res.stderr)  # killed in its own process
    assert services() == {key: pid}, "the service lives on"
    with open(log_path(os.environ["DDCLI_SERVICE_DIR"], key)) as fh:
        ran = [re.search(r"\] ran (\S+) for pid ", line).group(1) for line in fh if re.search(r"\] ran \S+ for pid ", line)]
    assert ran == ["run", "ingest"], ran
    ok(ddcli(["--store", "st", "run", WORDCOUNT], tmp_path))
    assert collection(str(tmp_path / "st"), "counts") == {
        (("count", n), ("word", w)): 1 for w, n in fold_csv(WORDS).items()}
