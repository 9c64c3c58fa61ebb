"""Every error the pipeline layer raises on purpose, in one place.

A :class:`PipelineError` or a :class:`SparkSetupError` is the user's to fix: the command
line shows its one line and exits 2 (``ddcli/app.py``).
"""

from __future__ import annotations


class PipelineError(Exception):
    """A mistake in a pipeline: one clear line, raised before Spark does any work."""


class SparkSetupError(Exception):
    """Spark could not be set up as asked (an unreachable master, executors that cannot run
    ddcli's code): a user's configuration to fix, reported as one line."""


class KeyTooLarge(ValueError):
    """One key's dense grid exceeds the cell budget."""
