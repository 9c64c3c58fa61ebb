"""Whether a process of this machine still runs.

A lease, a lock or a service names the process that holds it; once that process is gone,
the next command may take over. A killed process whose parent has not collected it yet (a
zombie, as under a container's first process that collects nothing) holds nothing: it is
gone too.
"""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux), or it ended just now: kill(0) said it exists
    return state != b"Z"
