"""The ddcli commands, as a user and a scheduler see them.

Outputs in csv and jsonl are parsed and compared with a plain fold of the updates; every
bad input is exit code 2, one line on stderr naming file, row and value, and a store left
byte-identical (every file under it hashed before and after).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ddcli.cli import app
from tests.helpers import REPO
from tests.helpers.cli import (SAMPLE, WORD_UPDATES, WORDS, ddcli, fold, jsonl, ok, one_line_error, parse_csv,
                               read_csv_updates, runner)

BAD = Path(REPO) / "tests" / "data" / "bad_inputs"


@pytest.fixture
def words(store_dir):
    ok(ddcli(store_dir, "ingest", "words", str(WORDS[0])))
    ok(ddcli(store_dir, "ingest", "words", str(WORDS[1])))
    return store_dir


@pytest.fixture
def words_anywhere(store_location):
    """The words store on a local folder and on an S3 store (for the SQL tests)."""
    ok(ddcli(store_location, "ingest", "words", str(WORDS[0])))
    ok(ddcli(store_location, "ingest", "words", str(WORDS[1])))
    return store_location


# ---------------------------------------------------------------- ingest and query


def test_ingest_csv_then_query_every_time_in_csv_and_jsonl(words):
    for t in range(6):
        want = {w[0]: c for w, c in fold(WORD_UPDATES, (t,)).items()}
        got = parse_csv(ok(ddcli(words, "query", "words", "--as-of", str(t), "--format", "csv")).stdout)
        assert {r["word"]: int(r["count"]) for r in got} == want
        got = jsonl(ok(ddcli(words, "query", "words", "--as-of", str(t), "--json")).stdout)
        assert {r["word"]: r["count"] for r in got} == want
    # the default is the latest complete time, upper - 1 = 5
    got = parse_csv(ok(ddcli(words, "query", "words", "-f", "csv")).stdout)
    assert {r["word"]: int(r["count"]) for r in got} == {w[0]: c for w, c in fold(WORD_UPDATES, (5,)).items()}


def test_query_table_output_on_a_terminal_shows_rows(words):
    out = ok(ddcli(words, "query", "words", "--as-of", "2")).stdout
    assert "words as of 2" in out and "apple" in out and "count" in out and "3 rows" in out


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_ingest_jsonl_and_parquet(store_dir, tmp_path, ext):
    rows = [{"user": "u1", "clicks": 3, "time": 0}, {"user": "u2", "clicks": 1, "time": 1},
            {"user": "u1", "clicks": 3, "time": 2, "diff": -1}]
    path = tmp_path / f"clicks.{ext}"
    if ext == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist([{**r, "diff": r.get("diff", 1)} for r in rows]), path)
    res = ok(ddcli(store_dir, "ingest", "clicks", str(path), "--key", "user", "--json"))
    rec = jsonl(res.stdout)[0]
    assert rec["created"] and rec["updates"] == 3 and rec["upper"] == "3" and not rec["noop"]
    got = jsonl(ok(ddcli(store_dir, "query", "clicks", "--as-of", "1", "--json")).stdout)
    assert got == [{"user": "u1", "clicks": 3, "count": 1}, {"user": "u2", "clicks": 1, "count": 1}]
    got = jsonl(ok(ddcli(store_dir, "query", "clicks", "--json")).stdout)
    assert got == [{"user": "u2", "clicks": 1, "count": 1}]


def test_ingest_with_time_option_and_file_format(store_dir, tmp_path):
    path = tmp_path / "events.txt"
    path.write_text("word\nx\ny\n")
    ok(ddcli(store_dir, "ingest", "ev", str(path), "--time", "4", "--file-format", "csv"))
    got = jsonl(ok(ddcli(store_dir, "history", "ev", "--json")).stdout)
    assert got == [{"word": "x", "time": 4, "diff": 1}, {"word": "y", "time": 4, "diff": 1}]
    path2 = tmp_path / "more.txt"
    path2.write_text('{"word": "z"}\n')
    ok(ddcli(store_dir, "ingest", "ev", str(path2), "--time", "5", "--input-format", "jsonl"))
    assert len(jsonl(ok(ddcli(store_dir, "query", "ev", "--json")).stdout)) == 3


def test_d2_with_upper_matches_the_design_example(store_dir):
    """The strings of the reduce example (docs/architecture.md): ingest two epochs with --upper, query at every time."""
    s1, s2 = SAMPLE / "strings_1.csv", SAMPLE / "strings_2.csv"
    ups = read_csv_updates(s1, 2) + read_csv_updates(s2, 2)
    rec = jsonl(ok(ddcli(store_dir, "ingest", "strings", str(s1), "--upper", "(1,0)", "--json")).stdout)[0]
    assert rec["upper"] == "(1,0)" and rec["pending"] == 0
    ok(ddcli(store_dir, "ingest", "strings", str(s2), "--upper", "(2,0)"))
    for t in [(0, 0), (0, 1), (1, 0), (1, 1), (1, 5)]:
        got = parse_csv(ok(ddcli(store_dir, "query", "strings", "--as-of", f"({t[0]},{t[1]})", "-f", "csv")).stdout)
        assert {r["s"]: int(r["count"]) for r in got} == {k[0]: v for k, v in fold(ups, t).items()}, t
    # at (1,1): a: 1-1-1+1 = 0, b: 3-3-1+2 = 1, cc: 2
    got = parse_csv(ok(ddcli(store_dir, "query", "strings", "--as-of", "(1,1)", "-f", "csv")).stdout)
    assert [(r["s"], r["count"]) for r in got] == [("b", "1"), ("cc", "2")]
    hist = jsonl(ok(ddcli(store_dir, "history", "strings", "--json")).stdout)
    assert hist[0] == {"s": "a", "time_0": 0, "time_1": 0, "diff": 1}
    assert len(hist) == len(ups)


def test_d2_without_upper_leaves_updates_pending(store_dir):
    res = ok(ddcli(store_dir, "ingest", "strings", str(SAMPLE / "strings_1.csv")))
    assert "wait to be sealed" in res.stdout
    res = ok(ddcli(store_dir, "advance", "strings", "--upper", "(1,0)", "--json"))
    rec = jsonl(res.stdout)[0]
    assert rec["upper"] == "(1,0)" and rec["upper_before"] == "(0,0)"
    st = jsonl(ok(ddcli(store_dir, "status", "strings", "--json")).stdout)[0]
    assert st["pending"] == 0 and st["rows"] == 5


def test_history_and_sql_outputs(words_anywhere):
    words = words_anywhere
    hist = parse_csv(ok(ddcli(words, "history", "words", "-f", "csv")).stdout)
    got = [((r["word"],), (int(r["time"]),), int(r["diff"])) for r in hist]
    assert got == sorted(WORD_UPDATES)
    hist = jsonl(ok(ddcli(words, "history", "words", "--where", "word = 'apple'", "--json")).stdout)
    assert [h["time"] for h in hist] == [0, 1, 3]
    q = "SELECT word, SUM(diff) AS count FROM words WHERE time <= 4 GROUP BY ALL HAVING SUM(diff) <> 0 ORDER BY word"
    got = parse_csv(ok(ddcli(words, "sql", q, "-f", "csv")).stdout)
    assert {r["word"]: int(r["count"]) for r in got} == {w[0]: c for w, c in fold(WORD_UPDATES, (4,)).items()}


def test_query_before_since_is_refused_naming_the_earliest_time(words, digest):
    ok(ddcli(words, "advance", "words", "--since", "3"))
    before = digest(words)
    err = one_line_error(ddcli(words, "query", "words", "--as-of", "1"))
    assert "time 1 is not beyond the since 3 of trace 'words'" in err
    assert "earliest time that works is 3" in err
    assert digest(words) == before
    got = parse_csv(ok(ddcli(words, "query", "words", "--as-of", "3", "-f", "csv")).stdout)
    assert {r["word"]: int(r["count"]) for r in got} == {w[0]: c for w, c in fold(WORD_UPDATES, (3,)).items()}


def test_status_outputs(words):
    ok(ddcli(words, "ingest", "strings", str(SAMPLE / "strings_1.csv"), "--upper", "(1,0)"))
    recs = jsonl(ok(ddcli(words, "status", "--json")).stdout)
    by = {r["trace"]: r for r in recs}
    assert set(by) == {"words", "strings"} and all(r["kind"] == "trace" for r in recs)
    w = by["words"]
    assert (w["columns"], w["key"], w["d"], w["since"], w["upper"], w["rows"]) == \
        ("word:string", "word", 1, "0", "6", 11)
    assert w["layers"] >= 1 and w["bytes"] > 0 and w["holds"] == ""
    assert by["strings"]["upper"] == "(1,0)" and by["strings"]["d"] == 2
    rows = parse_csv(ok(ddcli(words, "status", "words", "-f", "csv")).stdout)
    assert [r["trace"] for r in rows] == ["words"]
    out = ok(ddcli(words, "status")).stdout
    assert "words" in out and "strings" in out and "upper" in out


def test_status_lists_pipelines(words):
    from storage.store import Store

    def change(s):  # a pipeline record as ops/run/run.py writes it
        s.pipelines["wordcount"] = {"file": "wordcount.py", "fingerprint": "0", "runs": 2, "frontier": [[6]],
                                    "d": 1, "inputs": {"words": {"seq": 1, "upper": [[6]]}},
                                    "outputs": ["counts"], "state": []}
        return s
    Store(words).commit(change)
    recs = jsonl(ok(ddcli(words, "status", "--json")).stdout)
    pipes = [r for r in recs if r["kind"] == "pipeline"]
    assert [(p["pipeline"], p["runs"]) for p in pipes] == [("wordcount", 2)]
    rows = parse_csv(ok(ddcli(words, "status", "--pipelines", "-f", "csv")).stdout)
    assert rows[0]["pipeline"] == "wordcount"


def test_outputs_to_a_file(words, tmp_path):
    out = tmp_path / "words.parquet"
    res = ok(ddcli(words, "query", "words", "--output", str(out)))
    assert res.stdout == ""
    t = pq.read_table(out)
    assert t.column_names == ["word", "count"] and t.num_rows == 4
    out = tmp_path / "words.csv"
    ok(ddcli(words, "history", "words", "-o", str(out)))
    assert out.read_text().startswith("word,time,diff\n")


def test_sql_sums_come_back_as_integers(words_anywhere):
    words = words_anywhere
    q = "SELECT word, SUM(diff) AS count FROM words GROUP BY ALL HAVING SUM(diff) <> 0 ORDER BY word"
    got = jsonl(ok(ddcli(words, "sql", q, "--json")).stdout)
    assert got[0] == {"word": "apple", "count": 1}


def test_an_unwritable_output_is_refused_before_any_work(store_dir, tmp_path):
    err = one_line_error(ddcli(store_dir, "ingest", "words", str(WORDS[0]), "-o", str(tmp_path / "no" / "x.json")))
    assert "--output" in err
    assert not os.path.exists(store_dir)


def test_compact_and_advance_report(words):
    rec = jsonl(ok(ddcli(words, "advance", "words", "--since", "2", "--json")).stdout)[0]
    assert rec["since"] == "2" and rec["since_before"] == "0" and not rec["noop"]
    rec = jsonl(ok(ddcli(words, "compact", "--full", "--grace", "0", "--json")).stdout)[0]
    assert rec["command"] == "compact" and rec["traces"] == 1
    # compaction changed nothing a reader can see beyond since
    for t in range(2, 6):
        got = parse_csv(ok(ddcli(words, "query", "words", "--as-of", str(t), "-f", "csv")).stdout)
        assert {r["word"]: int(r["count"]) for r in got} == {w[0]: c for w, c in fold(WORD_UPDATES, (t,)).items()}
    assert "nothing to do" in ok(ddcli(words, "advance", "words", "--since", "2")).stdout


# ---------------------------------------------------------------- nothing to do


def test_reingest_is_a_noop_that_says_so(words, digest):
    before = digest(words)
    res = ok(ddcli(words, "ingest", "words", str(WORDS[0])))
    assert res.stdout.startswith("nothing to do:") and "words_1.csv" in res.stdout and "no-op" in res.stdout
    assert res.stderr == ""
    rec = jsonl(ok(ddcli(words, "ingest", "words", str(WORDS[0]), "--json")).stdout)[0]
    assert rec["noop"] and rec["updates"] == 0 and rec["skipped"] == [str(WORDS[0])]
    res = ddcli(words, "ingest", "words", str(WORDS[0]), "--strict-noop")
    assert res.exit_code == 4
    res = ddcli(words, "ingest", "words", str(WORDS[0]), env={"DDCLI_STRICT_NOOP": "1"})
    assert res.exit_code == 4
    assert digest(words) == before


# ---------------------------------------------------------------- bad input


def _csv(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _dir(path: Path) -> str:
    path.mkdir(exist_ok=True)
    return str(path)


def bad_cases(tmp_path):
    """(name, args after the store exists, words in the error line)."""
    d = tmp_path
    return [
        ("wrong type", ["ingest", "nums", _csv(d, "wt.csv", "n,time\n1,6\nabc,7\n")],
         ["wt.csv", "row 2", "'abc'"]),
        ("missing column", ["ingest", "pairs", _csv(d, "mc.csv", "word,time,diff\nx,6,1\n")],
         ["mc.csv", "missing column 'n'"]),
        ("extra column", ["ingest", "words", _csv(d, "ec.csv", "word,colour,time\nx,red,6\n")],
         ["ec.csv", "unexpected column 'colour'"]),
        ("time not beyond upper", ["ingest", "words", _csv(d, "tu.csv", "word,time\nx,7\ny,2\n")],
         ["tu.csv", "row 2", "time 2", "not beyond the upper 6"]),
        ("time beyond new upper", ["ingest", "words", _csv(d, "tn.csv", "word,time\nx,7\ny,9\n"), "--upper", "8"],
         ["tn.csv", "row 2", "time 9", "beyond the new upper 8"]),
        ("diff not an integer", ["ingest", "words", _csv(d, "df.csv", "word,time,diff\nx,7,1\ny,7,1.5\n")],
         ["df.csv", "row 2", "'1.5'", "not an integer"]),
        ("empty file", ["ingest", "words", _csv(d, "empty.csv", "")], ["empty.csv", "empty file"]),
        ("header only", ["ingest", "words", _csv(d, "ho.csv", "word,time\n")], ["ho.csv", "no rows"]),
        ("unreadable file", ["ingest", "words", str(d / "nope.csv")], ["nope.csv", "cannot read"]),
        ("directory", ["ingest", "words", _dir(d / "dir.csv")], ["dir.csv", "cannot read"]),
        ("bad trace name", ["ingest", "bad-name", str(WORDS[0])], ["bad trace name 'bad-name'"]),
        ("path as trace name", ["ingest", "../x", str(WORDS[0])], ["bad trace name '../x'"]),
        ("unknown trace query", ["query", "nope"], ["unknown trace 'nope'"]),
        ("unknown trace history", ["history", "nope"], ["unknown trace 'nope'"]),
        ("unknown trace advance", ["advance", "nope", "--since", "1"], ["unknown trace 'nope'"]),
        ("unknown trace compact", ["compact", "nope"], ["unknown trace 'nope'"]),
        ("unknown trace status", ["status", "nope"], ["unknown trace 'nope'"]),
        ("bad time", ["query", "words", "--as-of", "(1,"], ["bad time '(1,'"]),
        ("wrong dimension", ["query", "words", "--as-of", "(1,2)"], ["1 coordinate"]),
        ("bad --time", ["ingest", "words", _csv(d, "nt.csv", "word\nx\n"), "--time", "soon"], ["bad time 'soon'"]),
        ("bad frontier", ["advance", "words", "--upper", "(1,2"], ["bad"]),
        ("upper backwards", ["advance", "words", "--upper", "3"], ["behind", "only move forward"]),
        ("bad where", ["query", "words", "--where", "nope = 1"], ["--where", "nope"]),
        ("bad sql", ["sql", "SELEC 1"], ["sql:"]),
        ("bad format", ["query", "words", "--format", "xml"], ["--format"]),
        ("json and csv", ["query", "words", "--json", "--format", "csv"], ["--json"]),
        ("unknown option", ["query", "words", "--bogus"], ["--bogus"]),
        ("missing argument", ["ingest", "words"], ["Missing argument"]),
        ("key not a column", ["ingest", "fresh", str(WORDS[0]), "--key", "nope"], ["key column 'nope'"]),
        ("different key", ["ingest", "words", _csv(d, "dk.csv", "word,time\nq,8\n"), "--key", "time"], ["keyed by word"]),
        ("negative time", ["ingest", "words", _csv(d, "neg.csv", "word,time\nx,-1\n")], ["neg.csv", "row 1", "-1"]),
        ("nothing to advance", ["advance", "words"], ["--upper and/or --since"]),
    ]


@pytest.fixture
def prepared(words, tmp_path):
    ok(ddcli(words, "ingest", "nums", _csv(tmp_path, "nums.csv", "n,time\n1,5\n")))
    ok(ddcli(words, "ingest", "pairs", _csv(tmp_path, "pairs.csv", "word,n,time\na,1,5\n")))
    return words


def test_every_bad_input_is_one_line_exit_2_and_changes_nothing(prepared, tmp_path, digest):
    store = prepared
    for name, args, words_in_error in bad_cases(tmp_path):
        before = digest(store)
        res = ddcli(store, *args)
        try:
            err = one_line_error(res, 2)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
        for w in words_in_error:
            assert w in err, f"{name}: {w!r} not in {err!r}"
        assert digest(store) == before, f"{name}: the store changed"


def test_a_bad_first_ingest_does_not_create_the_store(store_dir, tmp_path):
    bad = _csv(tmp_path, "bad.csv", "word,time,diff\nx,1,1\ny,2,oops\n")
    err = one_line_error(ddcli(store_dir, "ingest", "words", str(WORDS[0]), bad))
    assert "bad.csv" in err and "row 2" in err and "'oops'" in err
    assert not os.path.exists(store_dir)


CORPUS = json.loads((BAD / "cases.json").read_text()) if (BAD / "cases.json").exists() else {}


@pytest.mark.parametrize("name", sorted(n for n, c in CORPUS.items() if not set(c) - {"expect", "time"}))
def test_bad_input_corpus_through_the_cli(store_dir, name):
    """Every file of tests/data/bad_inputs that needs no existing trace: exit 2, one line
    naming the file, and no store created."""
    case = CORPUS[name]
    args = ["ingest", "t", str(BAD / name)]
    if "time" in case:
        t = case["time"]
        args += ["--time", str(t[0]) if len(t) == 1 else "(" + ",".join(map(str, t)) + ")"]
    err = one_line_error(ddcli(store_dir, *args))
    assert name in err and case["expect"] in err
    assert not os.path.exists(store_dir)


# ---------------------------------------------------------------- exit codes


def test_conflict_is_exit_3_and_internal_error_exit_1(words, monkeypatch):
    from storage.errors import Conflict
    from storage.sql import query as Q
    from storage.store import Store

    def conflict(*a, **k):
        raise Conflict("trace 'words' changed while ingesting")
    monkeypatch.setattr(Store, "ingest", conflict)
    err = one_line_error(ddcli(words, "ingest", "words", str(WORDS[0])), 3)
    assert "safe to retry" in err

    def boom(*a, **k):
        raise RuntimeError("kaput")
    monkeypatch.setattr(Q, "as_of", boom)
    err = one_line_error(ddcli(words, "query", "words"), 1)
    assert "internal error: RuntimeError: kaput" in err and "DDCLI_DEBUG=1" in err
    res = ddcli(words, "query", "words", env={"DDCLI_DEBUG": "1"})
    assert res.exit_code == 1 and "Traceback" in res.stderr and "kaput" in res.stderr


def test_help_of_every_command():
    from typer.main import get_command
    root = get_command(app)
    paths = [[]]
    for name, cmd in root.commands.items():
        paths.append([name])
        for sub in getattr(cmd, "commands", {}):
            paths.append([name, sub])
    assert {"ingest", "advance", "compact", "query", "history", "sql", "status", "bench"} <= set(root.commands)
    for p in paths:
        res = runner.invoke(app, p + ["--help"])
        assert res.exit_code == 0, (p, res.stdout, res.stderr)
        assert "Usage" in res.stdout
    text = " ".join(runner.invoke(app, ["--help"]).stdout.split())
    for code in ["0 success", "1 internal error", "2 user error", "3 conflict", "safe to retry", "4 nothing to do"]:
        assert code in text



def _commands(cmd, path=()):
    yield list(path), cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_help_shows_every_help_text_as_written():
    """The help renderer reads help texts as Markdown: a glob's ``*`` must not become emphasis.
    Every option's and argument's help appears whole in its command's ``--help`` (backticks,
    Markdown's code marks, aside), and every word of a command's text holding a ``*`` too."""
    from typer.main import get_command

    def words(text):
        return " ".join(text.replace("`", "").split())

    for path, cmd in _commands(get_command(app)):
        shown = words(ok(runner.invoke(app, path + ["--help"], env={"COLUMNS": "4000"})).stdout.replace("\u2502", " "))
        for param in cmd.params:
            if getattr(param, "help", None):
                assert words(param.help) in shown, (path, param.name, param.help)
        for word in (cmd.help or "").split():
            if "*" in word:
                assert words(word).strip(".,;:()") in shown, (path, word)
    ingest = ok(runner.invoke(app, ["ingest", "--help"], env={"COLUMNS": "4000"})).stdout
    assert "('data/*.csv')" in ingest and "('s3://lake/raw/day=*/*.csv.gz')" in ingest

def _run(args, store, env=None, **kw):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DDCLI_")}
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "ddcli", *args, "--store", store], capture_output=True,
                          text=True, env=e, cwd=REPO, timeout=120, **kw)


def test_real_process_exit_codes_and_quiet_stderr(store_dir):
    res = _run(["ingest", "words", str(WORDS[0])], store_dir)
    assert res.returncode == 0 and res.stderr == "" and "ingested 6 updates" in res.stdout
    res = _run(["query", "nope"], store_dir)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error: unknown trace 'nope'") and res.stderr.count("\n") == 1
    res = _run(["ingest", "words", str(WORDS[0]), "--strict-noop"], store_dir)
    assert res.returncode == 4 and res.stderr == ""
    res = _run(["query", "words", "-f", "jsonl"], store_dir)
    assert res.returncode == 0 and res.stderr == ""
    assert len(jsonl(res.stdout)) == 3


def test_importing_the_cli_and_running_a_store_command_never_imports_pyspark(words):
    code = ("import sys\n"
            "from typer.testing import CliRunner\n"
            "from ddcli.cli import app\n"
            "assert 'pyarrow' not in sys.modules and 'duckdb' not in sys.modules, 'heavy imports at start'\n"
            f"r = CliRunner().invoke(app, ['status', '--store', {words!r}, '--json'])\n"
            "assert r.exit_code == 0, r.stdout\n"
            "r = CliRunner().invoke(app, ['query', 'words', '--store', " + repr(words) + "])\n"
            "assert r.exit_code == 0, r.stdout\n"
            "assert not any(m == 'pyspark' or m.startswith('pyspark.') for m in sys.modules), 'pyspark imported'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDCLI_")}
    env["PYTHONPATH"] = REPO
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr


# ---------------------------------------------------------------- bench


def test_bench_priority_is_a_command_that_names_a_bad_variant_before_any_work(tmp_path):
    out = tmp_path / "p.json"
    err = one_line_error(runner.invoke(app, ["bench", "priority", "--variants", "cc_plain,nope", "--out", str(out)]))
    assert "--variants" in err and "'nope'" in err and "cc_prioritized" in err
    assert not out.exists()
    help_ = ok(runner.invoke(app, ["bench", "--help"])).stdout
    assert "priority" in help_


def test_bench_storage_smoke(tmp_path):
    out = tmp_path / "bench.json"
    res = ok(runner.invoke(app, ["bench", "storage", "--updates", "3000", "--keys", "300", "--small-ingests", "20",
                                 "--small-size", "50", "--repeat", "1", "--meta-ingests", "25", "--delta-ingests", "6",
                                 "--out", str(out)]))
    assert "updates/s" in res.stdout and "commit latency" in res.stdout
    fig = json.loads(out.read_text())
    assert fig["big_ingest"]["updates"] == 3000 and fig["big_ingest"]["updates_per_s"] > 0
    assert fig["small_ingests"]["ingests"] == 20 and fig["small_ingests"]["updates_per_s"] > 0
    # geometric merging: O(log n) layers after n small ingests
    assert fig["layers"]["after_small_ingests"] <= 2 * fig["layers"]["log2_ingests"] + 2
    assert fig["bytes"]["trace_layers"] > 0 and fig["bytes"]["consolidated"] > 0
    assert fig["rows"]["trace"] >= fig["rows"]["consolidated"]
    for q in fig["query"].values():
        assert q["same_answer"] and q["store_s"] > 0 and q["duckdb_consolidated_s"] > 0
    meta = fig["metadata"]
    assert meta["ingests"] == 25 and meta["late"]["log_bytes"] > 0 and meta["latency_ratio"] > 0
    delta = fig["delta"]
    assert delta["ingests"] == 6 and delta["latency_ratio"] > 0 and delta["delta_versions"] >= 2
    assert "with Delta logs" in res.stdout
    rec = jsonl(ok(runner.invoke(app, ["bench", "storage", "--updates", "500", "--keys", "50",
                                       "--small-ingests", "2", "--small-size", "10", "--repeat", "1",
                                       "--meta-ingests", "0", "--delta-ingests", "0", "--json"])).stdout)[0]
    assert rec["benchmark"] == "storage"
