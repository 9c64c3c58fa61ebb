"""What a benchmark's work costs this machine: the CPU seconds and the peak resident memory
of this process and every process it started (a ``ddcli run``, the JVM, its Python workers).

On a machine shared with other work wall times vary with the load; CPU seconds of the
process tree vary much less, so the benchmarks report both. Everything is read from
``/proc`` (Linux), sampled every ``interval`` seconds: a process's own ``utime + stime``
as last seen (a process that exits without being waited for, as a JVM whose driver ended
does, leaves its seconds in no parent's count); what a process did after its last sample
is missed, at most ``interval`` seconds of it.
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


def descendants(root: int | None = None) -> list[int]:
    """Every live process below ``root`` (default: this one)."""
    kids, out = _children(), []
    todo = list(kids.get(os.getpid() if root is None else root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def descendants_rss() -> int:
    """Resident bytes of every process below this one."""
    return sum(rss(pid) for pid in descendants())


def tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and every process below it (a detached service's
    JVM and Python workers, say, which are no descendants of the benchmark)."""
    return rss(root) + sum(rss(pid) for pid in descendants(root))


def rss(pid: int | str = "self") -> int:
    """Resident bytes of one process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cpu_seconds(pid: int) -> float | None:
    """A process's own CPU seconds (``utime + stime``), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def _own_cpu_seconds() -> float:
    own = os.times()
    return own.user + own.system


class Usage:
    """Wall seconds, CPU seconds (this process's and its descendants') and peak resident
    memory of its descendants over a ``with`` block, sampled every ``interval`` seconds.
    Memory leaves this process out: a benchmark's own data is no part of what it measures
    (run a ``ddcli run`` as a child to measure all of it); ``own_growth`` is how far this
    process's resident memory grew over its size at the start (a run's driver in it)."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self.own_growth, self._own0 = 0, 0
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.wall = self.cpu = 0.0
        self._seen: dict[int, float] = {}  # descendant -> its CPU seconds when last seen
        self._before: dict[int, float] = {}  # descendant -> its CPU seconds at the start

    def _sample(self) -> None:
        for pid in descendants():
            cpu = _cpu_seconds(pid)
            if cpu is not None:
                self._seen[pid] = max(cpu, self._seen.get(pid, 0.0))
        self.peak = max(self.peak, descendants_rss())
        self.own_growth = max(self.own_growth, rss() - self._own0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "Usage":
        self._before = {pid: c for pid in descendants() if (c := _cpu_seconds(pid)) is not None}
        self._own0 = rss()
        self._cpu0, self._wall0 = _own_cpu_seconds(), _time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = _time.perf_counter() - self._wall0
        self._stop.set()
        self._thread.join()
        self._sample()
        self.cpu = _own_cpu_seconds() - self._cpu0 + sum(
            c - self._before.get(pid, 0.0) for pid, c in self._seen.items())
