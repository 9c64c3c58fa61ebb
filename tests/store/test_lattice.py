"""Times and frontiers: the laws of the product lattice, the advance rule, and the text form.

Properties are checked against the definitions (sets of times in a bounded box), not
against the implementation's own shortcuts: e.g. the vectorised advance uses
``join(t, meet(F))``, while the reference below is the literal meet of joins.
"""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import TimeSyntaxError
from storage.lattice import (INT64_MAX, INT64_MIN, Frontier, advance, advance_columns, beyond_mask, beyond_sql,
                             format_frontier, format_time, join, leq, leq_sql, meet, parse_frontier, parse_time,
                             time_columns)

# ------------------------------------------------------------------ strategies

LO, HI = 0, 4  # small coordinates: collisions and comparable pairs are common


def times(d, lo=LO, hi=HI):
    return st.tuples(*[st.integers(lo, hi)] * d)


def frontiers(d, min_size=0):
    return st.lists(times(d), min_size=min_size, max_size=4).map(lambda ts: Frontier(ts, d))


dims = st.integers(1, 3)


def box(d, lo=LO, hi=HI):
    return list(itertools.product(range(lo, hi + 1), repeat=d))


def beyond_ref(ts, t) -> bool:
    """Reference "beyond": some listed time is <= t, coordinate by coordinate."""
    return any(all(a <= b for a, b in zip(f, t)) for f in ts)


# ------------------------------------------------------------------ the worked example of docs/architecture.md

EXAMPLE_TIMES = [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("frontier, expected", [
    ("(0,3) (1,2) (2,0)", [(0, 0), (0, 1), (1, 0), (1, 1)]),
    ("(1,2) (2,0)", [(1, 0), (1, 1), (1, 0), (1, 1)]),
    ("(0,3) (1,1)", [(0, 1), (0, 1), (1, 1), (1, 1)]),
    ("(1,1)", [(1, 1), (1, 1), (1, 1), (1, 1)]),
])
def test_design_worked_example_advances_exactly_as_written(frontier, expected):
    f = parse_frontier(frontier)
    assert [advance(t, f) for t in EXAMPLE_TIMES] == expected
    cols = [np.array([t[i] for t in EXAMPLE_TIMES], dtype=np.int64) for i in range(2)]
    out = advance_columns(cols, f)
    assert list(zip(*(c.tolist() for c in out))) == expected


def test_d1_advance_is_max_with_the_frontier():
    f = Frontier([(5,)])
    assert [advance((t,), f) for t in range(8)] == [(max(t, 5),) for t in range(8)]


# ------------------------------------------------------------------ lattice laws

@settings(max_examples=150, deadline=None)
@given(st.data())
def test_join_and_meet_are_commutative_associative_idempotent_and_absorb(data):
    d = data.draw(dims)
    a, b, c = (data.draw(times(d, -3, 3)) for _ in range(3))
    assert join(a, b) == join(b, a) and meet(a, b) == meet(b, a)
    assert join(join(a, b), c) == join(a, join(b, c))
    assert meet(meet(a, b), c) == meet(a, meet(b, c))
    assert join(a, a) == a and meet(a, a) == a
    assert join(a, meet(a, b)) == a and meet(a, join(a, b)) == a
    # join is the least upper bound, meet the greatest lower bound
    assert leq(a, join(a, b)) and leq(b, join(a, b))
    assert leq(meet(a, b), a) and leq(meet(a, b), b)
    if leq(a, c) and leq(b, c):
        assert leq(join(a, b), c)
    if leq(c, a) and leq(c, b):
        assert leq(c, meet(a, b))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_leq_is_a_partial_order_consistent_with_join_and_meet(data):
    d = data.draw(dims)
    a, b, c = (data.draw(times(d, -2, 2)) for _ in range(3))
    assert leq(a, a)
    if leq(a, b) and leq(b, a):
        assert a == b
    if leq(a, b) and leq(b, c):
        assert leq(a, c)
    assert leq(a, b) == (join(a, b) == b) == (meet(a, b) == a)
    assert leq(a, b) == all(x <= y for x, y in zip(a, b))


def test_times_of_different_dimension_are_refused():
    with pytest.raises(ValueError, match="different dimensions"):
        leq((1,), (1, 2))
    with pytest.raises(ValueError):
        join((1, 2), (1, 2, 3))
    with pytest.raises(ValueError, match="coordinate"):
        Frontier([(1,), (1, 2)])


# ------------------------------------------------------------------ frontiers

@settings(max_examples=150, deadline=None)
@given(st.data())
def test_frontier_is_a_normalised_antichain_with_the_same_times_beyond(data):
    d = data.draw(dims)
    ts = data.draw(st.lists(times(d), max_size=6))
    f = Frontier(ts, d)
    els = list(f)
    assert els == sorted(set(els))
    for x, y in itertools.permutations(els, 2):
        assert not leq(x, y), f"{x} <= {y} in {els}"
    for t in box(d):
        assert f.beyond(t) == beyond_ref(ts, t)
    assert Frontier(els, d) == f
    assert set(els) <= set(ts)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_frontier_meet_and_dominates_follow_the_sets_of_times_beyond(data):
    d = data.draw(dims)
    f, g = data.draw(frontiers(d)), data.draw(frontiers(d))
    m = f.meet(g)
    for t in box(d):
        assert m.beyond(t) == (f.beyond(t) or g.beyond(t))
    # f dominates g iff every time beyond f is beyond g (the box suffices: see test_lattice docs)
    assert f.dominates(g) == all(g.beyond(t) for t in box(d) if f.beyond(t))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_frontier_join_is_beyond_exactly_the_times_beyond_both(data):
    d = data.draw(dims)
    f, g = data.draw(frontiers(d)), data.draw(frontiers(d))
    j = f.join(g)
    for t in box(d):
        assert j.beyond(t) == (f.beyond(t) and g.beyond(t))
    assert j.dominates(f) and j.dominates(g)


def test_empty_frontier_has_nothing_beyond_and_dominates_everything():
    e = Frontier.empty(2)
    assert not any(e.beyond(t) for t in box(2))
    assert e.dominates(Frontier([(3, 3)])) and not Frontier([(3, 3)]).dominates(e)
    assert advance((1, 2), e) == (1, 2)
    assert beyond_mask([np.array([1]), np.array([2])], e).tolist() == [False]
    with pytest.raises(ValueError, match="dimension"):
        Frontier([])


# ------------------------------------------------------------------ the two claims about advance

def advance_ref(t, f: Frontier):
    """The literal definition: meet over f in F of join(t, f)."""
    out = None
    for x in f:
        j = tuple(max(a, b) for a, b in zip(t, x))
        out = j if out is None else tuple(min(a, b) for a, b in zip(out, j))
    return out


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_beyond_f_s_leq_g_iff_advanced_s_leq_g(data):
    d = data.draw(dims)
    f = data.draw(frontiers(d, min_size=1))
    s = data.draw(times(d))
    a = advance(s, f)
    assert a == advance_ref(s, f)
    assert leq(s, a), "advance only moves times forward"
    assert advance(a, f) == a, "advance is idempotent"
    for g in box(d, LO, HI + 1):
        if f.beyond(g):
            assert leq(s, g) == leq(a, g), (s, a, g)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_times_indistinguishable_beyond_f_advance_to_the_same_time(data):
    # The box [0, HI]^d holds every coordinate of s, s2 and F, which is enough: if some g
    # beyond F tells s from s2, so does meet(g, (HI,...,HI)).
    d = data.draw(dims)
    f = data.draw(frontiers(d, min_size=1))
    s = data.draw(times(d))
    beyond = [g for g in box(d) if f.beyond(g)]

    def sees(x):
        return frozenset(g for g in beyond if leq(x, g))

    mine = sees(s)
    a = advance(s, f)
    assert sees(a) == mine, "s and advance(s, F) are indistinguishable"
    for s2 in box(d):
        if sees(s2) == mine:
            assert advance(s2, f) == a, (s, s2)
            assert leq(s2, a), "advance(s, F) is the greatest time indistinguishable from s"
        else:
            assert advance(s2, f) != a


# ------------------------------------------------------------------ vectorised versions

@settings(max_examples=100, deadline=None)
@given(st.data())
def test_advance_columns_and_beyond_mask_equal_the_scalar_versions(data):
    d = data.draw(dims)
    f = data.draw(frontiers(d))
    ts = data.draw(st.lists(times(d, -2, 6), max_size=30))
    cols = [np.array([t[i] for t in ts], dtype=np.int64) for i in range(d)]
    out = advance_columns(cols, f)
    assert all(c.dtype == np.int64 for c in out)
    assert list(zip(*(c.tolist() for c in out))) == [advance(t, f) for t in ts]
    assert beyond_mask(cols, f).tolist() == [f.beyond(t) for t in ts]
    # Arrow columns work as well as numpy ones
    arrow_cols = [pa.array(c) for c in cols]
    assert beyond_mask(arrow_cols, f).tolist() == [f.beyond(t) for t in ts]


def test_advance_columns_does_not_loop_in_python_over_a_million_times():
    import time as _t
    n = 1_000_000
    cols = [np.arange(n, dtype=np.int64) % 97, np.arange(n, dtype=np.int64) % 89]
    f = parse_frontier("(10,50) (40,20)")
    start = _t.perf_counter()
    out = advance_columns(cols, f)
    mask = beyond_mask(cols, f)
    assert _t.perf_counter() - start < 1.0
    assert (out[0] == np.maximum(cols[0], 10)).all() and (out[1] == np.maximum(cols[1], 20)).all()
    expected = ((cols[0] >= 10) & (cols[1] >= 50)) | ((cols[0] >= 40) & (cols[1] >= 20))
    assert mask.dtype == bool and (mask == expected).all()


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_sql_predicates_agree_with_beyond_and_leq(data):
    d = data.draw(dims)
    f = data.draw(frontiers(d))
    t = data.draw(times(d))
    names = time_columns(d)
    rows = box(d, 0, 3)
    table = pa.table({c: pa.array([r[i] for r in rows], pa.int64()) for i, c in enumerate(names)})
    con = duckdb.connect()
    con.register("ts", table)
    cols = ", ".join(names)
    got = con.execute(f"SELECT {cols} FROM ts WHERE {beyond_sql(f, names)} ORDER BY {cols}").fetchall()
    assert got == [r for r in rows if f.beyond(r)]
    got = con.execute(f"SELECT {cols} FROM ts WHERE {leq_sql(t, names)} ORDER BY {cols}").fetchall()
    assert got == [r for r in rows if leq(r, t)]


# ------------------------------------------------------------------ text form

@settings(max_examples=100, deadline=None)
@given(st.data())
def test_times_and_frontiers_print_and_parse_back(data):
    d = data.draw(dims)
    t = data.draw(st.tuples(*[st.integers(INT64_MIN, INT64_MAX)] * d))
    assert parse_time(format_time(t)) == t
    assert parse_time(format_time(t), d) == t
    f = data.draw(frontiers(d))
    assert parse_frontier(format_frontier(f), d) == f
    if not f.is_empty():
        assert parse_frontier(format_frontier(f)) == f


@pytest.mark.parametrize("text, expected", [
    ("7", (7,)), (" 7 ", (7,)), ("(7)", (7,)), ("(1,2)", (1, 2)), ("( 1 , 2 )", (1, 2)),
    ("(1,2,3)", (1, 2, 3)), ("-3", (-3,)), ("+4", (4,)), ("(0,-1)", (0, -1)),
])
def test_parse_time_accepts(text, expected):
    assert parse_time(text) == expected


@pytest.mark.parametrize("text", ["", " ", "x", "1.5", "(1,2", "1,2)", "()", "(,)", "(1;2)", "1 2",
                                  "(1,,2)", "((1,2))", "1e3", str(2**63), str(-(2**63) - 1), "(a,b)"])
def test_parse_time_refuses_bad_syntax_with_a_clear_error(text):
    with pytest.raises(TimeSyntaxError, match="bad time"):
        parse_time(text)


def test_parse_time_checks_the_dimension():
    with pytest.raises(TimeSyntaxError, match="2 coordinate"):
        parse_time("7", 2)
    with pytest.raises(TimeSyntaxError, match="1 coordinate"):
        parse_time("(1,2)", 1)


@pytest.mark.parametrize("text, d, expected", [
    ("(0,3) (1,2) (2,0)", None, [(0, 3), (1, 2), (2, 0)]),
    ("(2,0) (0,3) (1,2)", None, [(0, 3), (1, 2), (2, 0)]),  # printed sorted
    ("(1,1) (1,2) (2,2)", None, [(1, 1)]),                   # normalised to an antichain
    ("{(0,3), (1,2)}", None, [(0, 3), (1, 2)]),               # as differential dataflow prints it
    ("7", None, [(7,)]),
    ("3 5 4", None, [(3,)]),
    ("{}", 2, []), ("empty", 1, []), ("{ }", 3, []),
])
def test_parse_frontier_accepts(text, d, expected):
    assert list(parse_frontier(text, d)) == expected


@pytest.mark.parametrize("text, match", [
    ("", "bad frontier"), ("  ", "bad frontier"), ("(1,2) 3", "different dimensions"),
    ("(1,2", "bad frontier"), ("(1,2) x", "bad frontier"), (", (1,2)", "stray comma"),
    ("(1,2),, (2,1)", "stray comma"), ("{}", "dimension"), ("1)", "bad frontier"),
])
def test_parse_frontier_refuses_bad_syntax_with_a_clear_error(text, match):
    with pytest.raises(TimeSyntaxError, match=match):
        parse_frontier(text)


def test_parse_frontier_checks_the_dimension():
    with pytest.raises(TimeSyntaxError, match="2 coordinate"):
        parse_frontier("7 8", 2)
    assert parse_frontier("7", 1) == Frontier([(7,)])


def test_format_of_times_and_frontiers():
    assert format_time((7,)) == "7"
    assert format_time((1, 2)) == "(1,2)"
    assert format_frontier(Frontier([(2, 0), (0, 3), (1, 2)])) == "(0,3) (1,2) (2,0)"
    assert format_frontier(Frontier.empty(2)) == "{}"
    assert time_columns(1) == ["time"] and time_columns(3) == ["time_0", "time_1", "time_2"]
