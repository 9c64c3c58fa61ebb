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
        while start is None and node is not None and node.parent is not None:  # a keyword: its expression's place
            node = node.parent
            start = first_offset(node)
        if start is None:
            return f"{self.path}: {message}"
        before = self.text[:start]
        line = before.count("\n") + 1
        col = start - (before.rfind("\n") + 1) + 1
        return f"{self.path}:{line}:{col}: {message}"


    def line_of(self, node: exp.Expression) -> str:
        """``model.sql:LINE`` of ``node``: where explain and errors say an operator comes from."""
        start = first_offset(node)
        return f"{self.path}:{self.text[:start].count(chr(10)) + 1}" if start is not None else self.path


def first_offset(node: exp.Expression | None) -> int | None:
    """The text offset of ``node``'s first token the parser placed (None if none)."""
    if node is None:
        return None
    starts = [n.meta["start"] for n in node.walk() if isinstance(n, exp.Expression) and "start" in n.meta]
    return min(starts) if starts else None
