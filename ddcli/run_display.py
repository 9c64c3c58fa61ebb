"""What ``ddcli run`` shows while it works.

On a terminal: a live Rich display, one row for the pipeline and one for each step under
way (starting Spark, evaluating, a loop's round, writing a trace), each with its elapsed
time and a bar of the Spark tasks of its jobs done so far; the run's progress lines
(ops/run/progress.py) scroll above it. The task counts come from Spark's status tracker,
polled from a thread every quarter second: driver-side look-ups, no Spark job.

Elsewhere (a pipe, a log file, cron): the same progress lines, plain, one per line, and
no escape codes. With ``--json`` (or another format for programs): nothing, unless
``DDCLI_PROGRESS=1``; ``DDCLI_NO_PROGRESS=1`` silences both.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable

from ops.run.progress import TaskCounts, Watcher

POLL_SECONDS = 0.25


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def progress_output(out: str, console=None, *, live: bool = True):
    """``(say, watcher)`` for a command whose result is written as ``out``: a live display
    (a context manager, also the watcher; only with ``live``), plain lines, or neither."""
    if _flag("DDCLI_NO_PROGRESS"):
        return None, None
    from rich.console import Console
    con = console or Console(stderr=True)
    if live and out == "table" and con.is_terminal:
        live = LiveDisplay(con)
        return live.line, live
    if out == "table" or _flag("DDCLI_PROGRESS"):
        return plain_lines(con), None
    return None, None


def plain_lines(con) -> Callable[[str], None]:
    from rich.markup import escape
    return lambda msg: con.print(f"[dim]· {escape(msg)}[/dim]", soft_wrap=True, highlight=False)  # one line each


class LiveDisplay(Watcher):
    """The live display of a run on a terminal (a context manager around the run)."""

    def __init__(self, console):
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
        self.console = console
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.fields[tasks]}"), TimeElapsedColumn(),
                            console=console, transient=True)
        self.top = None  # the pipeline's row
        self.rows: list[tuple[int, TaskCounts | None]] = []  # the steps under way, innermost last
        self.phase_row: tuple[int, TaskCounts | None] | None = None
        self.tracker = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.poller = threading.Thread(target=self._poll, name="ddcli-progress", daemon=True)

    def __enter__(self):
        self.bar.start()
        self.poller.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.poller.join(timeout=2)
        self.bar.stop()

    # ------------------------------------------------------------ what the run says

    def pipeline(self, name: str) -> None:
        with self.lock:
            self._close_phase()
            for row, _ in self.rows:
                self.bar.remove_task(row)
            self.rows = []
            if self.top is not None:
                self.bar.remove_task(self.top)
            self.top = self.bar.add_task(f"pipeline {name}", total=None, tasks="")

    def line(self, msg: str) -> None:
        from rich.markup import escape
        self.console.print(f"[dim]· {escape(msg)}[/dim]", soft_wrap=True, highlight=False)

    def attach(self, tracker) -> None:
        self.tracker = tracker

    def begin(self, label: str) -> None:
        with self.lock:
            self._close_phase()
            self.rows.append(self._row(label))

    def end(self) -> None:
        with self.lock:
            self._close_phase()
            if self.rows:
                self.bar.remove_task(self.rows.pop()[0])

    def phase(self, label: str) -> None:
        with self.lock:
            self._close_phase()
            self.phase_row = self._row("  " + label)

    # ------------------------------------------------------------ rows

    def _row(self, label: str) -> tuple[int, TaskCounts | None]:
        counts = TaskCounts(self.tracker) if self.tracker is not None else None
        if counts is not None:
            with contextlib.suppress(Exception):  # a display never fails a run
                counts.mark()
        return self.bar.add_task(label, total=None, tasks=""), counts

    def _close_phase(self) -> None:
        if self.phase_row is not None:
            self.bar.remove_task(self.phase_row[0])
            self.phase_row = None

    def _poll(self) -> None:
        """Every quarter second: the innermost row's tasks, done and in all."""
        while not self.stopping.wait(POLL_SECONDS):
            with self.lock:
                row = self.phase_row or (self.rows[-1] if self.rows else None)
                if row is None or row[1] is None:
                    continue
                try:
                    done, total = row[1].now()
                except Exception:  # noqa: BLE001 - Spark stopping, or interrupted: show what was shown
                    continue
                self.bar.update(row[0], completed=done, total=total or None,
                                tasks=f"{done}/{total} tasks" if total else "")
