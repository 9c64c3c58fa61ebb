"""A named reader's hold, without IO: where it lets compaction advance times, and the
pure changes that create, acknowledge and drop a reader.

The hold of a reader at position ``P`` sits just below ``P``. Checked against a plain
definition of advancing (``meet over f of join(t, f)``, written out here) over every time
of a box: a time the reader acknowledged (not beyond ``P``) never advances to a time
beyond ``P``, a time beyond ``P`` never moves, and no greater hold would do (d = 1, 2, 3).
"""

from __future__ import annotations

import itertools
import random

import pyarrow as pa
import pytest

from storage.errors import Conflict, StoreError
from storage.lattice import Frontier
from storage.layer import Layer
from storage.state import readers
from storage.state.readers import hold_frontier
from storage.state.trace import Hold, Trace
from storage.state.transitions import State, merge, plan_merges


def ref_beyond(frontier, t) -> bool:
    return any(all(a <= b for a, b in zip(f, t)) for f in frontier)


def ref_advance(t, frontier):
    """meet over f of join(t, f), coordinate by coordinate, from the definition."""
    joins = [tuple(max(a, b) for a, b in zip(t, f)) for f in frontier]
    return tuple(min(j[i] for j in joins) for i in range(len(t)))


def make_trace(name: str, d: int) -> Trace:
    return Trace(name, pa.schema([("word", pa.string())]), ["word"], d, Frontier.minimum(d), Frontier.minimum(d))


def box(d, hi):
    return list(itertools.product(range(hi + 1), repeat=d))


def random_antichain(rng, d, hi):
    return Frontier([tuple(rng.randint(0, hi) for _ in range(d)) for _ in range(rng.randint(1, 3))], d)


def test_the_hold_of_a_one_dimensional_position_is_one_below_it():
    assert hold_frontier(Frontier([(7,)])) == Frontier([(6,)])
    assert hold_frontier(Frontier([(0,)])) == Frontier([(0,)])
    assert hold_frontier(Frontier.empty(1)) == Frontier.empty(1)


def test_the_hold_of_a_partially_ordered_position_is_one_below_its_meet():
    # P = {(2,5),(4,3)}: (1,4) would advance (10,2), not beyond P, to (10,4), beyond (4,3)
    assert hold_frontier(Frontier([(2, 5), (4, 3)])) == Frontier([(1, 2)])
    assert ref_advance((10, 2), [(1, 4)]) == (10, 4) and ref_beyond([(4, 3)], (10, 4))
    assert not ref_beyond([(2, 5), (4, 3)], ref_advance((10, 2), [(1, 2)]))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_a_hold_never_advances_an_acknowledged_time_beyond_the_position_and_no_greater_hold_works(d):
    rng = random.Random(d)
    hi = 6 if d < 3 else 4
    for _ in range(40):
        position = random_antichain(rng, d, hi - 1)
        c = hold_frontier(position)
        assert len(c) == 1
        for t in box(d, hi + 1):
            moved = ref_advance(t, list(c))
            if ref_beyond(position, t):
                assert moved == t, "an unacknowledged time never moves"
            else:
                assert not ref_beyond(position, moved), (position, t, moved)
        # any greater hold (one coordinate up) advances some acknowledged time beyond P
        (ct,) = c.elements
        for i in range(d):
            bigger = tuple(v + (1 if j == i else 0) for j, v in enumerate(ct))
            low = [t for t in box(d, hi + 2) if not ref_beyond(position, t)]
            if min(p[i] for p in position) == 0:
                continue  # no time is below the position in coordinate i: nothing to protect
            assert any(ref_beyond(position, ref_advance(t, [bigger])) for t in low), (position, bigger)


def test_holds_only_move_forward_as_the_position_does():
    rng = random.Random(5)
    for _ in range(200):
        a = random_antichain(rng, 2, 6)
        b = Frontier([tuple(max(x, y) for x, y in zip(p, q)) for p in a for q in random_antichain(rng, 2, 6)], 2)
        assert b.dominates(a)
        assert hold_frontier(b).dominates(hold_frontier(a))


# ---------------------------------------------------------------- the changes


def layer(lo, hi, rows=1, d=1) -> Layer:
    return Layer(f"l{lo}-{hi}", [], Frontier.minimum(d), Frontier.minimum(d), Frontier.minimum(d), lo, hi, rows)


def state_with(t) -> State:
    return State(1, {t.name: t}, {})


def test_a_new_reader_starts_at_the_since_holds_there_and_reads_every_layer():
    t = make_trace("t", d=1).with_(upper=Frontier([(9,)]), since=Frontier([(3,)]),
                                   layers=[layer(0, 1), layer(1, 2)], next_seq=2)
    s = readers.add_reader(state_with(t), "t", "etl")
    h = s.traces["t"].holds["reader:etl"]
    assert h == Hold(Frontier([(3,)]), 0, None, Frontier([(3,)]))
    r = readers.reading(s.traces["t"], "etl")
    assert [l.id for l in r.layers] == ["l0-1", "l1-2"] and r.since == Frontier([(3,)])
    # a since beyond the upper: held no further than just below the upper, read at the start
    beyond = readers.add_reader(state_with(t.with_(since=Frontier([(12,)]))), "t", "etl")
    h = beyond.traces["t"].holds["reader:etl"]
    assert h == Hold(Frontier([(8,)]), 0, None, Frontier([(12,)]))
    assert readers.reading(beyond.traces["t"], "etl").since == Frontier([(12,)])
    assert readers.add_reader(s, "t", "etl") is s, "a reader another command created stays"
    with pytest.raises(StoreError, match="bad reader name"):
        readers.add_reader(s, "t", "no-dash")


def test_an_ack_moves_to_the_upper_read_never_a_newer_one_and_conflicts_when_the_reader_moved():
    t = make_trace("t", d=1).with_(upper=Frontier([(5,)]), layers=[layer(0, 1)], next_seq=1)
    s = readers.add_reader(state_with(t), "t", "etl")
    r = readers.reading(s.traces["t"], "etl")
    # the trace moves on before the ack: a new layer and a newer upper
    later = s.traces["t"].with_(upper=Frontier([(9,)]), layers=[layer(0, 1), layer(1, 2)], next_seq=2)
    s2 = readers.ack_reader(s.with_traces({"t": later}), r)
    h = s2.traces["t"].holds["reader:etl"]
    assert h == Hold(Frontier([(4,)]), 1, Frontier([(5,)]))
    assert [l.id for l in readers.reading(s2.traces["t"], "etl").layers] == ["l1-2"]
    with pytest.raises(Conflict, match="moved meanwhile"):
        readers.ack_reader(s2, r)
    with pytest.raises(Conflict, match="dropped meanwhile"):
        readers.ack_reader(readers.drop_reader(s, "t", "etl"), r)


def test_an_ack_after_a_merge_across_what_was_read_keeps_the_merged_layer_unread():
    t = make_trace("t", d=1).with_(upper=Frontier([(5,)]), layers=[layer(0, 1), layer(1, 2)], next_seq=2)
    # a new reader whose start lies beyond the new hold: its history may sit beyond 5
    late = readers.add_reader(state_with(t.with_(since=Frontier([(6,)]))), "t", "etl")
    r0 = readers.reading(late.traces["t"], "etl")
    merged = late.traces["t"].with_(layers=[layer(0, 1), layer(1, 3)], next_seq=3)
    with pytest.raises(Conflict, match="new reader"):
        readers.ack_reader(late.with_traces({"t": merged}), r0)
    # a new reader at since 0: its history is below 5, the times tell read from unread
    s = readers.add_reader(state_with(t), "t", "etl")
    r0 = readers.reading(s.traces["t"], "etl")
    merged = s.traces["t"].with_(layers=[layer(0, 1), layer(1, 3)], next_seq=3)
    assert readers.ack_reader(s.with_traces({"t": merged}), r0).traces["t"].holds["reader:etl"].seq == 1
    s = readers.ack_reader(s, r0)  # at 5, seq 2
    t = s.traces["t"].with_(layers=s.traces["t"].layers + [layer(2, 3)], upper=Frontier([(7,)]), next_seq=3)
    s = s.with_traces({"t": t})
    r1 = readers.reading(t, "etl")
    # an ingest seals (3, 4) and a merge joins it with the layer just read
    t2 = t.with_(layers=[layer(0, 1), layer(1, 2), layer(2, 4)], upper=Frontier([(8,)]), next_seq=4)
    s3 = readers.ack_reader(s.with_traces({"t": t2}), r1)
    h = s3.traces["t"].holds["reader:etl"]
    assert h.position == Frontier([(7,)]) and h.since == Frontier([(6,)])
    assert h.seq == 2, "the merged layer stays unread: its times tell read from unread"


def test_compaction_never_merges_across_a_reader_nor_advances_beyond_its_hold():
    t = make_trace("t", d=1).with_(upper=Frontier([(9,)]), since=Frontier([(9,)]),
                                   layers=[layer(0, 1, 8), layer(1, 2, 4), layer(2, 3, 2), layer(3, 4, 1)],
                                   next_seq=4)
    t = t.with_(holds={"reader:etl": Hold(hold_frontier(Frontier([(6,)])), 2, Frontier([(6,)]))})
    assert t.effective_since() == Frontier([(5,)])
    groups = plan_merges(t, full=True)
    assert [[l.id for l in g] for g in groups] == [["l0-1", "l1-2"], ["l2-3", "l3-4"]]
    with pytest.raises(Conflict):
        merge(state_with(t), "t", [["l1-2", "l2-3"]], [layer(1, 3)])


def test_dropping_a_reader_releases_its_hold_and_an_unknown_reader_is_one_line():
    t = make_trace("t", d=1).with_(upper=Frontier([(9,)]), since=Frontier([(9,)]))
    s = readers.add_reader(state_with(t), "t", "etl")
    assert s.traces["t"].effective_since() == Frontier([(8,)])
    s = readers.drop_reader(s, "t", "etl")
    assert s.traces["t"].holds == {} and s.traces["t"].effective_since() == Frontier([(9,)])
    with pytest.raises(StoreError, match=r"unknown reader 'etl' of trace 't' \(readers: none\)"):
        readers.drop_reader(s, "t", "etl")


def test_a_reader_and_a_pipeline_of_the_same_name_hold_apart_and_survive_the_log():
    t = make_trace("t", d=2).with_(holds={"etl": Hold(Frontier([(1, 1)]), 3)})
    s = readers.add_reader(state_with(t), "t", "etl")
    back = State.from_json(2, s.to_json()).traces["t"]
    assert set(back.holds) == {"etl", "reader:etl"}
    assert readers.readers(back) == {"etl": back.holds["reader:etl"]}
    acked = Hold(Frontier([(0, 1)]), 4, Frontier([(1, 2), (3, 0)]))
    again = State.from_json(3, s.with_traces({"t": back.with_(holds={"reader:etl": acked})}).to_json())
    assert again.traces["t"].holds["reader:etl"] == acked
    assert readers.describe_holder("etl") == "pipeline 'etl'"
    assert readers.describe_holder("reader:etl") == "reader 'etl' (ddcli changes)"

