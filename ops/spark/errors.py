"""The line of a Spark error a user sees.

Spark's analysis and parse errors are several lines (the message, then the SQL text with
a caret under the fault); some start with an empty line. ddcli says one line: the first
that has words in it.
"""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s message, or its type's name."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__
