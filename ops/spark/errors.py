"""The line of a Spark error a user sees.

Spark's analysis and parse errors are several lines (the message, then the SQL text with
a caret under the fault); some start with an empty line. ddcli says one line: the first
that has words in it.

An error ddcli raises on purpose inside a Spark task (a key over ``DDCLI_REDUCE_MEMORY``,
an object store that stopped answering) reaches the driver as a ``PythonException`` whose
text is the task's traceback; :func:`raised_in_task` makes it the error it was, so the
command says its one line with its exit code.
"""

from __future__ import annotations

import importlib
import re

# the last line of a task's traceback: ``module.Class: message``, for ddcli's error modules
_TASK_ERROR = re.compile(r"((?:ops|storage)\.errors)\.([A-Za-z_]\w*): (.+)")


def first_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s message, or its type's name."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def raised_in_task(exc: BaseException) -> BaseException | None:
    """The error of ddcli's own (``ops.errors``, ``storage.errors``) a Spark task raised,
    rebuilt from ``exc`` (PySpark's ``PythonException``), with its message; None for any
    other error."""
    if type(exc).__name__ != "PythonException" or not type(exc).__module__.startswith("pyspark"):
        return None
    for line in reversed(str(exc).splitlines()):
        m = _TASK_ERROR.fullmatch(line.strip())
        if m is None:
            continue
        cls = getattr(importlib.import_module(m.group(1)), m.group(2), None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(m.group(3))
            except TypeError:  # an error class of other arguments: left as it was
                return None
        return None
    return None
