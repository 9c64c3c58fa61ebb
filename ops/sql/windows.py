"""Window functions in a SELECT list (planned once the window operator exists)."""

from __future__ import annotations

from ops.errors import PipelineError


def attach_windows(pl, rel, windows, scope, substitute):
    raise PipelineError(pl.where.at(windows[0], "window functions are not supported yet"))
