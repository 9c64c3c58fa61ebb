"""``ddcli help operators``: the pipeline API reference, generated from its docstrings.

The reference is the code: every public method of the builder ``p`` and of a collection,
with its signature and docstring, so it cannot drift from what a pipeline can call.
Importing ``ops.dataflow.builder`` does not import pyspark (declaring a pipeline runs nothing).
"""

from __future__ import annotations

import inspect
import sys

from ddcli.app import EXIT_CODES_HELP, help_app

# (heading, class, how a call is written)
SECTIONS = [("The builder p", "Pipeline", "p"), ("Operators of a collection c", "Collection", "c")]


def _members(cls) -> list[tuple[str, object]]:
    """Public methods in the order the class declares them (the order of the source)."""
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_") or not callable(value):
            continue
        out.append((name, value))
    return out


def _signature(fn) -> str:
    """``(by, column: str, name: str | None = None)``: annotations as written, unquoted."""
    parts, star = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.kind is p.VAR_POSITIONAL:
            star = True
        if p.annotation is not p.empty:
            text += ": " + str(p.annotation).replace('"', "").replace("'", "")
        if p.default is not p.empty:
            text += (" = " if p.annotation is not p.empty else "=") + repr(p.default)
        parts.append(text)
    return "(" + ", ".join(parts) + ")"


def entries() -> list[tuple[str, list[tuple[str, str, str]]]]:
    """``[(heading, [(call, signature, docstring), ...]), ...]``."""
    from ops.dataflow import builder as pipeline
    out = []
    for heading, cls_name, var in SECTIONS:
        cls = getattr(pipeline, cls_name)
        rows = []
        for name, fn in _members(cls):
            doc = inspect.cleandoc(fn.__doc__ or "")
            alias = next((other for other, f in _members(cls) if f is fn and other != name), None)
            if alias and _members(cls).index((name, fn)) > _members(cls).index((alias, fn)):
                doc = f"The same as {alias}."
            rows.append((f"{var}.{name}", _signature(fn), doc))
        out.append((heading, rows))
    return out


def render_text() -> str:
    """The reference as plain text (what the command prints; readable in a pager)."""
    lines = ["Pipeline operators (from the docstrings of ops/dataflow/builder.py)", ""]
    for heading, rows in entries():
        lines += [heading, "=" * len(heading), ""]
        for call, sig, doc in rows:
            lines.append(f"{call}{sig}")
            lines += [("    " + ln).rstrip() for ln in (doc or "(no description)").splitlines()]
            lines.append("")
    return "\n".join(lines)


@help_app.command("operators", epilog=EXIT_CODES_HELP)
def help_operators() -> None:
    """Every pipeline operator with its arguments, from the docstrings of ops/dataflow/builder.py.

    Example:

        ddcli help operators | less
    """
    sys.stdout.write(render_text() + "\n")
