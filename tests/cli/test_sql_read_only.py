"""`ddcli sql` and `--where` are read-only: no write anywhere, no file outside the store.

Every refusal is exit 2 with one `error:` line, and the store (every file hashed, every
object of an S3 store) and the directory around it are left exactly as they were. Every
test runs on a local store and on an S3 store (moto), whose layers DuckDB reads through
local copies. Since every test checks that the store is left as it was, the tests of a
backend share one store.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import tree_digest
from tests.helpers.cli import WORD_UPDATES, WORDS, ddcli, ok, one_line_error, parse_csv
from tests.helpers.s3 import BACKENDS, aws_env, new_prefix


@pytest.fixture(scope="module", params=BACKENDS)
def words(request, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "s3":
            for k, v in aws_env(request.getfixturevalue("moto_endpoint")).items():
                mp.setenv(k, v)
            from storage.blobs.resolve import forget_clients
            forget_clients()  # clients built for another endpoint
            store = new_prefix()
        else:
            store = str(tmp_path_factory.mktemp("sql") / "store")
        ok(ddcli(store, "ingest", "words", str(WORDS[0])))
        ok(ddcli(store, "ingest", "words", str(WORDS[1])))
        yield store


def _layer(store: str) -> str:
    """A layer file the newest version of the store references."""
    from storage.store import Store
    st = Store(store)
    return st.layer_paths(st.trace("words"))[0]


def _newest_log(store: str) -> str:
    from storage.store import Store
    st = Store(store)
    d = st.blobs.join(st.path, "log")
    return st.blobs.join(d, sorted(n for n in st.blobs.list(d) if n.startswith("v"))[-1])


WRITES = {
    "copy onto a layer": "COPY (SELECT 'x' AS word, 0 AS time, 1 AS diff) TO '{layer}' (FORMAT parquet)",
    "copy onto a layer, no tmp file": "COPY (SELECT 42 AS a) TO '{layer}' (FORMAT csv, USE_TMP_FILE false)",
    "copy onto the newest log version": "COPY (SELECT 1 AS a) TO '{log}' (FORMAT csv, USE_TMP_FILE false)",
    "copy outside the store": "COPY (SELECT * FROM words) TO '{outside}/out.csv'",
    "attach": "ATTACH '{store}/extra.db' AS x",
    "attach outside": "ATTACH '{outside}/extra.db' AS x",
    "create table": "CREATE TABLE t AS SELECT * FROM words",
    "export": "EXPORT DATABASE '{outside}/exported'",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "set": "SET enable_external_access = true",
    "explain analyze copy": "EXPLAIN ANALYZE COPY (SELECT 42 AS a) TO '{layer}' (FORMAT csv, USE_TMP_FILE false)",
    "explain (analyze) copy": "EXPLAIN (ANALYZE) COPY (SELECT 42 AS a) TO '{outside}/out.csv'",
    "explain (format, analyze) copy": "EXPLAIN (FORMAT json, ANALYZE) COPY (SELECT 42 AS a) TO '{outside}/o.csv'",
    "explain, comment, analyze copy": "EXPLAIN /**/ ANALYZE COPY (SELECT 42 AS a) TO '{outside}/out.csv'",
    "explain, line comment, analyse copy": "EXPLAIN -- why\n ANALYSE COPY (SELECT 42 AS a) TO '{outside}/o.csv'",
    "update extensions": "UPDATE EXTENSIONS",
    "select then update extensions": "SELECT 1; UPDATE EXTENSIONS",
    "select then copy": "SELECT 1; COPY (SELECT 42 AS a) TO '{layer}' (FORMAT csv, USE_TMP_FILE false)",
    "insert": "INSERT INTO words VALUES ('x', 0, 1)",
    "drop": "DROP VIEW words",
}


@pytest.mark.parametrize("case", sorted(WRITES))
def test_sql_refuses_every_statement_that_writes(words, tmp_path, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    query = WRITES[case].format(layer=_layer(words), log=_newest_log(words), outside=outside, store=words)
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "sql", query))
    assert "read-only" in err and "statements are refused" in err
    assert tree_digest(words) == before
    assert os.listdir(outside) == []
    # and every later read still answers from the untouched layers
    rows = parse_csv(ok(ddcli(words, "sql", "SELECT SUM(diff) AS n FROM words", "-f", "csv")).stdout)
    assert int(rows[0]["n"]) == sum(diff for _, _, diff in WORD_UPDATES)


@pytest.mark.parametrize("query", [
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/hostname')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_text('{log}')",
    "SELECT * FROM read_parquet('{other}')",
])
def test_sql_reads_no_file_outside_the_stores_layers(words, tmp_path, query):
    other = tmp_path / "other.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"secret": ["s3cr3t"]}), other)
    before = tree_digest(words)
    r = ddcli(words, "sql", query.format(log=_newest_log(words), other=other))
    err = one_line_error(r)
    assert "is refused" in err and "reads only the store's traces" in err
    assert "root:" not in r.stdout and "s3cr3t" not in r.stdout
    assert tree_digest(words) == before


def test_sql_still_runs_queries_explain_and_reads_of_its_own_layers(words):
    rows = parse_csv(ok(ddcli(words, "sql", "WITH w AS (SELECT * FROM words) SELECT COUNT(*) AS n FROM w",
                              "-f", "csv")).stdout)
    assert int(rows[0]["n"]) > 0
    assert "READ_PARQUET" in ok(ddcli(words, "sql", "EXPLAIN SELECT * FROM words")).stdout.upper()
    direct = parse_csv(ok(ddcli(words, "sql", f"SELECT COUNT(*) AS n FROM read_parquet('{_layer(words)}')",
                                "-f", "csv")).stdout)
    assert int(direct[0]["n"]) > 0


@pytest.mark.parametrize("command", ["query", "history"])
def test_where_cannot_read_files(words, command):
    before = tree_digest(words)
    r = ddcli(words, command, "words", "--where",
              "word IN (SELECT content FROM read_text('/etc/passwd'))", "-f", "csv")
    err = one_line_error(r)
    assert "'/etc/passwd' is refused" in err
    assert "root:" not in r.stdout
    assert tree_digest(words) == before


@pytest.mark.parametrize("query", ["EXPLAIN (FORMAT json) SELECT * FROM words",
                                   "EXPLAIN (FORMAT json, ANALYZE) SELECT * FROM words"])
def test_explain_with_options_is_a_read(words, query):
    import json
    before = tree_digest(words)
    plan = json.loads(ok(ddcli(words, "sql", query)).stdout)
    assert "READ_PARQUET" in json.dumps(plan).upper()
    assert tree_digest(words) == before


@pytest.mark.parametrize("query", ["EXPLAIN SELECT * FROM words WHERE word = 'apple'",
                                   "EXPLAIN ANALYZE SELECT * FROM words", "EXPLAIN (SELECT * FROM words)"])
def test_explain_prints_its_plan_as_plain_lines(words, query):
    """A plan is text drawn for a terminal: printed as its lines, not inside a table cell
    (programs still get the key and value columns with --format)."""
    out = ok(ddcli(words, "sql", query)).stdout
    lines = out.splitlines()
    assert "explain_key" not in out and "physical_plan" not in out and "analyzed_plan" not in out
    assert lines[0].lstrip().startswith(("┌", "╭")), lines[0]
    assert any("READ_PARQUET" in line.upper() for line in lines)
    rows = parse_csv(ok(ddcli(words, "sql", query, "-f", "csv")).stdout)
    assert len(rows) == 1 and set(rows[0]) == {"explain_key", "explain_value"}
