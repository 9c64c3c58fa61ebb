"""`--output` never writes inside a store: not onto a layer, not onto a log version, not
as a new file among the store's files, not through a symbolic link into it, not onto a
hard link of one of its files (the same file under a name outside the store).

Each refusal is exit 2, one `error:` line naming the path and the store, and the store is
byte-identical afterwards.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import tree_digest
from tests.helpers.cli import WORDS, ddcli, ok, one_line_error, parse_csv


@pytest.fixture
def words(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    ok(ddcli(store, "ingest", "words", str(WORDS[1])))
    return store


def _targets(store: str, tmp_path) -> dict[str, str]:
    from storage.store import Store
    st = Store(store)
    layer = st.layer_paths(st.trace("words"))[0]
    log_dir = os.path.join(store, "log")
    newest = os.path.join(log_dir, sorted(n for n in os.listdir(log_dir) if n.startswith("v"))[-1])
    link = tmp_path / "innocent.csv"
    link.symlink_to(layer)
    hard = tmp_path / "out.csv"
    os.link(layer, hard)
    hard_log = tmp_path / "log_copy.json"
    os.link(newest, hard_log)
    link_to_hard = tmp_path / "via_link.csv"
    link_to_hard.symlink_to(hard_log)
    return {"layer": layer, "newest log version": newest,
            "new file in the store": os.path.join(store, "result.csv"),
            "new file in a trace folder": os.path.join(store, "traces", "words", "result.parquet"),
            "link to a layer": str(link), "hard link of a layer": str(hard),
            "link to a hard link of the newest log version": str(link_to_hard)}


COMMANDS = [["query", "words"], ["history", "words"], ["sql", "SELECT * FROM words"], ["status"],
            ["compact"], ["advance", "words", "--since", "1"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_output_inside_the_store_is_refused(words, tmp_path, command):
    for what, target in _targets(words, tmp_path).items():
        before = tree_digest(words)
        err = one_line_error(ddcli(words, *command, "--output", target, "--format", "csv"))
        assert ("inside the store" in err or "under another name (a hard link)" in err), (what, err)
        assert os.path.realpath(words) in err, (what, err)
        assert tree_digest(words) == before, what


def test_a_hard_link_of_a_layer_is_refused_and_the_trace_still_reads(words, tmp_path):
    """The attack in full: a layer hard-linked outside the store, then ``--output`` onto it."""
    from storage.store import Store
    layer = Store(words).layer_paths(Store(words).trace("words"))[0]
    out = tmp_path / "out.csv"
    os.link(layer, out)
    want = ok(ddcli(words, "query", "words", "-f", "csv")).stdout
    for command in (["sql", "SELECT 1 AS x"], ["query", "words"], ["history", "words"]):
        one_line_error(ddcli(words, *command, "--output", str(out)))
    assert ok(ddcli(words, "query", "words", "-f", "csv")).stdout == want
    ok(ddcli(words, "check"))


def test_an_output_beside_the_store_is_written(words, tmp_path):
    out = tmp_path / "store_result.csv"  # a sibling whose name starts like the store's
    ok(ddcli(words, "query", "words", "--output", str(out)))
    assert {r["word"] for r in parse_csv(out.read_text())}
