"""Trace names: plain identifiers, at most 64 characters, unique whatever the letter case.

SQL identifiers ignore case, so `W` next to `w` would make every `ddcli sql` fail; a name
with a newline or of 300 characters must be one clear line, not a folder or an internal
error. Each refusal: exit 2, one `error:` line, the store byte-identical.
"""

from __future__ import annotations

import pytest

from tests.cli.test_cli import WORDS, ddcli, ok, one_line_error, parse_csv
from tests.conftest import tree_digest


@pytest.fixture
def words(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    return store


@pytest.mark.parametrize("other", ["Words", "WORDS", "wOrDs"])
def test_a_name_differing_only_in_case_is_refused(words, other):
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", other, str(WORDS[1])))
    assert f"{other!r} clashes with the existing trace 'words'" in err
    assert tree_digest(words) == before
    # and SQL over the store keeps working
    rows = parse_csv(ok(ddcli(words, "sql", "SELECT COUNT(*) AS n FROM words", "-f", "csv")).stdout)
    assert int(rows[0]["n"]) > 0


@pytest.mark.parametrize("name", ["w\n", "w\nx", "\nw", "w ", "1w", "w-x", "w.x", "wörds", ""])
def test_a_name_that_is_not_an_identifier_is_refused(words, name):
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", name, str(WORDS[1])))
    assert "bad trace name" in err
    assert tree_digest(words) == before


def test_a_long_name_is_refused_with_the_limit(words):
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", "w" * 300, str(WORDS[1])))
    assert "300 characters, at most 64" in err
    assert tree_digest(words) == before


def test_a_name_of_64_characters_is_accepted(words):
    name = "w" * 64
    ok(ddcli(words, "ingest", name, str(WORDS[1])))
    rows = parse_csv(ok(ddcli(words, "sql", f"SELECT COUNT(*) AS n FROM {name}", "-f", "csv")).stdout)
    assert int(rows[0]["n"]) > 0


def test_a_pipeline_output_differing_only_in_case_is_refused_before_spark(words, tmp_path):
    pipe = tmp_path / "shout.py"
    pipe.write_text("def pipeline(p):\n    p.output('Words', p.input('words'))\n")
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "run", str(pipe)))
    assert "'Words' clashes with the existing trace 'words'" in err
    assert tree_digest(words) == before


def test_a_pipeline_name_with_a_newline_is_refused(words, tmp_path):
    pipe = tmp_path / "copy.py"
    pipe.write_text("def pipeline(p):\n    p.output('copied', p.input('words'))\n")
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "run", str(pipe), "--name", "nightly\n"))
    assert "bad pipeline name" in err
    assert tree_digest(words) == before
