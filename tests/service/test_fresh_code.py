"""A command the warm engine runs uses the code a new process would import (ddcli/service/,
ops/spark/user_code.py): a pipeline's helper modules as they are now, wherever they live
and whether the pipeline file or a Spark task runs them; and a service whose own code
changed on disk runs no command.

The real-process tests run ``python -m ddcli`` with a folder of services of their own,
each command after the first in the service (its log says which ran there); what a
command wrote is read with pyarrow and compared with what the helpers' current version
computes.
"""

from __future__ import annotations

import importlib
import os
import sys
import uuid

import pytest

from ops.spark.user_code import KeptFiles, forget_user_modules
from tests.helpers import REPO
from tests.service.processes import (accumulated, commands_served, ddcli, ok, service_folder, service_log,
                                   wait_for_warm_up)
from tests.service.test_service import WORDS, fold_csv

# the pipeline: a column from a helper module (read by the pipeline file, in the command's
# process) and a per-key function from another (run inside Spark tasks, by reference: it
# lives on PYTHONPATH, so cloudpickle sends its module's name)
PIPELINE = """
import {driver} as driver_helper
from {task} import per_key


def pipeline(p):
    words = p.input("words")
    p.output("tagged", words.select(tag=driver_helper.TAG))
    p.output("per", words.reduce_per_key("word", per_key))
"""

TASK_HELPER = """
import pyarrow as pa


def per_key(rows):
    return pa.table({{"v": pa.array([{value}] * min(rows.num_rows, 1), pa.int64())}})
"""


def _write(path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _expected(tag: str, value: int) -> tuple[dict, dict]:
    counts = fold_csv([WORDS[0]])
    return ({(("tag", tag),): sum(counts.values())}, {(("v", value), ("word", w)): 1 for w in counts})


@pytest.mark.slow
def test_helpers_in_the_checkout_and_those_tasks_import_are_read_again_by_the_next_command(tmp_path):
    """A helper kept in ddcli's checkout (``PYTHONPATH=CLONE``) and one whose function a
    Spark task runs, edited between two runs of one service: the second run computes with
    the new versions."""
    name = uuid.uuid4().hex[:12]
    driver = os.path.join(REPO, f"_fresh_code_{name}.py")  # in the checkout, beside ddcli's packages
    lib = tmp_path / "lib"
    lib.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    _write(work / "p.py", PIPELINE.format(driver=f"_fresh_code_{name}", task=f"task_{name}"))
    env = {"PYTHONPATH": os.pathsep.join([REPO, str(lib)])}
    try:
        with service_folder() as folder:
            ok(ddcli(["ingest", "words", WORDS[0]], work, env))
            seen = []
            for version, (tag, value) in enumerate((("v1", 1), ("v22", 22))):  # other sizes: see test_kept_files
                _write(driver, f"TAG = \"'{tag}'\"\n")
                _write(lib / f"task_{name}.py", TASK_HELPER.format(value=value))
                ok(ddcli(["run", "p.py", "--rebuild"], work, env))
                if version == 0:
                    wait_for_warm_up(folder)  # a command that waits for it too long runs elsewhere
                store = str(work / "ddstore")
                seen.append(((accumulated(store, "tagged"), accumulated(store, "per")), _expected(tag, value)))
            assert commands_served(folder, at_least=2) == 2, service_log(folder)
    finally:
        os.remove(driver)
    assert seen[0][0] == seen[0][1]
    assert seen[1][0][0] == seen[1][1][0], "the pipeline file read an old version of its helper"
    assert seen[1][0][1] == seen[1][1][1], "a Spark task ran an old version of its helper"


@pytest.mark.slow
def test_a_library_upgraded_under_a_service_stops_it_and_the_command_runs_in_its_own_process(tmp_path):
    """A module of the user's site-packages (a library: the service keeps it) is upgraded
    between two runs: the service does not run the second (it would with the old code)
    but stops, and the command, run in its own process, computes with the new version."""
    name = uuid.uuid4().hex[:12]
    home = tmp_path / "home"
    site = home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    lib = tmp_path / "lib"
    lib.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    _write(work / "p.py", PIPELINE.format(driver=f"installed_{name}", task=f"task_{name}"))
    _write(lib / f"task_{name}.py", TASK_HELPER.format(value=1))
    cache = os.environ.get("DDCLI_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ddcli")
    # the user's site-packages is HOME's (a virtual environment leaves it off the search path)
    env = {"HOME": str(home), "DDCLI_CACHE_DIR": cache, "PYTHONPATH": os.pathsep.join([REPO, str(lib), str(site)])}
    with service_folder() as folder:
        ok(ddcli(["ingest", "words", WORDS[0]], work, env))
        _write(site / f"installed_{name}.py", "TAG = \"'v1'\"\n")
        ok(ddcli(["run", "p.py"], work, env))
        wait_for_warm_up(folder)
        _write(site / f"installed_{name}.py", "TAG = \"'v22'\"\n")  # pip install --user --upgrade
        ok(ddcli(["run", "p.py", "--rebuild"], work, env))
        log = service_log(folder)
        assert commands_served(folder) == 1, log
        assert f"installed_{name}.py changed since the service imported it" in log, log
        tagged = accumulated(str(work / "ddstore"), "tagged")
    assert tagged == _expected("v22", 1)[0]


PER_KEY_BY_MODULE = """
import {impl}


def per_key(rows):  # its fingerprint knows the module it calls by name only
    return {impl}.make(rows)
"""


@pytest.mark.slow
def test_a_plan_the_service_made_with_an_old_version_of_a_helper_is_not_reused(tmp_path):
    """A per-key function calls into a module whose edit changes its output's columns and
    no fingerprint (the module is read by name): the service's next run plans with the new
    version, and answers as a run in its own process does."""
    from tests.service.test_differential import _history, _masked
    name = uuid.uuid4().hex[:12]
    seen = {}
    for mode in ("0", "1"):
        work = tmp_path / f"service_{mode}"
        lib = work / "lib"
        lib.mkdir(parents=True)
        _write(lib / f"per_{name}.py", PER_KEY_BY_MODULE.format(impl=f"impl_{name}"))
        _write(lib / f"impl_{name}.py", TASK_HELPER.replace("def per_key", "def make").format(value=1))
        _write(work / "p.py", f"from per_{name} import per_key\n\n\ndef pipeline(p):\n"
                              f"    p.output('per', p.input('words').reduce_per_key('word', per_key))\n")
        env = {"PYTHONPATH": os.pathsep.join([REPO, str(lib)]), "DDCLI_SERVICE": mode}
        with service_folder() as folder:
            ok(ddcli(["ingest", "words", WORDS[0]], work, env))
            ok(ddcli(["run", "p.py"], work, env))
            if mode == "1":
                wait_for_warm_up(folder)
            _write(lib / f"impl_{name}.py", TASK_HELPER.replace("def per_key", "def make").replace('"v"', '"w"')
                   .format(value=22))
            ok(ddcli(["ingest", "words", WORDS[1]], work, env))
            res = ddcli(["run", "p.py"], work, env)
            assert commands_served(folder, at_least=2 if mode == "1" else 0, timeout=5) == (2 if mode == "1" else 0)
        seen[mode] = (res.returncode, _masked(res.stdout, {"work": str(work)}), _masked(res.stderr, {"work": str(work)}),
                      _history(str(work / "ddstore")))
    assert seen["1"] == seen["0"]


# ------------------------------------------------------------------ in this process


def test_the_users_modules_are_forgotten_and_libraries_kept(tmp_path, monkeypatch):
    """Modules imported from a user's folder (a package with a submodule among them) are
    forgotten; a standard-library module and a submodule of a package kept already stay."""
    pkg = tmp_path / "userpkg_fc"
    pkg.mkdir()
    _write(pkg / "__init__.py", "")
    _write(pkg / "sub.py", "X = 1\n")
    _write(tmp_path / "usermod_fc.py", "Y = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("userpkg_fc", "userpkg_fc.sub", "usermod_fc", "colorsys", "email.mime.audio"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.import_module("email")  # a package kept before
    before = set(sys.modules)
    for name in ("colorsys", "email.mime.audio", "usermod_fc", "userpkg_fc.sub"):
        importlib.import_module(name)

    kept = forget_user_modules(before)
    assert not {"userpkg_fc", "userpkg_fc.sub", "usermod_fc"} & set(sys.modules)
    assert {"colorsys", "email.mime.audio"} <= kept and {"colorsys", "email.mime.audio"} <= set(sys.modules)
    _write(pkg / "sub.py", "X = 22\n")
    from userpkg_fc import sub
    assert sub.X == 22


def test_kept_files_notice_every_change_of_a_kept_modules_file(tmp_path, monkeypatch):
    """A file rewritten with the same size and modification time (Python's cached bytecode
    would not notice), replaced, or removed, is seen as changed, as is one written after its
    import may have begun; untouched ones are not."""
    import time
    monkeypatch.syspath_prepend(str(tmp_path))
    names = [f"kept_fc_{i}" for i in range(4)]
    for name in names:
        _write(tmp_path / f"{name}.py", "A = 1\n")
        monkeypatch.delitem(sys.modules, name, raising=False)
    files = [__import__(name).__file__ for name in names[:3]]

    def rewrite(path):
        same = os.stat(path)
        _write(path, "A = 2\n")
        os.utime(path, ns=(same.st_atime_ns, same.st_mtime_ns))

    def replace(path):
        _write(f"{path}.new", "A = 1\n")
        os.replace(f"{path}.new", path)

    for path, change in zip(files, (rewrite, replace, os.remove)):
        kept = KeptFiles()
        kept.remember()
        assert kept.first_changed() is None
        change(path)
        assert kept.first_changed() == path

    kept = KeptFiles()
    kept.remember()
    began = time.time_ns()
    time.sleep(0.05)
    _write(tmp_path / "kept_fc_3.py", "A = 3\n")  # during the command that imports it
    __import__("kept_fc_3")
    kept.remember(since_ns=began)
    assert kept.first_changed() == str(tmp_path / "kept_fc_3.py")
    for name in names:
        monkeypatch.delitem(sys.modules, name)


def test_the_user_code_status_follows_the_module_imported_under_each_name(tmp_path, monkeypatch):
    """The status names the file each user's module loaded now was loaded from: a name
    whose module was replaced gives the new one's answer (it is remembered per module,
    never per name alone) — a module made by code is kept, one of a user's file is not."""
    import types

    from ops.spark.user_code import user_code_status

    def user_files():
        return [path for path, _ in user_code_status()]

    first, second = tmp_path / "one", tmp_path / "two"
    for folder in (first, second):
        folder.mkdir()
        _write(folder / "status_fc.py", "A = 1\n")
    monkeypatch.setitem(sys.modules, "status_fc", types.ModuleType("status_fc"))  # no file: kept
    assert not [p for p in user_files() if "status_fc" in (p or "")]
    sys.modules.pop("status_fc")
    monkeypatch.syspath_prepend(str(first))
    importlib.import_module("status_fc")
    assert str(first / "status_fc.py") in user_files()
    sys.modules.pop("status_fc")
    monkeypatch.syspath_prepend(str(second))
    importlib.import_module("status_fc")
    assert str(second / "status_fc.py") in user_files() and str(first / "status_fc.py") not in user_files()
