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

from ops.errors import PipelineError

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


_DATA_ERRORS = ("ArithmeticException", "NumberFormatException", "DateTimeException")
# what Spark appends to such an error: a way to turn ANSI SQL off (ddcli keeps it on: a
# wrong value is refused, never made NULL) and the error's SQL state
_SPARK_ADVICE = re.compile(r"\s*(If necessary set|Use `try_\w+`|Use 'try_|To return NULL instead).*$|\s*SQLSTATE: \w+$")


def failed_on_data(exc: BaseException, nodes) -> PipelineError | None:
    """One line for a pipeline expression Spark refused to compute on some value (a decimal
    result beyond 38 digits, a division by zero, a cast of 'abc' to a number): the operator
    whose expression it was (``nodes``: the pipeline's), Spark's words without its advice
    to turn ANSI SQL off, and the expression. None for any other error."""
    if type(exc).__name__ not in _DATA_ERRORS or not type(exc).__module__.startswith("pyspark"):
        return None
    text = first_line(exc)
    text = re.sub(r"^\[[A-Z_.]+\]\s*", "", text)
    while True:
        shorter = _SPARK_ADVICE.sub("", text)
        if shorter == text:
            break
        text = shorter
    context = exc.getQueryContext() if hasattr(exc, "getQueryContext") else []
    fragment = context[0].fragment() if context else ""
    node = next((n for n in nodes if fragment and any(fragment in str(v) for v in n.args.values())), None)
    where = node.describe() if node is not None else "a pipeline expression"
    shown = f" (in `{fragment}`)" if fragment else ""
    return PipelineError(f"{where}: {text.rstrip('. ')}{shown}; nothing was written")
