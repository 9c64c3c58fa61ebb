"""The ``ddcli`` executable (and ``python -m ddcli``): the warm engine first, then the app.

A command the user's service runs (ddcli/service/client.py) is handed to it before anything
else is imported — the command line's own modules, Typer, Rich — so a warm ``ddcli run``
pays for a Python start and a socket, not for a JVM. Every other command, and a command the
service declines, runs in this process (ddcli/cli.py).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    from ddcli.service.client import forward
    code = forward(sys.argv[1:])
    if code is not None:
        # the service ran the command: this process holds nothing to tear down, and the
        # interpreter's finalization would cost its client some 8 ms
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: the exit code still tells
                pass
        os._exit(code)
    from ddcli.cli import app
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
