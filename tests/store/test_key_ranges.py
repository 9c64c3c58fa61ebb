"""Key ranges from row-group statistics (storage/key_ranges.py): cuts of about equal rows,
none where a key is hot, None where a type or a file does not allow them, and filters that
give every row to exactly one range."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from storage.key_ranges import file_keys, files_in_range, range_bounds, range_filter


def written(tmp_path, name, keys, group_rows, **options):
    path = str(tmp_path / name)
    pq.write_table(pa.table({"k": keys}), path, row_group_size=group_rows, **options)
    return path


def bounds(files, kind, parts):
    keys = file_keys(files, kind, "k")
    return None if keys is None else range_bounds(keys, parts)


def test_ranges_cut_the_row_groups_into_about_equal_rows(tmp_path):
    ints = written(tmp_path, "ints.parquet", pa.array(list(range(100)), pa.int64()), 10)
    assert bounds([ints], pa.int64(), 4) == [30, 50, 80]  # groups of 10: cuts at 25, 50, 75 rows
    assert bounds([ints], pa.int64(), 1) == []
    # one value in every group (a hot key): no range to cut; groups of nulls only are the first range's
    hot = written(tmp_path, "hot.parquet", pa.array([None] * 20 + [7] * 40, pa.int64()), 10)
    assert bounds([hot], pa.int64(), 3) == []
    # strings, two files whose groups interleave
    a = written(tmp_path, "a.parquet", pa.array(["a", "b", "c", "d"] * 5, pa.string()).sort(), 5)
    b = written(tmp_path, "b.parquet", pa.array(["b", "e"] * 10, pa.string()).sort(), 5)
    assert bounds([a, b], pa.string(), 2) == ["c"]
    # a type without ranges, a file without statistics, a file without the column
    assert bounds([ints], pa.float64(), 2) is None
    bare = written(tmp_path, "bare.parquet", pa.array(list(range(20)), pa.int64()), 10, write_statistics=False)
    assert bounds([ints, bare], pa.int64(), 2) is None
    assert file_keys([ints], pa.int64(), "other") is None


def test_a_range_reads_only_the_files_its_keys_may_be_in(tmp_path):
    low = written(tmp_path, "low.parquet", pa.array([None, 1, 2, 3], pa.int64()), 2)
    mid = written(tmp_path, "mid.parquet", pa.array([3, 5, 9], pa.int64()), 2)
    high = written(tmp_path, "high.parquet", pa.array([10, 20], pa.int64()), 2)
    nulls = written(tmp_path, "nulls.parquet", pa.array([None, None], pa.int64()), 2)
    keys = file_keys([low, mid, high, nulls], pa.int64(), "k")
    cuts = [3, 10]
    assert [files_in_range(keys, cuts, i) for i in range(3)] == [[0, 3], [0, 1], [2]]
    # every row of each range is in the files chosen for it
    tables = [pq.read_table(p) for p in (low, mid, high, nulls)]
    for i in range(3):
        everywhere = sum(t.filter(range_filter("k", cuts, i)).num_rows for t in tables)
        chosen = sum(tables[j].filter(range_filter("k", cuts, i)).num_rows for j in files_in_range(keys, cuts, i))
        assert chosen == everywhere > 0


def test_every_row_is_in_exactly_one_range(tmp_path):
    keys = pa.array([None, 3, 1, None, 10, 7, 7, 2, 30, 11], pa.int64())
    table = pa.table({"k": keys, "i": pa.array(range(len(keys)))})
    bounds = [3, 10]
    seen = []
    for i in range(len(bounds) + 1):
        seen += table.filter(range_filter("k", bounds, i))["i"].to_pylist()
    assert sorted(seen) == list(range(len(keys)))
    assert table.filter(range_filter("k", bounds, 0))["k"].to_pylist() == [None, 1, None, 2]
    assert table.filter(range_filter("k", bounds, 2))["k"].to_pylist() == [10, 30, 11]
    assert range_filter("k", [], 0) is None
