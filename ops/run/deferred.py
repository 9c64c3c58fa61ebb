"""A DataFrame built when first used: the inputs of a run and the renames and filters over
them cost Py4J calls to build (reading a trace's layer files lists and checks them in the
JVM: some 25 ms; a select is analysed: some 15 ms), and a loop whose task reads the input's
files itself (ops/loops/direct.py) never uses them.

Only what has no side effect on the evaluation is deferred (reading an input, ``select``,
``filter``), and only in a run, never in the planning dry run that checks the pipeline.
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import DataFrame


class DeferredFrame:
    """Stands for the DataFrame ``build()`` returns (never None), built on the first
    attribute or column used; everything else reaches the DataFrame itself."""

    __slots__ = ("_build", "_df")

    def __init__(self, build: Callable[[], DataFrame]):
        self._build = build
        self._df: DataFrame | None = None

    def built(self) -> DataFrame:
        if self._df is None:
            self._df = self._build()
            self._build = None
        return self._df

    @property
    def pending(self) -> bool:
        """Not built yet."""
        return self._df is None

    def __getattr__(self, name: str):
        return getattr(self.built(), name)

    def __getitem__(self, item):
        return self.built()[item]


def pending(df) -> bool:
    """``df`` is a deferred frame not built yet."""
    return isinstance(df, DeferredFrame) and df.pending
