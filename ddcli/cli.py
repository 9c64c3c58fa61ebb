"""The ``ddcli`` command line (``ddcli`` / ``python -m ddcli``).

The app and its exit codes are in ``ddcli/app.py``, the options the commands share in
``ddcli/options.py``. The commands live by family in ``ddcli/commands/``: ``store``
(ingest, advance, compact), ``read`` (query, history, sql, status), ``feeds`` (changes),
``lifecycle`` (pipelines, drop), ``check``, ``run`` (run, verify), ``inspect`` (explain, runs,
report), ``config``, ``bench`` and ``help``. Each parses its
arguments, calls one library function and renders the result (``ddcli/render.py``);
everything a command does is callable from Python without it. Importing this module
registers every command and imports neither pyspark nor pyarrow nor DuckDB.
"""

from __future__ import annotations

from ddcli.app import app
from ddcli import root  # noqa: F401  (--config, --version: before every command)

# the commands, in the order `ddcli --help` lists them (importing one registers it)
# isort: off
from ddcli.commands import store  # noqa: F401  (ingest, advance, compact)
from ddcli.commands import read  # noqa: F401  (query, history, sql, status)
from ddcli.commands import feeds  # noqa: F401  (changes)
from ddcli.commands import publish  # noqa: F401  (publish)
from ddcli.commands import lifecycle  # noqa: F401  (pipelines, drop)
from ddcli.commands import check  # noqa: F401  (check)
from ddcli.commands import run  # noqa: F401  (run, verify)
from ddcli.commands import inspect  # noqa: F401  (explain, runs, report)
from ddcli.commands import bench  # noqa: F401  (bench storage, incremental, reach, reduce, priority)
from ddcli.commands import help  # noqa: F401  (help operators)
from ddcli.commands import config  # noqa: F401  (config)
from ddcli.commands import service  # noqa: F401  (service status, stop)
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    """The app as an executable, for installs whose ``ddcli`` script still names this
    function (the script is ``ddcli.launch:main``): the warm engine first, as there."""
    import sys

    from ddcli.service.client import forward
    code = forward(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
