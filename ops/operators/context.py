"""What an operator needs to know while it turns its inputs' changes into its own.

Every operator works on *update frames*: Spark DataFrames with the collection's data
columns, optional ``extra`` columns, the time columns and ``diff``. The same operator code
serves two evaluations:

* incremental (``ddcli run``): frames hold this run's new updates at their exact times,
  and stateful operators read the *old* part of their inputs from arrangements;
* from scratch (``ddcli verify``): frames hold the inputs accumulated at each checked time,
  tagged by an extra column ``_at``, all at time zero, with no old state at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from storage.lattice import time_columns

AT = "_at"
RESERVED = {"diff", "_new", "_at", "_group", "_count", "time"}


@dataclass
class EvalContext:
    spark: object
    d: int
    extra: list[str] = field(default_factory=list)  # ["_at"] when evaluating from scratch
    arrangement: Callable | None = None  # node -> Arrangement | None (old updates), incremental only
    progress: Callable[[str], None] | None = None
    delta_rows: int | None = None  # new input rows of this run (None: unknown or from scratch)
    # inside loops: the current iteration of each enclosing loop, outermost first. Every
    # update this round processes or produces is at these iterations or later.
    floor: tuple[int, ...] = ()

    @property
    def tcols(self) -> list[str]:
        return time_columns(self.d)

    def data_columns(self, df) -> list[str]:
        """The data columns of an update frame (everything but extra, time and diff)."""
        skip = set(self.extra) | set(self.tcols) | {"diff"}
        return [c for c in df.columns if c not in skip]

    def tail(self) -> list[str]:
        return self.extra + self.tcols + ["diff"]
