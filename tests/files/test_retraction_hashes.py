"""The retraction check of ``ingest`` by kept row hashes, against a reference.

Large layers keep each row's first column, hash and count beside them
(storage/writes/retractions.py); the check reads those instead of the rows, and goes to
the rows only when a hash does not add up. Random rows of every column type (doubles of
mixed magnitudes and signed zeros, decimals, dates, timestamps, text, nulls), several
ingests so that some layers are large (the threshold lowered) and some small, then
retractions that restate live rows exactly, that change one value, and that retract a
row more times than it lives: the rows reported are the reference's, counted in Python.
"""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.store import Store
from storage.writes.retractions import checker

SCHEMA = pa.schema([("k", pa.int64()), ("x", pa.float64()), ("m", pa.decimal128(12, 2)),
                    ("d", pa.date32()), ("ts", pa.timestamp("us")), ("s", pa.string()),
                    ("time", pa.int64()), ("diff", pa.int64())])


def _row(rng: random.Random) -> tuple:
    def maybe(v):
        return None if rng.random() < 0.1 else v
    return (maybe(rng.randrange(40)),
            maybe(rng.choice([0.0, -0.0, 1e-300, -2.5e17, rng.uniform(-1e6, 1e6)])),
            maybe(decimal.Decimal(rng.randrange(-10**6, 10**6)) / 100),
            maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(900))),
            maybe(dt.datetime(2021, 5, 1) + dt.timedelta(microseconds=rng.randrange(10**12))),
            maybe(rng.choice(["", "a", "b", "é", "long text " * rng.randrange(1, 4)])))


def _write(path: str, rows: list[tuple], time: int, diffs: list[int]) -> str:
    cols = list(zip(*rows)) + [[time] * len(rows), diffs]
    pq.write_table(pa.table(cols, schema=SCHEMA), path)
    return path


def _key(row: tuple) -> tuple:
    """A row as the check compares rows: -0.0 is 0.0 (IS NOT DISTINCT FROM)."""
    return tuple(0.0 if isinstance(v, float) and v == 0 else v for v in row)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_rows_a_retraction_drives_below_zero_are_the_references(tmp_path, monkeypatch, seed):
    monkeypatch.setattr("storage.layer.SUMMARISED_ROWS", 300)
    rng = random.Random(seed)
    store = Store(str(tmp_path / "store"))
    counts: dict[tuple, int] = {}
    live: list[tuple] = []
    for i, size in enumerate([700, 400, 90, 30]):  # large layers (kept hashes) and small ones
        rows = [_row(rng) for _ in range(size)]
        store.ingest("t", [_write(str(tmp_path / f"base{i}.parquet"), rows, i + 1, [1] * size)])
        for r in rows:
            counts[_key(r)] = counts.get(_key(r), 0) + 1
        live += rows
    for step in range(4):
        retracted, diffs = [], []
        for r in rng.sample(live, 60):
            kind = rng.random()
            if kind < 0.6:
                retracted.append(r)  # restated exactly (a signed zero may come back with the other sign)
                retracted[-1] = tuple(-v if isinstance(v, float) and v == 0 and rng.random() < 0.5 else v for v in r)
            elif kind < 0.8:
                retracted.append(r[:5] + ("changed",))  # a value that is not the live row's
            else:
                retracted.append(r)
            diffs.append(-1 if kind < 0.8 else -(counts.get(_key(r), 0) + 1))  # more than it lives
        added = [_row(rng) for _ in range(20)]
        rows, all_diffs = retracted + added, diffs + [1] * len(added)
        found: list = []
        store.ingest("t", [_write(str(tmp_path / f"r{step}.parquet"), rows, 10 + step, all_diffs)],
                     prepare=checker(store, strict=False, found=found))
        touched = {_key(r) for r, d in zip(rows, all_diffs) if d < 0}
        for r, d in zip(rows, all_diffs):
            counts[_key(r)] = counts.get(_key(r), 0) + d
        expected = sorted((r for r in touched if counts[r] < 0), key=repr)
        reported = found[0] if found else None
        assert (reported.rows if reported else 0) == len(expected), (step, expected[:3])
        if expected:
            first = _key(tuple(reported.first[c] for c in ("k", "x", "m", "d", "ts", "s")))
            assert first in expected and counts[first] == reported.first_count
        live = [r for r in live if counts.get(_key(r), 0) > 0] + added
    kept = glob.glob(str(tmp_path / "store" / "traces" / "t" / "*.totals-rows*"))
    assert kept, "the large layers keep their row hashes"


def test_a_damaged_row_hash_file_is_made_again(tmp_path, monkeypatch):
    """Kept row hashes are named by their bytes' digest: damaged ones are never read."""
    monkeypatch.setattr("storage.layer.SUMMARISED_ROWS", 100)
    rng = random.Random(9)
    store = Store(str(tmp_path / "store"))
    rows = [_row(rng) for _ in range(500)]
    store.ingest("t", [_write(str(tmp_path / "base.parquet"), rows, 1, [1] * len(rows))])
    found: list = []
    store.ingest("t", [_write(str(tmp_path / "r1.parquet"), rows[:3], 2, [-1] * 3)],
                 prepare=checker(store, strict=False, found=found))
    assert not found or found[0].rows == 0
    kept, = glob.glob(str(tmp_path / "store" / "traces" / "t" / "*.totals-rows*"))
    data = bytearray(open(kept, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(kept, "wb").write(bytes(data))
    monkeypatch.setattr("storage.layer._kept_summaries", {})  # as a new process would
    found = []
    store.ingest("t", [_write(str(tmp_path / "r2.parquet"), [rows[3], rows[3]], 3, [-1, -1])],
                 prepare=checker(store, strict=False, found=found))
    expected = 1 if sum(_key(r) == _key(rows[3]) for r in rows) < 2 else 0
    assert (found[0].rows if found else 0) == expected
    again = glob.glob(str(tmp_path / "store" / "traces" / "t" / "*.totals-rows*"))
    assert again and all(open(p, "rb").read() != bytes(data) for p in again)


def test_row_hashes_that_cannot_be_written_leave_the_check_to_the_rows(tmp_path, monkeypatch):
    """A full disk where the row hashes would be kept: the check reads the rows, as
    without them, and reports what the reference says; the ingest stands."""
    from storage import faults
    monkeypatch.setattr("storage.layer.SUMMARISED_ROWS", 100)
    rng = random.Random(11)
    store = Store(str(tmp_path / "store"))
    rows = [_row(rng) for _ in range(400)]
    store.ingest("t", [_write(str(tmp_path / "base.parquet"), rows, 1, [1] * len(rows))])
    monkeypatch.setenv("DDCLI_FAULT", "layer.totals=enospc")
    faults.reset()
    found: list = []
    store.ingest("t", [_write(str(tmp_path / "r.parquet"), [rows[0], rows[0]], 2, [-1, -1])],
                 prepare=checker(store, strict=False, found=found))
    lives = sum(_key(r) == _key(rows[0]) for r in rows)
    assert found[0].rows == (1 if lives < 2 else 0)
    assert not glob.glob(str(tmp_path / "store" / "traces" / "t" / "*.totals-rows*"))
    assert sum(l.rows for l in store.trace("t").layers) > len(set(map(_key, rows))), "the ingest stands"
