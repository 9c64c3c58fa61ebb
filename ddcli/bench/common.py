"""What every benchmark driver shares: where the sample pipelines are, the progress log,
the figures written out, and small file helpers.

Benchmarks drive ``ops`` and ``storage`` and return their figures as a dict; the commands
in ``ddcli/commands/bench.py`` render them. Nothing here imports Typer.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = os.path.join(REPO, "sample_data", "pipelines")  # the sample pipelines the benchmarks run
OUTPUTS = {"reach": "reach", "bfs": "distances", "cc": "labels", "reach_nodes": "reached"}  # each loop sample's output trace


def console_log() -> Callable[[str], None] | None:
    """Phase messages on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    con = Console(stderr=True)
    return lambda msg: con.log(msg)


def require_matplotlib():
    """matplotlib, or a user error saying how to install it (checked before any work)."""
    try:
        import matplotlib
    except ImportError:
        from ddcli.render import RenderError
        raise RenderError("--plot needs matplotlib: pip install 'ddcli[bench]'") from None
    return matplotlib


def write_json(result: dict, path: str) -> None:
    """A benchmark's figures as indented JSON (replacing ``path`` whole, ddcli/outputs.py)."""
    from ddcli.outputs import opened
    with opened(path) as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")


def save_figure(fig, path: str) -> None:
    """A matplotlib figure to ``path`` (its extension names the image format, PNG by
    default), replacing it whole as every output does (ddcli/outputs.py)."""
    from ddcli.outputs import opened
    with opened(path, binary=True) as fh:
        fig.savefig(fh, dpi=110, format=os.path.splitext(path)[1][1:].lower() or "png")


def dir_bytes(path: str) -> int:
    """Bytes of every file under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def write_parquet(table, path: str) -> str:
    """``table`` written to ``path``; returns ``path``."""
    import pyarrow.parquet as pq
    pq.write_table(table, path)
    return path


def step_cdf(ax, seconds: list[float], label: str) -> None:
    """The empirical CDF of ``seconds`` as a step line on the matplotlib axes ``ax``."""
    import numpy as np
    x = np.sort(np.asarray(seconds, dtype=float))
    ax.step(np.r_[x[0], x], np.r_[0, np.arange(1, len(x) + 1) / len(x)], where="post", label=label)
    ax.set_ylim(0, 1.02)
