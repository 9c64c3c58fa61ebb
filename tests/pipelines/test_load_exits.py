"""A pipeline file that ends the process while it is loaded (``sys.exit``, ``exit()``,
``raise SystemExit``, ``os._exit``, at import or in ``pipeline(p)``) is one error line naming
the file and the call, exit 2, nothing changed, in every command that loads a pipeline. The
same in the warm engine, which survives it: tests/service/test_service_commands.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import tree_digest
from tests.helpers.cli import WORDS, error_line, ok, runner, write
from tests.helpers.operations import ddcli_env

from ddcli.cli import app

# (pipeline file, the call its error line names, the line of that call)
RAISING = {
    "sys_exit_0": ("import sys\nsys.exit(0)\n", "sys.exit(0)", 2),
    "system_exit_text": ("raise SystemExit('x')\n", "sys.exit('x')", 1),
    "exit_in_pipeline": ("def pipeline(p):\n    exit()\n", "sys.exit()", 2),
    "swallowed_exception": ("import sys\ntry:\n    sys.exit(3)\nexcept Exception:\n    pass\n", "sys.exit(3)", 3),
}
ENDING = {
    "os_exit_0": ("import os\nos._exit(0)\n", "os._exit(0)", 2),
    "os_exit_imported": ("from os import _exit\n\n\ndef pipeline(p):\n    _exit(7)\n", "os._exit(7)", 5),
    "os_exit_in_try": ("import os\ntry:\n    os._exit(0)\nexcept Exception:\n    pass\n", "os._exit(0)", 3),
}
COMMANDS = [["run"], ["run", "--rebuild"], ["verify"], ["explain"]]


@pytest.fixture
def words_store(tmp_path):
    store = str(tmp_path / "store")
    ok(runner.invoke(app, ["ingest", "words", str(WORDS[0]), "--store", store]))
    return store


def check_line(err: str, path: str, call: str, line: int) -> None:
    assert err.startswith(f"error: {path}:{line}: "), err
    assert f"calls {call} while it is loaded" in err, err


@pytest.mark.parametrize("case", sorted(RAISING))
def test_a_pipeline_that_exits_while_loaded_is_one_line_and_exit_2_in_every_command(case, words_store, tmp_path):
    text, call, line = RAISING[case]
    path = write(tmp_path / f"{case}.py", text)
    before = tree_digest(words_store)
    for command in COMMANDS:
        res = runner.invoke(app, [command[0], path, *command[1:], "--store", words_store],
                            env={"DDCLI_NO_PROGRESS": "1"})
        assert res.exit_code == 2 and res.stdout == "", (command, res.exit_code, res.stdout, res.stderr)
        check_line(error_line(res.stderr), path, call, line)
    assert tree_digest(words_store) == before


@pytest.mark.parametrize("case", sorted(ENDING))
def test_os_exit_while_loaded_is_one_line_and_exit_2(case, words_store, tmp_path):
    """In a process of its own (``os._exit`` would end the test's), without the warm engine."""
    text, call, line = ENDING[case]
    path = write(tmp_path / f"{case}.py", text)
    before = tree_digest(words_store)
    for command in (["explain"], ["run"]):
        res = subprocess.run([sys.executable, "-m", "ddcli", command[0], path, "--store", words_store],
                             env=ddcli_env({"DDCLI_SERVICE": "0", "DDCLI_NO_PROGRESS": "1"}),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 2 and res.stdout == "", (command, res.returncode, res.stdout, res.stderr)
        assert res.stderr.count("\n") == 1, res.stderr
        check_line(res.stderr, path, call, line)
    assert tree_digest(words_store) == before


def test_os_exit_is_itself_again_once_the_file_is_loaded(tmp_path, monkeypatch):
    from ops.dataflow.load import load_pipeline
    from ops.errors import PipelineError

    def original(code):  # stands for os._exit, which would end this test's process
        raise AssertionError(f"the real os._exit({code}) was called")
    monkeypatch.setattr(os, "_exit", original)
    with pytest.raises(PipelineError, match=r"calls os\._exit\(1\)"):
        load_pipeline(write(tmp_path / "ends.py", "import os\nos._exit(1)\n"))
    assert os._exit is original
    p = load_pipeline(write(tmp_path / "fine.py", "def pipeline(p):\n    p.output('o', p.input('words'))\n"))
    assert p.outputs and os._exit is original
