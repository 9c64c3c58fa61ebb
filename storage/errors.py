"""Every error the storage layer raises on purpose, in one place.

The command line turns them into exit codes (``ddcli/app.py``): a :class:`StoreError` (and
every error of the user's making below) is exit 2, a :class:`Conflict` exit 3, a
:class:`CorruptionError` exit 5. Each says what, where and which value in one line.
"""

from __future__ import annotations


class StoreError(Exception):
    """A user error: one clear line, nothing changed on disk."""


class TimeSyntaxError(ValueError):
    """A time or frontier written in a form we do not accept."""


class DiffOverflow(StoreError):
    """Diffs that would sum beyond int64."""


def one_line(s: str) -> str:
    """``s`` on one line of at most 400 characters."""
    s = " ".join(s.split())
    return s if len(s) <= 400 else s[:397] + "..."


class UpdateFileError(ValueError):
    """A user error in an update file: one line naming the file, the row and the value."""

    def __init__(self, path: str, detail: str, *, row: int | None = None, column: str | None = None):
        self.path = path
        self.row = row  # 1-based data row, when the problem is in one row
        self.column = column
        where = []
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column}")
        prefix = f"{path}: " + (", ".join(where) + ": " if where else "")
        super().__init__(one_line(prefix + detail))


class Conflict(Exception):
    """Another writer changed what this change depends on; nothing was written. Safe to retry."""


class LayerVanished(Conflict):
    """A layer file a reader's version named was collected after a newer version replaced
    it: nothing is wrong, read again from the newest version."""


class CorruptionError(Exception):
    """The store is damaged: a layer file is missing or differs from what the log says,
    or the newest metadata version is unreadable. One line; run ``ddcli check``."""


class StoreUnreachable(Exception):
    """The store's location cannot be used: a missing bucket, credentials refused, an
    endpoint that does not answer. A user error (exit 2): one line; nothing was changed."""


class Ambiguous(Exception):
    """A write whose outcome is unknown (a timeout after the request was sent): the
    caller reads the object back to find out, it never guesses."""
