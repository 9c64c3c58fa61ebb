"""A run killed at each step of its commit, then re-run, gives exactly the uninterrupted outputs.

Each kill is a real process exit (``DDCLI_FAULT=point`` makes ``ddcli run`` exit with 137
at that point, leaving whatever it wrote); the re-run then must neither lose nor double an
update. The reference is the same two runs without any fault.

Only the killed run is a process of its own (it must really die); everything else runs
in this process on the shared Spark session, so the file starts four JVMs, not fifteen.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from storage.store import Store
from tests.helpers import REPO as ROOT
from tests.helpers.cli import cli

PIPELINE = os.path.join(ROOT, "sample_data", "pipelines", "join_example.py")
DATA = os.path.join(ROOT, "sample_data")

# the steps of a run's commit, in order: after the layers are written, before and after
# the new metadata version is linked into place, and after the commit returned
POINTS = ["run.before_commit", "log.before_link", "log.after_link", "run.after_commit"]


def killed_run(store: str, point: str) -> subprocess.CompletedProcess:
    """``ddcli run`` in a process of its own that exits with 137 at ``point``."""
    env = dict(os.environ, DDCLI_STORE=store, DDCLI_FAULT=point, DDCLI_SERVICE="0")  # the run's own process dies
    return subprocess.run([sys.executable, "-m", "ddcli", "run", PIPELINE], env=env, capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def ddcli(store: str, *args: str):
    """``ddcli ARGS`` in this process; returns (exit code, stdout + stderr)."""
    res = cli(store, *args)
    return res.exit_code, res.stdout + res.stderr


def outputs(store: str) -> dict:
    """Every output trace's consolidated updates, as sorted tuples.

    (State traces are left to ``verify`` and to the next run: merges after a commit may
    advance their times to the pipeline's frontier, which changes their form, not their
    meaning.)
    """
    st = Store(store)
    out = {}
    for name, t in st.state().traces.items():
        if t.owner and "." not in name:
            rows = st.read_updates(t).to_pylist()
            acc: dict = {}
            for r in rows:
                k = tuple(sorted((c, v) for c, v in r.items() if c != "diff"))
                acc[k] = acc.get(k, 0) + r["diff"]
            out[name] = sorted((k, v) for k, v in acc.items() if v)
    return out


def prepare(store: str) -> None:
    """The first batch ingested and run, the second batch ingested."""
    for args in (("ingest", "orders", f"{DATA}/orders_1.csv"),
                 ("ingest", "customers", f"{DATA}/customers_1.csv", "--upper", "5"),
                 ("run", PIPELINE),
                 ("ingest", "orders", f"{DATA}/orders_2.csv"),
                 ("ingest", "customers", f"{DATA}/customers_2.csv", "--upper", "7")):
        code, text = ddcli(store, *args)
        assert code == 0, text


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory) -> dict:
    store = str(tmp_path_factory.mktemp("reference") / "store")
    prepare(store)
    code, text = ddcli(store, "run", PIPELINE)
    assert code == 0, text
    out = outputs(store)
    assert out["revenue"], "the reference run produced no output"
    return out


@pytest.fixture(scope="module")
def prepared(spark, tmp_path_factory) -> str:
    """A store with the first run done and the second batch ingested, copied by each case."""
    store = str(tmp_path_factory.mktemp("prepared") / "store")
    prepare(store)
    return store


@pytest.mark.parametrize("point", POINTS)
def test_run_killed_at_each_commit_step_then_rerun_matches_uninterrupted(tmp_path, prepared, reference, point):
    store = str(tmp_path / "store")
    shutil.copytree(prepared, store)
    before = Store(store).state().version
    killed = killed_run(store, point)
    assert killed.returncode == 137, killed.stderr
    committed = Store(store).state().version > before
    assert committed == (point in ("log.after_link", "run.after_commit"))
    code, again = ddcli(store, "run", PIPELINE)
    assert code == 0, again
    assert ("nothing to do" in again) == committed
    assert outputs(store) == reference
    code, check = ddcli(store, "verify", PIPELINE)
    assert code == 0 and "verified" in check, check
