"""Error lines that point into the model file: ``model.sql:LINE:COL: what and why``."""

from __future__ import annotations

import os

from sqlglot import exp


class Located:
    """The model file's name and text, to prefix every error line with where the construct
    stands (the parser keeps each token's offset in the text)."""

    def __init__(self, path: str, text: str):
        self.path = os.path.basename(path)
        self.text = text

    def at(self, node: exp.Expression | None, message: str) -> str:
        start = first_offset(node)
        if start is None:
            return f"{self.path}: {message}"
        before = self.text[:start]
        line = before.count("\n") + 1
        col = start - (before.rfind("\n") + 1) + 1
        return f"{self.path}:{line}:{col}: {message}"


def first_offset(node: exp.Expression | None) -> int | None:
    """The text offset of ``node``'s first token the parser placed (None if none)."""
    if node is None:
        return None
    starts = [n.meta["start"] for n in node.walk() if isinstance(n, exp.Expression) and "start" in n.meta]
    return min(starts) if starts else None
