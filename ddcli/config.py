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
from storage.settings import SETTINGS, check_environment, config_path, read_config


@dataclass
class Loaded:
    """Where the running command's settings came from."""

    path: str | None = None  # the configuration file read (None: none)
    from_file: set[str] = field(default_factory=set)  # variables set from the file


loaded = Loaded()


def _put(name: str, value: str) -> None:
    if name not in restore_env:
        restore_env[name] = os.environ.get(name)
    os.environ[name] = value


def apply(explicit: str | None) -> Loaded:
    """Check the environment's settings and the configuration file's, and put the file's
    settings into the environment where it does not set them. Changes nothing when either
    is wrong (a :class:`storage.settings.SettingError`)."""
    path = config_path(explicit)
    from_file = read_config(path) if path else {}
    from_env = check_environment()
    for name, text in from_env.items():  # the canonical text the code reads, e.g. true -> 1
        if os.environ[name] != text:
            _put(name, text)
    loaded.path, loaded.from_file = (os.path.abspath(path) if path else None), set()
    for name, text in from_file.items():
        if name not in from_env:
            _put(name, text)
            loaded.from_file.add(name)
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
            source = "file" if s.env in loaded.from_file else "env"
        else:
            value, source = s.default, "default"
        rows.append({"key": s.key, "env": s.env, "value": value, "source": source,
                     "file": loaded.path if source == "file" else None, "help": s.help})
    return rows
