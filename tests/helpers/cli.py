"""Invoking ddcli's commands in-process from tests, and the sample word files they ingest,
shared by the CLI-level test files."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path

from typer.testing import CliRunner

from ddcli.cli import app
from tests.helpers import REPO

SAMPLE = Path(REPO) / "sample_data"

runner = CliRunner()


def ddcli(store: str, *args: str, env: dict | None = None):
    """``ddcli ARGS --store STORE``, in this process (``bench`` commands take no store)."""
    return runner.invoke(app, list(args) + ["--store", store] if args and args[0] != "bench" else list(args),
                         env=env)


cli = ddcli


def ok(res):
    assert res.exit_code == 0, f"exit {res.exit_code}: {res.stderr or ''}{res.stdout}"
    return res


PROGRESS = "\u00b7 "  # how a progress line starts on stderr when it is not a terminal (ddcli/run_display.py)


def error_line(stderr: str) -> str:
    """The one ``error:`` line of ``stderr``, after the progress lines a run printed before it
    (and nothing else: no second line, no traceback)."""
    assert stderr.endswith("\n") and "Traceback" not in stderr, repr(stderr)
    lines = stderr.splitlines(keepends=True)
    progress = 0
    while progress < len(lines) and lines[progress].startswith(PROGRESS):
        progress += 1
    rest = lines[progress:]
    assert len(rest) == 1 and rest[0].startswith("error: "), repr(stderr)
    return rest[0]


def one_line_error(result, code: int = 2) -> str:
    """The one ``error:`` line a failed command printed (exit ``code``, no traceback)."""
    assert result.exit_code == code, f"exit {result.exit_code}, stdout {result.stdout!r}, stderr {result.stderr!r}"
    return error_line(result.stderr)


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def parse_csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def write(path, text: str) -> str:
    """Write ``text`` to ``path`` (a str or a Path); returns it as a str."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return str(path)


def fold(updates, t) -> dict:
    """A plain reference: the collection at ``t`` of ``[(row, time, diff)]``."""
    acc: Counter = Counter()
    for data, s, diff in updates:
        if all(a <= b for a, b in zip(s, t)):
            acc[data] += diff
    return {k: v for k, v in acc.items() if v}


def read_csv_updates(path: Path, d: int) -> list:
    """An update file's rows as ``[(row, time, diff)]``, read with the csv module."""
    rows = parse_csv(path.read_text())
    tcols = ["time"] if d == 1 else [f"time_{i}" for i in range(d)]
    data_cols = [c for c in rows[0] if c not in tcols and c != "diff"]
    return [(tuple(r[c] for c in data_cols), tuple(int(r[c]) for c in tcols), int(r.get("diff", 1)))
            for r in rows]


WORDS = [SAMPLE / "words_1.csv", SAMPLE / "words_2.csv"]
WORD_UPDATES = read_csv_updates(WORDS[0], 1) + read_csv_updates(WORDS[1], 1)
