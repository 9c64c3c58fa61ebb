"""Answers that look complete but are not.

``query --as-of`` a time beyond the upper answers with a warning on stderr (an error
with ``--strict``); SQL gets ``trace_at('name', t)``, which equals a plain fold of the
updates at every time beyond the since and refuses times before it.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter

from tests.helpers.cli import cli, ok

WORDS_1 = "word,time,diff\napple,1,1\ncherry,1,1\nbanana,2,1\napple,3,-1\n"
WORDS_2 = "word,time,diff\ncherry,4,1\ndate,4,1\nbanana,5,-1\n"
STRINGS = "s,time_0,time_1,diff\na,0,0,1\nb,0,1,1\nc,1,0,1\na,1,1,-1\n"


def fold(texts: list[str], t: tuple) -> dict:
    """The collection at ``t``: the sum of the updates at times <= t (product order)."""
    acc: Counter = Counter()
    for text in texts:
        for r in csv.DictReader(io.StringIO(text)):
            times = tuple(int(r[c]) for c in r if c.startswith("time"))
            if all(a <= b for a, b in zip(times, t)):
                acc[r.get("word") or r.get("s")] += int(r["diff"])
    return {k: v for k, v in acc.items() if v}


def rows(res, col: str) -> dict:
    return {r[col]: r["count"] for r in (json.loads(x) for x in res.stdout.splitlines() if x.strip())}


def words_store(tmp_path, location: str | None = None) -> str:
    s = location or str(tmp_path / "store")
    for i, text in enumerate([WORDS_1, WORDS_2]):
        (tmp_path / f"w{i}.csv").write_text(text)
        ok(cli(s, "ingest", "words", str(tmp_path / f"w{i}.csv")))
    return s


def test_query_beyond_the_upper_answers_with_a_warning(tmp_path):
    s = words_store(tmp_path)  # upper 6
    res = ok(cli(s, "query", "words", "--as-of", "9", "--json"))
    assert rows(res, "word") == fold([WORDS_1, WORDS_2], (9,))
    assert res.stderr.startswith("warning: ") and res.stderr.count("\n") == 1
    assert "not complete yet" in res.stderr and "upper 6" in res.stderr
    complete = ok(cli(s, "query", "words", "--as-of", "5", "--json"))
    assert complete.stderr == ""


def test_query_beyond_the_upper_with_strict_is_an_error(tmp_path):
    s = words_store(tmp_path)
    res = cli(s, "query", "words", "--as-of", "6", "--strict")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("error: ") and "not complete yet" in res.stderr
    ok(cli(s, "query", "words", "--as-of", "5", "--strict"))


def test_trace_at_is_the_collection_at_every_time_beyond_the_since(tmp_path, store_location):
    s = words_store(tmp_path, store_location)
    ok(cli(s, "advance", "words", "--since", "3"))
    ok(cli(s, "compact", "--full", "--grace", "0"))
    for t in range(3, 7):
        res = ok(cli(s, "sql", f"SELECT * FROM trace_at('words', {t})", "--json"))
        assert rows(res, "word") == fold([WORDS_1, WORDS_2], (t,)), t


def test_trace_at_refuses_a_time_before_the_since_where_the_plain_view_is_silently_wrong(tmp_path, store_location):
    s = words_store(tmp_path, store_location)
    ok(cli(s, "advance", "words", "--since", "3"))
    ok(cli(s, "compact", "--full", "--grace", "0"))
    plain = ok(cli(s, "sql", "SELECT word, SUM(diff) AS count FROM words WHERE time <= 1 GROUP BY word "
                             "HAVING SUM(diff) <> 0", "--json"))
    assert rows(plain, "word") != fold([WORDS_1, WORDS_2], (1,))  # why trace_at exists
    res = cli(s, "sql", "SELECT * FROM trace_at('words', 1)")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "time 1 is not beyond the since 3 of trace words" in res.stderr


def test_trace_at_takes_tuple_times_as_text(tmp_path, store_location):
    s = store_location
    (tmp_path / "s.csv").write_text(STRINGS)
    ok(cli(s, "ingest", "strings", str(tmp_path / "s.csv"), "--upper", "(2,2)"))
    for t in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        res = ok(cli(s, "sql", f"SELECT * FROM trace_at('strings', '({t[0]},{t[1]})')", "--json"))
        assert rows(res, "s") == fold([STRINGS], t), t
    res = cli(s, "sql", "SELECT * FROM trace_at('strings', 1)")
    assert res.exit_code == 2 and "has 1 coordinate(s); trace strings has 2" in res.stderr
