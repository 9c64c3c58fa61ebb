"""A sum of decimals that outgrows its type is refused in one line that names the key.

The kernels meet the overflow deep inside a sweep, where a key is a row number. A reduce's
output for a key depends on that key's updates only, so the key is found by reducing
halves of the keys again until one key is left: about log2(keys) more reductions, paid on
the error path only.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Callable

import numpy as np
import pyarrow as pa

from ops.columnar import row_ids
from ops.errors import PipelineError
from ops.exact_sum import DecimalOverflow


def naming_the_key(reduce: Callable[[pa.Table], pa.Table], table: pa.Table, key: list[str], what: str) -> pa.Table:
    """``reduce(table)``; a :class:`DecimalOverflow` becomes a :class:`PipelineError` that
    names ``what`` reduced, the key and the sum."""
    try:
        return reduce(table)
    except DecimalOverflow as e:
        first = e
    kid, keys = row_ids(table, key, ordered=True)
    lo, hi = 0, keys  # the keys [lo, hi) hold an overflow
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            reduce(table.filter(pa.array((kid >= lo) & (kid < mid))))
        except DecimalOverflow as e:
            first, hi = e, mid
        else:
            lo = mid
    row = table.filter(pa.array(kid == lo)).slice(0, 1).select(key).to_pylist()
    where = ", ".join(f"{c}={_shown(v)}" for c, v in row[0].items()) if row and key else "the whole collection"
    raise PipelineError(f"{what}, key {where}: {first}; nothing was written") from None


def _shown(v) -> str:
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, Decimal):
        return format(v, "f")
    return "null" if v is None else str(v)
