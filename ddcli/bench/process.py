"""What a benchmark's work costs this machine: the CPU seconds and the peak resident memory
of this process and every process it started (the JVM and its Python workers).

On a machine shared with other work wall times vary with the load; CPU seconds of the
process tree vary much less, so the benchmarks report both. Everything is read from
``/proc`` (Linux): per process ``utime + stime`` and, for the children it has waited for
(Spark's Python workers, forked and reaped by their daemon), ``cutime + cstime``.
"""

from __future__ import annotations

import os
import threading
import time as _time

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(pid))
    return kids


def descendants() -> list[int]:
    """Every live process below this one."""
    kids, out = _children(), []
    todo = list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def descendants_rss() -> int:
    """Resident bytes of every process below this one."""
    total = 0
    for pid in descendants():
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and every live process below it, with the
    children each has waited for (a process that ended and was reaped is counted in its
    parent; one ended between two readings and not yet reaped is missed)."""
    own = os.times()
    total = own.user + own.system + own.children_user + own.children_system
    for pid in descendants():
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            pass
    return total


class Usage:
    """Wall seconds, CPU seconds of the process tree and peak resident memory of this
    process's descendants (sampled every ``interval`` seconds) over a ``with`` block."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.wall = self.cpu = 0.0

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, descendants_rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> "Usage":
        self._cpu0, self._wall0 = tree_cpu_seconds(), _time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = _time.perf_counter() - self._wall0
        self.cpu = tree_cpu_seconds() - self._cpu0
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, descendants_rss())

