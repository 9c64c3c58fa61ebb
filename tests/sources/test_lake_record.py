"""The record of how far a trace took each lake table: a pure change of the metadata,
committed with the updates, refused when another command moved it meanwhile."""

from __future__ import annotations

import pyarrow as pa
import pytest

from storage.errors import Conflict
from storage.lattice import Frontier
from storage.state.transitions import State, took_lake_table
from storage.state.trace import Trace


def state_with(sources: dict) -> State:
    t = Trace("t", pa.schema([("k", pa.int64())]), ["k"], 1, Frontier.minimum(1), Frontier([(3,)], 1),
              sources=sources)
    return State(4, {"t": t}, {})


def test_the_record_moves_only_from_what_the_command_read():
    s = took_lake_table(state_with({}), "t", "delta:/a", None, {"version": 2})
    assert s.traces["t"].sources == {"delta:/a": {"version": 2}}
    s = took_lake_table(s, "t", "delta:/a", {"version": 2}, {"version": 5})
    assert s.traces["t"].sources == {"delta:/a": {"version": 5}}
    with pytest.raises(Conflict, match="another command"):
        took_lake_table(s, "t", "delta:/a", {"version": 2}, {"version": 4})
    with pytest.raises(Conflict, match="removed"):
        took_lake_table(s, "gone", "delta:/a", None, {"version": 1})


def test_the_record_survives_the_metadata_json():
    t = state_with({"iceberg:u-1": {"snapshot": 7, "sequence": 2, "time": 2}}).traces["t"]
    again = Trace.from_json("t", t.to_json())
    assert again.sources == t.sources
    assert "sources" not in state_with({}).traces["t"].to_json(), "a trace without lake tables is written as before"
