"""The settings a command runs with: ``ddcli.toml`` (or ``--config PATH`` / ``$DDCLI_CONFIG``)
put into the environment, under what the environment already sets.

At the start of every command (ddcli/root.py) the file is read and every key and value
checked (storage/settings.py), the environment's own ``DDCLI_*`` values are checked too,
and each setting of the file goes into ``os.environ`` where the environment does not set
it. Everything that reads a setting then sees it — options with an ``envvar``, the library,
Spark's driver and Python workers — and the precedence is the one of the registry: an
option, then the environment, then the file, then the default. The variables a command
changed are put back when it ends (:data:`ddcli.app.restore_env`), so a command run in
the same process as another (tests, a notebook) leaves it no setting of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ddcli.app import restore_env
from storage.settings import BY_KEY, SETTINGS, SettingError, check_environment, config_path, read_config


@dataclass
class Loaded:
    """Where the running command's settings came from."""

    path: str | None = None  # the configuration file read (None: none)
    from_file: set[str] = field(default_factory=set)  # variables set from the file
    from_option: set[str] = field(default_factory=set)  # variables set by ddcli's own options


loaded = Loaded()


def _put(name: str, value: str) -> None:
    if name not in restore_env:
        restore_env[name] = os.environ.get(name)
    os.environ[name] = value


def apply(explicit: str | None, options: dict[str, str] | None = None) -> Loaded:
    """Check the environment's settings and the configuration file's, and put the file's
    settings into the environment where it does not set them; ``options`` (setting key ->
    value, from ``ddcli --store PATH``) go in over both. Changes nothing when any is wrong
    (a :class:`storage.settings.SettingError`)."""
    path = config_path(explicit)
    from_file = read_config(path) if path else {}
    from_env = check_environment()
    given = {}
    for key, raw in (options or {}).items():
        try:
            given[BY_KEY[key].env] = BY_KEY[key].check(raw)
        except ValueError as e:
            raise SettingError(f"--{key.replace('_', '-')} {raw!r} {e}") from None
    for name, text in from_env.items():  # the canonical text the code reads, e.g. true -> 1
        if os.environ[name] != text:
            _put(name, text)
    loaded.path, loaded.from_file, loaded.from_option = (os.path.abspath(path) if path else None), set(), set()
    for name, text in from_file.items():
        if name not in from_env and name not in given:
            _put(name, text)
            loaded.from_file.add(name)
    for name, text in given.items():
        _put(name, text)
        loaded.from_option.add(name)
    return loaded


def effective(options: dict[str, str | None] | None = None) -> list[dict]:
    """Every setting's value and where it came from: ``option`` (``options``: variable ->
    the value a command-line option gave), ``env``, ``file`` or ``default``."""
    rows = []
    for s in SETTINGS:
        given = (options or {}).get(s.env)
        value = os.environ.get(s.env) or None
        if given is not None:
            value, source = given, "option"
        elif value is not None:
            source = "option" if s.env in loaded.from_option else "file" if s.env in loaded.from_file else "env"
        else:
            value, source = s.default, "default"
        rows.append({"key": s.key, "env": s.env, "value": value, "source": source,
                     "file": loaded.path if source == "file" else None, "help": s.help})
    return rows
