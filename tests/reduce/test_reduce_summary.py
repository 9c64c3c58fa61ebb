"""Insertions into hot keys read a summary of the keys' old updates, not their history.

``ops/reduce/summaries/insertions.py``: for count, integer sum, min, max and top_k with one-dimensional
times, a task whose new updates only insert gets a few rows per key from DuckDB in place
of the key's old updates. Checked here without Spark: the output changes computed from the
summary equal those computed from the full old updates (the kernel is checked against the
plain reference elsewhere), the summary is small, and every case where a summary would
not be exact reads the old updates whole. Through a pipeline: tests/reduce/test_reduce_hot_keys.py
(``insert-only`` runs).
"""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ops.reduce.budget import with_old_updates
from ops.reduce.kernel import Count, Max, Min, Sum, TopK, reduce_delta

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.int64()), ("f", pa.float64()),
                    ("b", pa.bool_()), ("time", pa.int64()), ("diff", pa.int64())])
VALUES = ["v", "w", "f", "b"]
REDUCERS = {
    "count": Count(),
    "sum_int": Sum("w", "total"),
    "sum_bool": Sum("b", "yes"),
    "min": Min("w", "lo"),
    "max_string": Max("v", "hi"),
    "min_float": Min("f", "flo"),
    "top3_desc": TopK(3, ["w"], descending=True),
    "top2_two_columns": TopK(2, ["v", "w"]),
}


def _row(rng: random.Random, key: int) -> dict:
    return {"k": key, "v": rng.choice("pqrst"), "w": rng.randrange(-5, 6), "f": rng.choice([0.5, 1.5, -2.0, 3.0]),
            "b": rng.random() < 0.5}


def old_layers(tmp_path, rng: random.Random, keys: int, n: int, tmax: int) -> list[str]:
    """Old updates in two layer files: insertions, and retractions of inserted rows (so every
    accumulated row stays positive), with many ties in every order column."""
    rows, live = [], []
    for _ in range(n):
        if live and rng.random() < 0.25:
            r = live.pop(rng.randrange(len(live)))
            rows.append({**r, "time": rng.randrange(tmax), "diff": -1})
        else:
            r = _row(rng, rng.randrange(keys))
            live.append(r)
            rows.append({**r, "time": rng.randrange(tmax), "diff": 1})
    half = len(rows) // 2
    files = []
    for i, part in enumerate((rows[:half], rows[half:])):
        path = str(tmp_path / f"layer{i}.parquet")
        pq.write_table(pa.Table.from_pylist(part, SCHEMA).sort_by("k"), path)
        files.append(path)
    return files


def new_updates(rng: random.Random, keys: list[int], n: int, t0: int, tmax: int, diffs=(1, 1, 2)) -> pa.Table:
    rows = [{**_row(rng, rng.choice(keys)), "time": rng.randrange(t0, tmax), "diff": rng.choice(diffs)}
            for _ in range(n)]
    t = pa.Table.from_pylist(rows, SCHEMA)
    return t.append_column("_new", pa.array([True] * t.num_rows))


def consolidated(out: pa.Table) -> dict:
    acc: dict = {}
    for r in out.to_pylist():
        d = r.pop("diff")
        k = tuple(sorted((c, "nan" if isinstance(v, float) and math.isnan(v) else v) for c, v in r.items()))
        acc[k] = acc.get(k, 0) + d
    return {k: v for k, v in acc.items() if v}


def outputs(new: pa.Table, files: list[str], reducer, summary: bool) -> tuple[dict, int]:
    table = with_old_updates(new, files, ["k"], VALUES, reducer if summary else None)
    old_rows = table.num_rows - new.num_rows
    return consolidated(reduce_delta(table, ["k"], VALUES, 1, reducer)), old_rows


@pytest.mark.parametrize("name", sorted(REDUCERS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_summary_of_the_old_updates_gives_the_same_output_changes(tmp_path, name, seed):
    rng = random.Random(seed)
    reducer = REDUCERS[name]
    files = old_layers(tmp_path, rng, keys=6, n=1500, tmax=50)
    # touched keys: some old, one never seen before; insertions at many later times
    new = new_updates(rng, [0, 2, 3, 9], 60, 50, 80)
    full, full_rows = outputs(new, files, reducer, summary=False)
    summarised, summary_rows = outputs(new, files, reducer, summary=True)
    assert full, "the new insertions changed nothing: the case proves nothing"
    assert summarised == full
    # at most k rows per touched old key (3 of them) instead of their history
    assert full_rows > 300 and summary_rows <= 3 * 3, (full_rows, summary_rows)


def _fallback_cases(tmp_path, rng):
    files = old_layers(tmp_path, rng, keys=4, n=600, tmax=50)
    yield "a retraction among the new updates", files, new_updates(rng, [0, 1], 30, 50, 70, diffs=(1, 1, -1))
    neg = str(tmp_path / "negative.parquet")  # an old row with a negative multiplicity
    pq.write_table(pa.Table.from_pylist([{**_row(rng, 1), "time": 3, "diff": -1}], SCHEMA), neg)
    yield "an old row with a negative multiplicity", files + [neg], new_updates(rng, [0, 1], 30, 50, 70)
    nulls = str(tmp_path / "nulls.parquet")  # nulls in every value column of one old row
    pq.write_table(pa.Table.from_pylist([{"k": 1, "v": None, "w": None, "f": None, "b": None, "time": 4,
                                          "diff": 1}], SCHEMA), nulls)
    yield "a null in the order column", files + [nulls], new_updates(rng, [0, 1], 30, 50, 70)
    nan = str(tmp_path / "nan.parquet")
    pq.write_table(pa.Table.from_pylist([{**_row(rng, 1), "f": float("nan"), "time": 5, "diff": 1}], SCHEMA), nan)
    yield "a NaN in the order column", files + [nan], new_updates(rng, [0, 1], 30, 50, 70)


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_where_a_summary_would_not_be_exact_the_old_updates_are_read_whole(tmp_path, name):
    reducer = REDUCERS[name]
    order_cols = {"min": "w", "max_string": "v", "min_float": "f", "top3_desc": "w", "top2_two_columns": "v"}
    for case, files, new in _fallback_cases(tmp_path, random.Random(7)):
        full, full_rows = outputs(new, files, reducer, summary=False)
        summarised, summary_rows = outputs(new, files, reducer, summary=True)
        assert summarised == full, case
        if name in ("count", "sum_int") and case in ("a retraction among the new updates",
                                                     "an old row with a negative multiplicity"):
            continue  # invertible: the keys' totals stand for them while the keys stay present
        applies = case in ("a null in the order column", "a NaN in the order column")
        if applies and (name not in order_cols or (case.startswith("a NaN") and order_cols[name] != "f")):
            continue  # the null or NaN is not in this reducer's order column: the summary may be taken
        assert summary_rows == full_rows, f"{case}: {name} summarised the old updates"


def test_the_reduces_of_one_task_read_and_accumulate_the_old_rows_once(tmp_path, monkeypatch):
    """The reduces sharing a shuffle (ops/reduce/shared_shuffle.py) look up the same keys in the same
    files: the first accumulates their old rows, the others reuse them, with the same
    output changes as a lookup of their own; other keys or files are read afresh."""
    import ops.reduce.budget
    import ops.reduce.old_updates
    calls = []
    real = ops.reduce.budget.accumulate_old_rows
    monkeypatch.setattr(ops.reduce.budget, "accumulate_old_rows", lambda *a: calls.append(a[2]) or real(*a))
    monkeypatch.setattr(ops.reduce.old_updates.OldLookup, "last", None)
    rng = random.Random(5)
    files = old_layers(tmp_path, rng, keys=6, n=1500, tmax=50)
    new = new_updates(rng, [0, 2, 3, 9], 60, 50, 80)
    shared = {name: outputs(new, files, r, summary=True) for name, r in REDUCERS.items()}
    assert len(calls) == 1, calls
    for name, r in REDUCERS.items():  # each alone: a fresh lookup every time
        monkeypatch.setattr(ops.reduce.old_updates.OldLookup, "last", None)
        assert outputs(new, files, r, summary=True) == shared[name], name
    assert len(calls) == 1 + len(REDUCERS)
    other = new_updates(rng, [1, 4], 20, 50, 80)  # other touched keys: not the cached rows
    summarised, summary_rows = outputs(other, files, REDUCERS["count"], summary=True)
    assert summarised == outputs(other, files, REDUCERS["count"], summary=False)[0] and summary_rows == 2
    assert len(calls) == 2 + len(REDUCERS)


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_an_append_only_history_is_summarised_without_summing_it_per_row(tmp_path, name):
    """Old updates that only insert, the same row several times at several times (diffs 1
    and 2), with ties: the summary, taken from the updates as they are, gives the same
    output changes as the old updates read whole."""
    rng = random.Random(17)
    rows = []
    for _ in range(400):
        r = _row(rng, rng.randrange(4))
        for _ in range(rng.choice((1, 1, 2, 3))):  # the same row inserted again later
            rows.append({**r, "time": rng.randrange(50), "diff": rng.choice((1, 2))})
    files = []
    for i, part in enumerate((rows[::2], rows[1::2])):
        files.append(str(tmp_path / f"append{i}.parquet"))
        pq.write_table(pa.Table.from_pylist(part, SCHEMA).sort_by("k"), files[-1])
    new = new_updates(rng, [0, 1, 7], 40, 50, 80)
    full, full_rows = outputs(new, files, REDUCERS[name], summary=False)
    summarised, summary_rows = outputs(new, files, REDUCERS[name], summary=True)
    assert full and summarised == full
    assert full_rows > 300 and summary_rows <= 3 * 2, (full_rows, summary_rows)


def test_a_task_releases_its_lookup_when_it_ends(tmp_path, monkeypatch):
    """A worker keeps a task's lookup (and the old rows it holds) only while reduces of the
    same task may reuse it: a reduce's own task releases it at its end, a shared task at
    the end of its last reduce."""
    from ops.reduce.old_updates import OldLookup
    monkeypatch.setattr(OldLookup, "last", None)
    rng = random.Random(9)
    files = old_layers(tmp_path, rng, keys=4, n=300, tmax=20)
    new = new_updates(rng, [0, 1], 10, 20, 30)
    with OldLookup.shared():
        first = outputs(new, files, REDUCERS["count"], summary=True)
        OldLookup.task_ended()  # a reduce of the shared task ends: the next one reuses the rows
        kept = OldLookup.last
        assert kept is not None
        assert outputs(new, files, REDUCERS["count"], summary=True) == first and OldLookup.last is kept
    assert OldLookup.last is None
    with pytest.raises(Exception):
        kept.con.sql("SELECT 1").fetchall()  # closed: its memory is given back
    outputs(new, files, REDUCERS["count"], summary=True)
    assert OldLookup.last is not None
    OldLookup.task_ended()
    assert OldLookup.last is None


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_a_reduce_without_a_key_is_summarised_as_one_group(tmp_path, name):
    """A global reduce (SQL's aggregate without GROUP BY, ORDER BY ... LIMIT) has no key
    columns: its summary is that of one group."""
    rng = random.Random(5)
    reducer = REDUCERS[name]
    files = old_layers(tmp_path, rng, keys=6, n=800, tmax=50)
    # beyond every old value at both ends, so that min, max and the top rows change too
    extremes = [{"k": rng.choice([0, 2, 9]), "v": rng.choice("az"), "w": rng.choice([-10, 10]),
                 "f": rng.choice([-9.0, 9.0]), "b": True, "time": rng.randrange(50, 80), "diff": 1} for _ in range(6)]
    new = pa.concat_tables([new_updates(rng, [0, 2, 9], 40, 50, 80),
                            pa.Table.from_pylist(extremes, SCHEMA).append_column("_new", pa.array([True] * 6))])
    values = ["k", *VALUES]

    def changes(summary: bool) -> tuple[dict, int]:
        table = with_old_updates(new, files, [], values, reducer if summary else None)
        return consolidated(reduce_delta(table, [], values, 1, reducer)), table.num_rows - new.num_rows

    (full, full_rows), (summarised, summary_rows) = changes(False), changes(True)
    assert full, "the new insertions changed nothing: the case proves nothing"
    assert summarised == full
    assert full_rows > 300 and summary_rows <= 3, (full_rows, summary_rows)
