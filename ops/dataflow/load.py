"""Loading a pipeline file: run its ``pipeline(p)`` function on a fresh builder."""

from __future__ import annotations

import contextlib
import os
import traceback
from typing import Callable

import pyarrow as pa

from ops.dataflow.builder import Pipeline
from ops.errors import PipelineError
from storage.state.trace import MAX_NAME_LENGTH, NAME_RE


def default_name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def load_pipeline(path: str, name: str | None = None, tables: Callable[[str], pa.Schema | None] | None = None) -> Pipeline:
    """Build the pipeline declared in ``path``: a Python file's ``pipeline(p)``, or a SQL
    model's views (a ``.sql`` file, ops/sql/), whose input traces' schemas ``tables(name)``
    gives. Every mistake is one PipelineError line."""
    name = name or default_name(path)
    if not NAME_RE.match(name) or len(name) > MAX_NAME_LENGTH:
        raise PipelineError(f"bad pipeline name {name!r}: use letters, digits and _, at most {MAX_NAME_LENGTH} characters (or pass --name)")
    try:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise PipelineError(f"cannot read pipeline file {path}: {e}") from None
    if path.lower().endswith(".sql"):
        from ops.sql.model import load_model
        return load_model(path, name, source, tables or (lambda n: None))
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise PipelineError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    namespace: dict = {"__file__": os.path.abspath(path), "__name__": f"ddcli_pipeline_{name}"}
    p = Pipeline(name)
    p.tables = tables
    try:
        with _exits_refused():
            exec(code, namespace)
            fn = namespace.get("pipeline")
            if not callable(fn):
                raise PipelineError(f"{path}: defines no function pipeline(p)")
            fn(p)
    except PipelineError:
        raise
    except (SystemExit, ProcessExit) as e:  # the file tried to end the command (or the warm engine)
        line = _user_line(e, path)
        call = f"{'os._exit' if isinstance(e, ProcessExit) else 'sys.exit'}({'' if e.code is None else repr(e.code)})"
        raise PipelineError(f"{path}{':' + str(line) if line else ''}: the pipeline file calls {call} while it is "
                            f"loaded; a pipeline file must not end the command") from None
    except Exception as e:  # the user's code raised: name the line in their file
        line = _user_line(e, path)
        raise PipelineError(f"{path}{':' + str(line) if line else ''}: {type(e).__name__}: {e}") from None
    if not p.outputs:
        raise PipelineError(f"{path}: the pipeline declares no output (call p.output(name, collection))")
    return p


def trace_schemas(traces) -> Callable[[str], pa.Schema | None]:
    """``tables`` for :func:`load_pipeline` over a store's traces (name -> Trace): a name
    as written, else the one trace that matches it without regard to case (SQL's names)."""
    def schema(name: str):
        if name in traces:
            return traces[name].schema
        hits = [n for n in traces if n.lower() == name.lower()]
        return (hits[0], traces[hits[0]].schema) if len(hits) == 1 else None
    return schema


class ProcessExit(BaseException):
    """``os._exit(code)`` called by a pipeline file while it loads. A BaseException, as
    SystemExit is, so the file's own ``except Exception`` does not swallow it."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def _exits_refused():
    """``os._exit`` raises :class:`ProcessExit` while a pipeline file loads, rather than end
    the process at once: in the warm engine (ddcli/service/) that process is the service,
    and a command that ends is one error line, never a silent exit. Put back afterwards;
    the command's other threads do not call ``os._exit`` meanwhile. (``posix._exit`` or a
    signal the file sends its own process cannot be caught so.)"""
    def refuse(code):
        raise ProcessExit(code)

    saved, os._exit = os._exit, refuse
    try:
        yield
    finally:
        os._exit = saved


def _user_line(e: BaseException, path: str) -> int | None:
    target = os.path.abspath(path)
    line = None
    for fr in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(fr.filename) == target:
            line = fr.lineno
    return line
