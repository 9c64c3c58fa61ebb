"""Spark's processes die with the ddcli process that started them.

The JVM PySpark starts exits when its stdin closes, which a killed ddcli closes too, but
it first runs its shutdown hooks, which wait for the tasks in flight (a task blocked on an
object store that stopped answering, say), and its Python workers wait for it. So every
session started here gets a watcher: a small process that holds a pipe from ddcli and,
once the pipe closes (ddcli exited or was killed, even with SIGKILL), gives the JVM a
moment to exit on its own, then kills it and every process it started.
"""

from __future__ import annotations

import subprocess
import sys

GRACE_SECONDS = 3.0  # what a JVM gets to exit by itself (a normal exit takes about a second)

_WATCHER = r"""
import os, select, signal, sys, time

def stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), fields[19]  # parent pid, start time (same pid, same process)
    except (OSError, IndexError, ValueError):
        return None

def tree(root, known):
    # every descendant of root, with its start time, added to known
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = stat(int(name))
            if s is not None:
                children.setdefault(s[0], []).append((int(name), s[1]))
    todo, seen = [root], {root}
    while todo:
        for pid, start in children.get(todo.pop(), []):
            if pid not in seen:
                seen.add(pid)
                known.setdefault(pid, start)
                todo.append(pid)

root, grace = int(sys.argv[1]), float(sys.argv[2])
root_start = stat(root)
known = {root: root_start[1]} if root_start else {}
while True:  # until ddcli's end closes the pipe; the tree is followed meanwhile (an orphan has no parent)
    ready, _, _ = select.select([sys.stdin], [], [], 1.0)
    if ready and not os.read(sys.stdin.fileno(), 1):
        break
    tree(root, known)
end = time.monotonic() + grace
while time.monotonic() < end:
    tree(root, known)
    s = stat(root)
    if s is None or s[1] != known.get(root):
        break
    time.sleep(0.1)
tree(root, known)
for pid, start in known.items():
    s = stat(pid)
    if s is not None and s[1] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


_watchers: list[subprocess.Popen] = []  # kept: collecting one would close its pipe


def watch(pid: int) -> None:
    """Start the watcher of process ``pid`` (the JVM) and its descendants (Linux: it
    follows processes through ``/proc``)."""
    if not sys.platform.startswith("linux"):
        return
    # the pipe's write end stays in this process only (pipes are not inherited by later
    # children): it closes when this process ends, however it ends
    _watchers.append(subprocess.Popen([sys.executable, "-c", _WATCHER, str(pid), str(GRACE_SECONDS)],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
