"""``ddcli``'s own options, before the command: ``ddcli --store PATH CMD …`` works for every
command that takes ``--store``; the command's own ``--store``, later on the line, wins (as
in git); ``ddcli config`` says the store came from an option; the warm engine's client
finds the command behind the options' values."""

from __future__ import annotations

import pytest

from tests.helpers.cli import WORDS, jsonl, ok, one_line_error, runner

from ddcli.cli import app


def _commands(cmd, path=()):
    yield list(path), cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_every_command_that_takes_a_store_reads_the_one_before_it():
    """``ddcli --store`` reaches a command as ``$DDCLI_STORE``: every ``--store`` reads it."""
    from typer.main import get_command
    stores = [(path, p) for path, cmd in _commands(get_command(app)) if path
              for p in cmd.params if p.name == "store"]
    assert len(stores) > 10, stores
    for path, p in stores:
        assert p.envvar == "DDCLI_STORE" and p.opts == ["--store"], path


def test_the_store_before_the_command_and_the_commands_own_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DDCLI_STORE", raising=False)
    monkeypatch.delenv("DDCLI_CONFIG", raising=False)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ok(runner.invoke(app, ["--store", a, "ingest", "words", str(WORDS[0])]))
    ok(runner.invoke(app, ["--store", b, "ingest", "other", str(WORDS[1])]))
    assert not (tmp_path / "ddstore").exists()

    def traces(*args):
        return sorted(r["trace"] for r in jsonl(ok(runner.invoke(app, [*args, "--json"])).stdout))

    assert traces("--store", a, "status") == ["words"] == traces("status", "--store", a)
    assert traces("--store", b, "status") == ["other"]
    assert traces("--store", a, "status", "--store", b) == ["other"]  # the command's own wins
    res = runner.invoke(app, ["--store", b, "status", "--json"], env={"DDCLI_STORE": a})
    assert sorted(r["trace"] for r in jsonl(ok(res).stdout)) == ["other"]  # an option beats the environment

    (tmp_path / "ddcli.toml").write_text(f'store = "{a}"\n')
    assert traces("--store", b, "status") == ["other"]  # and the file
    rows = {r["key"]: r for r in jsonl(ok(runner.invoke(app, ["--store", b, "config", "--json"])).stdout)}
    assert rows["store"]["value"] == b and rows["store"]["source"] == "option"
    rows = {r["key"]: r for r in jsonl(ok(runner.invoke(app, ["config", "--json"])).stdout)}
    assert rows["store"]["source"] == "file"  # the next command in this process: nothing left behind

    err = one_line_error(runner.invoke(app, ["--store", "a\nb", "status"]))
    assert "--store" in err and "one line" in err


@pytest.mark.parametrize("argv, command", [
    (["--store", "s", "run", "p.py"], "run"),
    (["--store=s", "verify", "p.py"], "verify"),
    (["--config", "c.toml", "--store", "s", "run", "p.py"], "run"),
    (["--store", "run", "status"], None),  # a store named run
    (["--store", "s", "run", "p.py", "--help"], None),
    (["run", "p.py", "--store", "s"], "run"),
])
def test_the_warm_engines_client_finds_the_command_behind_ddclis_options(argv, command):
    from ddcli.service.identity import command_of
    assert command_of(argv) == command


def test_the_warm_engines_client_reads_the_values_of_ddclis_options():
    from ddcli.service.identity import root_options
    assert root_options(["--config", "c.toml", "--store=s", "run", "p.py", "--store", "t"]) == (
        {"--config": "c.toml", "--store": "s"}, "run")
    assert root_options(["--config=c.toml", "verify"]) == ({"--config": "c.toml"}, "verify")
    assert root_options(["--config"]) == ({"--config": ""}, None)


def test_the_client_knows_every_option_of_ddcli_that_takes_a_value():
    from typer.main import get_command

    from ddcli.service.identity import ROOT_VALUE_OPTIONS
    taking = {o for p in get_command(app).params if not getattr(p, "is_flag", False) for o in p.opts}
    assert taking == set(ROOT_VALUE_OPTIONS)
