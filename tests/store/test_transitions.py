"""The named changes of the store's metadata (storage/state/transitions.py), with no IO.

Every change takes a State and returns the next one: checked here on hand-built traces
and layers, including the conflicts each raises when what it depends on moved, and that
none of them touches the state it was given.
"""

from __future__ import annotations

import copy

import pyarrow as pa
import pytest

from storage.errors import Conflict, StoreError
from storage.lattice import Frontier
from storage.layer import Layer
from storage.state import transitions as T
from storage.state.trace import Hold, Trace

SCHEMA = pa.schema([("word", pa.string())])


def f(*times: int) -> Frontier:
    return Frontier([(t,) for t in times], 1)


def layer(lid: str, seq_lo: int, seq_hi: int, rows: int = 10, since: Frontier | None = None) -> Layer:
    return Layer(lid, [], f(seq_lo), f(seq_hi), since if since is not None else f(0), seq_lo, seq_hi, rows, rows * 8)


def trace(name: str = "t", layers=(), pending=(), upper: int = 3, **kw) -> Trace:
    return Trace(name, SCHEMA, ["word"], 1, f(0), f(upper), list(layers), list(pending),
                 next_seq=len(layers), **kw)


def state(*traces: Trace, pipelines: dict | None = None) -> T.State:
    return T.State(7, {t.name: t for t in traces}, dict(pipelines or {}))


def frozen(s: T.State):
    """A deep copy to compare with: a transition must leave its input as it was."""
    return copy.deepcopy(s.to_json())


# ---------------------------------------------------------------- seal and ingest


def test_seal_appends_the_sealed_layers_replaces_pending_and_moves_the_upper():
    kept = layer("k", -1, -1)
    t = trace(layers=[layer("a", 0, 1)], pending=[layer("p1", -1, -1), layer("p2", -1, -1)])
    sealed = T.Sealed(layers=[layer("b", 1, 2)], replaced_pending=["p1", "p2"], kept_pending=[kept], moves_upper=True)
    out = T.seal(t, sealed, f(9))
    assert [l.id for l in out.layers] == ["a", "b"]
    assert [l.id for l in out.pending] == ["k"]
    assert out.upper == f(9) and out.next_seq == t.next_seq + 1
    assert sealed.written() == sealed.layers + [kept]
    # a seal that does not move the upper counts no seal, and leaves pending alone
    same = T.seal(t, T.Sealed(layers=[layer("c", 1, 1)]), t.upper)
    assert same.next_seq == t.next_seq and [l.id for l in same.pending] == ["p1", "p2"]


def test_ingest_creates_the_trace_remembers_its_files_and_keeps_pending_updates():
    proto = trace(layers=[], upper=0)
    s = state()
    before = frozen(s)
    sealed = T.Sealed(layers=[layer("n", 0, 1)], moves_upper=True)
    out = T.ingest(s, proto, None, sealed, f(5), [layer("w", -1, -1)], {"a.csv": "sha-a"})
    t = out.traces["t"]
    assert [l.id for l in t.layers] == ["n"] and [l.id for l in t.pending] == ["w"]
    assert t.upper == f(5) and "sha-a" in t.ingested
    assert frozen(s) == before and out.version == s.version


def test_ingest_conflicts_when_the_trace_moved_or_the_file_came_in_meanwhile():
    seen = trace(layers=[layer("a", 0, 1)])
    sealed = T.Sealed(layers=[layer("n", 1, 2)], moves_upper=True)
    with pytest.raises(Conflict, match="created by another command"):
        T.ingest(state(seen), seen, None, sealed, f(5), [], {"a.csv": "x"})
    with pytest.raises(Conflict, match="removed while ingesting"):
        T.ingest(state(), seen, seen, sealed, f(5), [], {"a.csv": "x"})
    moved = seen.with_(upper=f(4), next_seq=2)
    with pytest.raises(Conflict, match="changed while ingesting"):
        T.ingest(state(moved), seen, seen, sealed, f(5), [], {"a.csv": "x"})
    taken = seen.with_(ingested={"x": 0})
    with pytest.raises(Conflict, match="a.csv was ingested into trace 't' by another command"):
        T.ingest(state(taken), taken.with_(ingested={}), taken.with_(ingested={}), sealed, f(5), [], {"a.csv": "x"})


def test_a_layer_advanced_past_a_new_hold_is_refused():
    seen = trace(layers=[layer("a", 0, 1)])
    held = seen.with_(since=f(4), holds={"reader": Hold(f(1), 1)})
    advanced = T.Sealed(layers=[layer("n", 1, 2, since=f(4))], moves_upper=True)
    with pytest.raises(Conflict, match="a reader put a hold on trace 't' at 1"):
        T.ingest(state(held), seen, seen, advanced, f(5), [], {"b.csv": "y"})
    with pytest.raises(Conflict, match="a reader put a hold"):
        T.advance(state(held), seen, advanced, f(5), None)


def test_advance_moves_the_since_only_forward_and_seals_with_the_upper():
    t = trace(layers=[layer("a", 0, 1)]).with_(since=f(2))
    s = state(t)
    before = frozen(s)
    assert T.advance(s, t, None, None, f(1)).traces["t"].since == f(2), "a since never moves back"
    assert T.advance(s, t, None, None, f(3)).traces["t"].since == f(3)
    sealed = T.advance(s, t, T.Sealed(layers=[layer("b", 1, 2)], moves_upper=True), f(8), None).traces["t"]
    assert sealed.upper == f(8) and [l.id for l in sealed.layers] == ["a", "b"]
    assert frozen(s) == before
    with pytest.raises(Conflict, match="was removed"):
        T.advance(state(), t, None, None, f(3))
    with pytest.raises(Conflict, match="changed while advancing"):
        T.advance(state(t.with_(next_seq=5)), t, T.Sealed(moves_upper=True), f(8), None)


# ---------------------------------------------------------------- holds and merges


def test_holds_are_added_and_released():
    t = T.with_hold(trace(), "p", f(2), 3)
    assert t.holds == {"p": Hold(f(2), 3)} and t.effective_since() == f(0)
    assert T.without_hold(t, "p").holds == {} and T.without_hold(t, "other").holds == t.holds


def test_plan_merges_is_geometric_and_never_crosses_a_hold():
    sizes = [64, 16, 8, 8]
    t = trace(layers=[layer(str(i), i, i + 1, rows) for i, rows in enumerate(sizes)])
    assert [[l.id for l in g] for g in T.plan_merges(t, False)] == [["1", "2"]], "16 + 8 within 2x; 64 not"
    assert [[l.id for l in g] for g in T.plan_merges(t, True)] == [["0", "1", "2", "3"]]
    held = t.with_(holds={"r": Hold(f(0), 2)})  # between layers 1 and 2
    assert [[l.id for l in g] for g in T.plan_merges(held, True)] == [["0", "1"], ["2", "3"]]


def test_patient_merges_leave_small_layers_until_eight_lie_side_by_side():
    """After a pipeline's run (``patient``) small layers wait for each other; a group with
    a layer of a row group or more is merged as the geometric rule says."""
    big, small = T.SMALL_LAYER_ROWS * 4, 100
    ids = lambda groups: [[l.id for l in g] for g in groups]  # noqa: E731
    seven = trace(layers=[layer("b", 0, 1, big)] + [layer(str(i), i + 1, i + 2, small) for i in range(7)])
    assert ids(T.plan_merges(seven, False)), "the geometric rule merges small neighbours"
    assert ids(T.plan_merges(seven, False, patient=True)) == []
    eight = seven.with_(layers=seven.layers + [layer("7", 8, 9, small)])
    assert ids(T.plan_merges(eight, False, patient=True)) == [[str(i) for i in range(8)]]
    mixed = trace(layers=[layer("b", 0, 1, T.SMALL_LAYER_ROWS), layer("s", 1, 2, T.SMALL_LAYER_ROWS - 1)])
    assert ids(T.plan_merges(mixed, False, patient=True)) == [["b", "s"]], "within 2x of a large layer"
    assert ids(T.plan_merges(seven, True, patient=True)) == [["b"] + [str(i) for i in range(7)]], "full merges all"


def test_merge_replaces_adjacent_layers_or_backs_off():
    t = trace(layers=[layer("a", 0, 1), layer("b", 1, 2), layer("c", 2, 3)])
    s = state(t)
    before = frozen(s)
    out = T.merge(s, "t", [["a", "b"]], [layer("ab", 0, 2, 20)])
    assert [l.id for l in out.traces["t"].layers] == ["ab", "c"]
    assert frozen(s) == before
    with pytest.raises(Conflict, match="changed while compacting"):
        T.merge(state(t.with_(layers=t.layers[1:])), "t", [["a", "b"]], [layer("ab", 0, 2)])
    with pytest.raises(Conflict, match="put a hold on trace 't' while compacting"):
        T.merge(state(t.with_(holds={"r": Hold(f(0), 1)})), "t", [["a", "b"]], [layer("ab", 0, 2)])
    with pytest.raises(Conflict, match="removed while compacting"):
        T.merge(state(), "t", [["a", "b"]], [layer("ab", 0, 2)])


# ---------------------------------------------------------------- pipelines


def _run(**kw) -> T.RunCommit:
    out = trace("out", upper=0, owner="p")
    st = trace("p.reduce_1", upper=0, owner="p")
    args = dict(pipeline="p", runs=0, record={"runs": 1}, frontier=f(3), d=1, inputs={"t": 1},
                targets={"out": False, "p.reduce_1": True}, protos={"out": out, "p.reduce_1": st},
                written={"out": layer("o1", 0, 1), "p.reduce_1": layer("s1", 0, 1)},
                held={"out": layer("h1", -1, -1)}, unheld=["t"])
    args.update(kw)
    return T.RunCommit(**args)


def test_append_run_holds_its_inputs_and_appends_to_its_outputs_and_state():
    s = state(trace(layers=[layer("a", 0, 1)]).with_(since=f(1)))
    before = frozen(s)
    out = T.append_run(s, _run())
    assert out.traces["t"].holds == {"p": Hold(f(3), 1)}
    o, st = out.traces["out"], out.traces["p.reduce_1"]
    assert [l.id for l in o.layers] == ["o1"] and [l.id for l in o.pending] == ["h1"] and o.upper == f(3)
    assert o.since == f(1), "an output answers no time its unheld input cannot tell apart"
    assert [l.id for l in st.layers] == ["s1"] and st.since == f(3), "state is compacted to the frontier"
    assert out.pipelines["p"] == {"runs": 1}
    assert frozen(s) == before


def test_append_run_refuses_a_race_with_another_run_or_a_compaction():
    s = state(trace(layers=[layer("a", 0, 1)]), pipelines={"p": {"runs": 1}})
    with pytest.raises(Conflict, match="another run of pipeline 'p' committed first"):
        T.append_run(s, _run())
    across = state(trace(layers=[layer("a", 0, 2)]))
    with pytest.raises(Conflict, match="compacted across this run's position"):
        T.append_run(across, _run())
    with pytest.raises(Conflict, match="input trace 't' was removed"):
        T.append_run(state(), _run())


def test_a_rebuild_replaces_the_outputs_and_drops_state_the_new_version_lacks():
    old_out = trace("out", layers=[layer("x", 0, 1)], owner="p")
    gone = trace("p.join_4", owner="p")
    s = state(trace(layers=[layer("a", 0, 1)]), old_out, gone, pipelines={"p": {"runs": 2}})
    out = T.append_run(s, _run(runs=2, rebuild=True))
    assert [l.id for l in out.traces["out"].layers] == ["o1"] and "p.join_4" not in out.traces


def test_a_partial_rebuild_keeps_reused_state_releases_what_the_new_version_no_longer_reads_or_writes():
    kept = trace("p.filter_0", layers=[layer("k", 0, 1)], owner="p")
    gone = trace("p.join_4", owner="p")
    dropped_output = trace("old_out", layers=[layer("y", 0, 1)], pending=[layer("w", -1, -1)], owner="p")
    no_longer_read = T.with_hold(trace("u", layers=[layer("b", 0, 1)]), "p", f(2), 1)
    other = trace("other", layers=[layer("c", 0, 1)]).with_(since=f(2))
    s = state(trace(layers=[layer("a", 0, 1)]), kept, gone, dropped_output, no_longer_read, other,
              pipelines={"p": {"runs": 2}})
    before = frozen(s)
    run = _run(runs=2, rebuild=True, record={"runs": 3, "state": ["p.filter_0", "p.reduce_1"]},
               released=["old_out"], inputs={"t": 1, "other": 1}, unheld=["t", "other"], reads={"out": ["t"]})
    out = T.append_run(s, run)
    assert [l.id for l in out.traces["p.filter_0"].layers] == ["k"], "reused state is kept as it is"
    assert "p.join_4" not in out.traces, "state the new record does not name is removed"
    assert out.traces["old_out"].owner is None and out.traces["old_out"].pending == [], "an output no longer written"
    assert [l.id for l in out.traces["old_out"].layers] == ["y"]
    assert out.traces["u"].holds == {}, "an input no longer read is released"
    assert out.traces["out"].since == f(0), "an output's since follows only the inputs it was computed from"
    assert frozen(s) == before


def test_drop_releases_holds_removes_state_and_outputs_or_keeps_them_plain():
    t = T.with_hold(trace(layers=[layer("a", 0, 1)]), "p", f(2), 1)
    out = trace("out", pending=[layer("w", -1, -1)], owner="p")
    s = state(t, out, trace("p.reduce_1", owner="p"), pipelines={"p": {"runs": 1}})
    before = frozen(s)
    dropped = T.drop(s, "p", ["out"], keep_outputs=False)
    assert set(dropped.traces) == {"t"} and dropped.traces["t"].holds == {} and dropped.pipelines == {}
    kept = T.drop(s, "p", ["out"], keep_outputs=True)
    assert kept.traces["out"].owner is None and kept.traces["out"].pending == []
    assert "p.reduce_1" not in kept.traces
    assert frozen(s) == before
    read = state(t, T.with_hold(out, "q", f(0), 0), pipelines={"p": {"runs": 1}})
    with pytest.raises(StoreError, match="got a reader meanwhile"):
        T.drop(read, "p", ["out"], keep_outputs=False)
    with pytest.raises(StoreError, match="unknown pipeline 'p'"):
        T.drop(state(t), "p", [], keep_outputs=False)
