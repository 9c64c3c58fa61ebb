"""Invoking ddcli's commands in-process from tests, shared by the CLI-level test files."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ddcli.cli import app

runner = CliRunner()


def cli(store: str, *args: str):
    """``ddcli ARGS --store STORE``, in this process."""
    return runner.invoke(app, [*args, "--store", store])


def ok(res):
    assert res.exit_code == 0, f"exit {res.exit_code}: {res.stderr}{res.stdout}"
    return res


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def write(path, text: str) -> str:
    """Write ``text`` to ``path`` (a str or a Path); returns it as a str."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return str(path)
