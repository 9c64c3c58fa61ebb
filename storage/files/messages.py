"""What a user got wrong in an update file, in one line: the error, and the helpers that
find the first offending row of a column and show its value as the user wrote it.

Row numbers in messages are 1-based *data* rows: the header of a CSV file is not counted,
and for JSON Lines blank lines are not counted (``line N`` is used where the problem is
the text of a line itself, e.g. invalid JSON or invalid UTF-8).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

_MAX_SHOWN = 60




def show(v) -> str:
    """A value as the user wrote it, quoted if text, cut short if long."""
    if isinstance(v, bytes):
        r = repr(v)
    elif isinstance(v, str):
        r = repr(v)
    elif isinstance(v, float):
        r = repr(v)
    else:
        r = str(v)
    if len(r) > _MAX_SHOWN:
        r = r[: _MAX_SHOWN - 4] + "...'" if r[:1] in "'\"" else r[: _MAX_SHOWN - 3] + "..."
    return r


def first_index(mask) -> int | None:
    """Index of the first True in a boolean (chunked) array, nulls counting as False."""
    mask = pc.fill_null(mask, False)
    if not pc.any(mask).as_py():
        return None
    return pc.index(mask, True).as_py()


def first_failure(col, fn) -> int | None:
    """The first row for which ``fn`` (a cast) fails: bisection, O(n) casts in total."""
    lo, hi = 0, len(col)
    try:
        fn(col)
        return None
    except (pa.ArrowException, ValueError, OverflowError):
        pass
    while hi - lo > 16:
        mid = (lo + hi) // 2
        try:
            fn(col.slice(lo, mid - lo))
            lo = mid
        except (pa.ArrowException, ValueError, OverflowError):
            hi = mid
    for i in range(lo, hi):
        try:
            fn(col.slice(i, 1))
        except (pa.ArrowException, ValueError, OverflowError):
            return i
    return None
