"""Dense ids of values (ops/columnar.py), against numpy's own unique: every path (rows in
order, a narrow integer range, a wide one, unordered hashing) gives ids that are equal
exactly where the values are, count 0 .. n-1, and follow value order when asked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ops.columnar import densify

INTS = st.lists(st.integers(-(2 ** 40), 2 ** 40), max_size=300)


def _check(x: np.ndarray, ordered: bool) -> None:
    ids, n = densify(x, ordered)
    uniq, inverse = np.unique(x, return_inverse=True)
    assert n == len(uniq)
    assert ids.dtype == np.int64 and len(ids) == len(x)
    if len(x):
        assert sorted(set(ids.tolist())) == list(range(n))
    # equal ids exactly where the values are equal
    first_id = {}
    for v, i in zip(x.tolist(), ids.tolist()):
        assert first_id.setdefault(v, i) == i
    assert len(first_id) == n
    if ordered:
        assert (ids == inverse.reshape(-1)).all()


@settings(max_examples=200, deadline=None)
@given(values=INTS, spread=st.sampled_from([1, 3, 1000, 2 ** 30]), ordered=st.booleans(), presorted=st.booleans())
def test_densify_against_unique(values, spread, ordered, presorted):
    x = np.asarray([v % spread for v in values] if spread < 2 ** 30 else values, np.int64)
    if presorted:
        x = np.sort(x)
    _check(x, ordered)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint64, np.int8, np.int16, np.int32])
def test_densify_other_integer_types(dtype):
    rng = np.random.default_rng(3)
    signed = np.dtype(dtype).kind == "i"  # (int8 from -100 to 100: offsets that wrap in 8 bits)
    x = rng.integers(-100 if signed else 0, 101 if signed else 200, 500).astype(dtype)
    if dtype == np.uint64:
        x = x + np.uint64(2 ** 63)  # beyond int64: the narrow range still holds
    _check(x, True)
    _check(x, False)
