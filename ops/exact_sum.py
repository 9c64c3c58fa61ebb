"""Exact, order-free sums of doubles and decimals: the weights a ``sum`` accumulates.

A reduce retracts an output it wrote in an earlier run by computing it again from the
input's history, and that history comes back in another order (layers merged, times
compacted, rows dealt to other tasks). A sum of doubles rounded at every addition depends
on the order of its terms, so the retraction would differ from what was written in the
last bit and never cancel it. Here every term is an exact integer instead:

* a finite double is an integer multiple of ``2^-1074``, so ``x * 2^1074`` is an integer
  (a Python int: at most 2,098 bits); ``+inf``, ``-inf`` and NaN are counted in fields far
  above every finite sum (``_FIELDS``), so a multiplicity's sign and a retraction count
  for them as for any value;
* a decimal is its unscaled integer.

Sums of these integers are exact whatever their order, and only the total is rounded once
(a Python ``int / int`` is correctly rounded), so the same multiset always gives the same
double: the correctly rounded sum of its values. The arrays are numpy arrays of Python
ints (``dtype=object``): the kernels' ``np.add.at``, ``cumsum`` and ``reduceat`` work on
them unchanged. Integer columns keep their int64 weights.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.columnar import row_ids
from ops.errors import PipelineError

SCALE_BITS = 1074  # x * 2^1074 is an integer for every finite double
# counts of +inf, -inf and NaN sit in fields above every finite total (< 2^2300 for any
# realistic number of rows and multiplicities) and below one another (counts < 2^127)
_FIELDS = ((2304, float("inf")), (2432, float("-inf")), (2560, float("nan")))
_FINITE_LIMIT = 1 << 2303


def sum_type(t: pa.DataType) -> pa.DataType | None:
    """The type of a sum of a column of type ``t`` (None: not summable). Integers sum to
    int64; floats to float64; decimals to decimal(38, scale), as DuckDB and Spark widen."""
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_decimal(t):
        return pa.decimal128(38, t.scale)
    return None


def is_exact(out_type: pa.DataType) -> bool:
    """Whether sums of this type travel as exact Python ints (not int64)."""
    return not pa.types.is_integer(out_type)


def weights(column, out_type: pa.DataType, diff: np.ndarray, wide: bool = False) -> np.ndarray:
    """``value * diff`` per update, exactly: int64 for integer sums (Python ints with
    ``wide``, so no product or total wraps), Python ints otherwise (nulls weigh 0)."""
    diff = np.asarray(diff, np.int64)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_integer(out_type):
        v = np.asarray(pc.fill_null(column.cast(out_type), pa.scalar(0, out_type)).to_numpy(zero_copy_only=False),
                       np.int64)
        return v.astype(object) * diff.astype(object) if wide else v * diff
    if pa.types.is_decimal(out_type):
        return _unscaled(column) * diff.astype(object)
    return _scaled_doubles(column) * diff.astype(object)


def _scaled_doubles(column: pa.Array) -> np.ndarray:
    """``x * 2^1074`` as Python ints (specials in their fields, nulls 0)."""
    x = np.asarray(pc.fill_null(column.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False), np.float64)
    finite = np.isfinite(x)
    frac, exp = np.frexp(np.where(finite, x, 0.0))
    mant = (frac * 2.0 ** 53).astype(np.int64)  # exact: a double has 53 significant bits
    shift = exp.astype(np.int64) + (SCALE_BITS - 53)
    low = shift < 0  # subnormals: the mantissa's low bits are zero, the shift right exact
    mant[low] >>= -shift[low]
    shift[low] = 0
    out = mant.astype(object) << shift.astype(object)
    if not finite.all():
        for bits, special in _FIELDS:
            hit = np.isnan(x) if special != special else (x == special)
            out[hit] = 1 << bits
    return out


def _unscaled(column: pa.Array) -> np.ndarray:
    """A decimal column's unscaled integers as Python ints (nulls 0)."""
    t = column.type
    if t.bit_width != 128:
        column = column.cast(pa.decimal128(38, t.scale))
    column = pc.fill_null(column, pa.scalar(0, column.type))
    n = len(column)
    words = np.frombuffer(column.buffers()[1], np.uint64)[2 * column.offset:2 * (column.offset + n)].reshape(n, 2)
    return (words[:, 1].view(np.int64).astype(object) << 64) + words[:, 0].astype(object)


def values(total: np.ndarray, out_type: pa.DataType) -> pa.Array:
    """The sums' values as ``out_type`` from their exact totals (:func:`weights` summed)."""
    if not is_exact(out_type) or np.asarray(total).dtype != object:
        return pa.array(total, out_type)
    if pa.types.is_decimal(out_type):
        return _decimals(total, out_type)
    return pa.array(_doubles(total), pa.float64())


def means(total: np.ndarray, n: np.ndarray, sum_type: pa.DataType) -> pa.Array:
    """Each exact total (``wide`` :func:`weights` summed) over its count ``n`` as the
    double nearest the exact mean (NaN or an infinity when the values hold them); null
    where ``n`` is 0. One rounding, so the mean of a multiset is the same in any order."""
    unit = 1 << SCALE_BITS if pa.types.is_floating(sum_type) else \
        10 ** sum_type.scale if pa.types.is_decimal(sum_type) else 1
    total, n = np.asarray(total, object), np.asarray(n, np.int64)
    out = np.zeros(len(total), np.float64)
    special = np.abs(total) >= _FINITE_LIMIT if pa.types.is_floating(sum_type) else np.zeros(len(total), bool)
    plain = ~special & (n != 0)
    if plain.any():  # Python's int / int: correctly rounded
        out[plain] = np.true_divide(total[plain], n[plain].astype(object) * unit).astype(np.float64)
    for i in np.flatnonzero(special):
        out[i] = _special(int(total[i]))
    return pa.array(out, pa.float64(), mask=n == 0)


def _doubles(total: np.ndarray) -> np.ndarray:
    """Each total / 2^1074, correctly rounded; specials from their fields."""
    out = np.empty(len(total), np.float64)
    if not len(total):
        return out
    special = np.abs(total) >= _FINITE_LIMIT
    plain = ~special
    try:
        out[plain] = np.true_divide(total[plain], 1 << SCALE_BITS).astype(np.float64)
    except OverflowError:  # a finite total beyond the largest double
        out[plain] = [_one_double(v) for v in total[plain]]
    for i in np.flatnonzero(special):
        out[i] = _special(int(total[i]))
    return out


def _one_double(v: int) -> float:
    try:
        return v / (1 << SCALE_BITS)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _special(v: int) -> float:
    """A total with counts of +inf, -inf or NaN: IEEE's sum of what they leave."""
    counts = {}
    for bits, special in reversed(_FIELDS):
        c = (v + (1 << (bits - 1))) >> bits
        v -= c << bits
        counts[bits] = c
    pos_inf, neg_inf, nan = (counts[b] for b, _ in _FIELDS)
    up = pos_inf > 0 or neg_inf < 0
    down = pos_inf < 0 or neg_inf > 0
    if nan or (up and down):
        return float("nan")
    return float("inf") if up else float("-inf") if down else _one_double(v)


class DecimalOverflow(ArithmeticError):
    """A sum of decimals that does not fit its type: refused, never rounded or wrapped. The
    reduce that meets it names the key (:func:`naming_the_key`)."""


def decimal_text(unscaled: int, scale: int) -> str:
    """An unscaled integer as the decimal it stands for, every digit kept."""
    sign, digits = ("-" if unscaled < 0 else ""), str(abs(unscaled)).rjust(scale + 1, "0")
    return sign + (f"{digits[:-scale]}.{digits[-scale:]}" if scale else digits)


def _decimals(total: np.ndarray, out_type: pa.Decimal128Type) -> pa.Array:
    """Exact totals as decimal128 values; a total past 38 digits is an error, never wrapped."""
    limit = 10 ** out_type.precision
    over = np.abs(total) >= limit
    if over.any():
        value = decimal_text(int(total[np.flatnonzero(over)[0]]), out_type.scale)
        raise DecimalOverflow(f"the sum {value} does not fit DECIMAL({out_type.precision},{out_type.scale})")
    words = np.empty((len(total), 2), np.uint64)
    words[:, 0] = (total & ((1 << 64) - 1)).astype(np.uint64)
    words[:, 1] = (total >> 64).astype(np.int64).view(np.uint64)
    return pa.Array.from_buffers(out_type, len(total), [None, pa.py_buffer(words.tobytes())])


# ---------------------------------------------------------------- through Arrow tables


def transport_type(out_type: pa.DataType) -> pa.DataType:
    """How exact weights travel in a table between a kernel's stages (int64, or binary)."""
    return pa.binary() if is_exact(out_type) else pa.int64()


def to_arrow(w: np.ndarray) -> pa.Array:
    """Weights as a column: int64 as they are, Python ints as two's-complement bytes."""
    if w.dtype != object:
        return pa.array(w, pa.int64())
    return pa.array([int(v).to_bytes((int(v).bit_length() + 8) // 8, "little", signed=True) for v in w],
                    pa.binary())


def from_arrow(column) -> np.ndarray:
    """:func:`to_arrow`'s column back as weights."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not pa.types.is_binary(column.type):
        return np.asarray(column.to_numpy(zero_copy_only=False), np.int64)
    out = np.empty(len(column), object)
    out[:] = [int.from_bytes(b, "little", signed=True) for b in column.to_pylist()]
    return out


# ---------------------------------------------------------------- the key of an overflow
# The kernels meet an overflow deep inside a sweep, where a key is a row number. A reduce's
# output for a key depends on that key's updates only, so the key is found by reducing
# halves of the keys again until one key is left: about log2(keys) more reductions, paid
# on the error path only.


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
