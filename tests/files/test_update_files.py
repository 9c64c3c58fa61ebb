"""Update files: the happy paths, and a corpus of bad inputs that must each fail in one clear line."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.errors import UpdateFileError
from storage.files.read import UpdateBatch, read_update_file

BAD = Path(__file__).parent.parent / "data" / "bad_inputs"
CASES = json.loads((BAD / "cases.json").read_text())


def write(path: Path, content) -> str:
    if isinstance(content, pa.Table):
        pq.write_table(content, path)
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def schema_of(spec: dict[str, str] | None) -> pa.Schema | None:
    if spec is None:
        return None
    return pa.schema([(name, pa.type_for_alias(t)) for name, t in spec.items()])


def expect_error(path, match: str, **kw) -> UpdateFileError:
    with pytest.raises(UpdateFileError) as info:
        read_update_file(path, **kw)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert os.path.basename(str(path)) in msg, msg
    assert match in msg, msg
    return info.value


# ---------------------------------------------------------------- happy paths


def test_csv_d1_default_diff(tmp_path):
    p = write(tmp_path / "words.csv", "word,n,time\nfoo,1,0\nbar,2,3\n")
    b = read_update_file(p)
    assert isinstance(b, UpdateBatch)
    assert b.d == 1 and b.path == p
    assert b.data.schema == pa.schema([("word", pa.string()), ("n", pa.int64())])
    assert b.data.to_pylist() == [{"word": "foo", "n": 1}, {"word": "bar", "n": 2}]
    assert [t.tolist() for t in b.times] == [[0, 3]]
    assert b.diff.dtype == np.int64 and b.diff.tolist() == [1, 1]
    assert b.times[0].dtype == np.int64
    assert b.sha256 == hashlib.sha256(Path(p).read_bytes()).hexdigest()


def test_csv_d2_with_diff_and_inferred_types(tmp_path):
    p = write(
        tmp_path / "u.csv",
        "word,x,ok,day,time_0,time_1,diff\n"
        'foo,1.5,true,2024-01-02,0,1,-1\n"b,""ar",2,false,2024-01-03,3,4,2\n , ,  ,,5,6,0\n',
    )
    b = read_update_file(p)
    assert b.d == 2
    assert b.data.schema.types == [pa.string(), pa.float64(), pa.bool_(), pa.date32()]
    assert b.data.column("word").to_pylist() == ["foo", 'b,"ar', " "]
    assert b.data.column("x").to_pylist() == [1.5, 2.0, None]
    assert [t.tolist() for t in b.times] == [[0, 3, 5], [1, 4, 6]]
    assert b.diff.tolist() == [-1, 2, 0]  # a zero diff is allowed (dropped later)


def test_csv_quoted_newline_and_blanks(tmp_path):
    p = write(tmp_path / "q.csv", 'word,time\n"two\nlines",1\n  plain , +2 \n')
    b = read_update_file(p)
    assert b.data.column("word").to_pylist() == ["two\nlines", "  plain "]
    assert b.times[0].tolist() == [1, 2]


def test_time_option(tmp_path):
    p = write(tmp_path / "w.csv", "word\nfoo\nbar\n")
    b = read_update_file(p, time=(7,))
    assert b.d == 1 and b.times[0].tolist() == [7, 7]
    b = read_update_file(p, time=(1, 2), d=2)
    assert b.d == 2 and [t.tolist() for t in b.times] == [[1, 1], [2, 2]]


def test_blank_diff_means_one(tmp_path):
    p = write(tmp_path / "w.csv", "word,time,diff\nfoo,0,\nbar,1,-2\n")
    assert read_update_file(p).diff.tolist() == [1, -2]
    p = write(tmp_path / "w.parquet", pa.table({"w": ["a", "b"], "time": [0, 0], "diff": [None, 5]}))
    assert read_update_file(p).diff.tolist() == [1, 5]


def test_time_option_as_text(tmp_path):
    p = write(tmp_path / "w.csv", "word\nfoo\n")
    b = read_update_file(p, time="(3,4)")
    assert b.d == 2 and [t.tolist() for t in b.times] == [[3], [4]]
    expect_error(p, "--time: bad time", time="(3,x)")


def test_schema_given_casts_and_orders(tmp_path):
    schema = pa.schema([("n", pa.int32()), ("word", pa.string()), ("x", pa.float64())])
    p = write(tmp_path / "w.csv", "word,x,n,time\nfoo,1,7,0\nbar,,-2,1\n")
    b = read_update_file(p, schema=schema, d=1)
    assert b.data.schema == schema
    assert b.data.to_pylist() == [{"n": 7, "word": "foo", "x": 1.0}, {"n": -2, "word": "bar", "x": None}]


def test_jsonl(tmp_path):
    p = write(
        tmp_path / "w.jsonl",
        '{"word":"a","n":1,"time":0}\n\n{"word":"b","n":2,"time":5,"diff":-1}\n{"word":"c","time":6,"diff":3}\n',
    )
    b = read_update_file(p)
    assert b.d == 1
    assert b.data.column("word").to_pylist() == ["a", "b", "c"]
    assert b.data.column("n").to_pylist() == [1, 2, None]
    assert b.times[0].tolist() == [0, 5, 6]
    assert b.diff.tolist() == [1, -1, 3]  # an absent diff means 1, as in a file without the column


def test_jsonl_d2_schema(tmp_path):
    p = write(tmp_path / "w.ndjson", '{"word":"a","n":1,"time_0":0,"time_1":2}\n{"word":"b","n":2.0,"time_0":1,"time_1":1}\n')
    b = read_update_file(p, schema=pa.schema([("word", pa.string()), ("n", pa.int64())]), d=2)
    assert b.data.column("n").to_pylist() == [1, 2]
    assert [t.tolist() for t in b.times] == [[0, 1], [2, 1]]


def test_jsonl_dates_as_text_with_schema(tmp_path):
    p = write(tmp_path / "w.json", '{"when":"2024-01-01 10:00:00","time":0}\n')
    b = read_update_file(p, schema=pa.schema([("when", pa.timestamp("us"))]))
    assert b.data.column("when").type == pa.timestamp("us")


def test_parquet_d1_and_d2(tmp_path):
    t = pa.table(
        {
            "word": pa.array(["a", "b"], pa.large_string()),
            "n": pa.array([1, 2], pa.int32()),
            "time": pa.array([3, 4], pa.uint32()),
        }
    )
    b = read_update_file(write(tmp_path / "a.parquet", t))
    assert b.data.schema == pa.schema([("word", pa.string()), ("n", pa.int32())])
    assert b.times[0].tolist() == [3, 4] and b.diff.tolist() == [1, 1]
    t2 = pa.table({"k": [1, 2], "time_0": [0, 1], "time_1": [5, 6], "diff": [3, -3]})
    b = read_update_file(write(tmp_path / "b.pq", t2), d=2)
    assert [x.tolist() for x in b.times] == [[0, 1], [5, 6]] and b.diff.tolist() == [3, -3]


def test_parquet_schema_cast_and_dictionary(tmp_path):
    t = pa.table({"word": pa.array(["a", "b", "a"]).dictionary_encode(), "n": pa.array([1, 2, 3], pa.int8()), "time": [0, 0, 1]})
    schema = pa.schema([("word", pa.string()), ("n", pa.int64())])
    b = read_update_file(write(tmp_path / "a.parquet", t), schema=schema)
    assert b.data.schema == schema and b.data.column("word").to_pylist() == ["a", "b", "a"]


def test_parquet_pandas_index_dropped(tmp_path):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"word": ["a", "b"], "time": [0, 1]}, index=[10, 20])
    p = str(tmp_path / "p.parquet")
    df.to_parquet(p)
    assert read_update_file(p).data.column_names == ["word"]


def test_format_option_overrides_extension(tmp_path):
    p = write(tmp_path / "data.txt", "word,time\nfoo,1\n")
    assert read_update_file(p, fmt="csv").data.num_rows == 1
    expect_error(p, "unknown format 'xml'", fmt="xml")


def test_same_bytes_same_digest(tmp_path):
    a = write(tmp_path / "a.csv", "word,time\nfoo,1\n")
    b = write(tmp_path / "b.csv", "word,time\nfoo,1\n")
    c = write(tmp_path / "c.csv", "word,time\nfoo,2\n")
    assert read_update_file(a).sha256 == read_update_file(b).sha256 != read_update_file(c).sha256


def test_large_integers_at_the_edges(tmp_path):
    hi, lo = 2**63 - 1, -(2**63)
    p = write(tmp_path / "e.csv", f"n,time,diff\n{lo},{hi},{hi}\n")
    b = read_update_file(p)
    assert b.data.column("n").to_pylist() == [lo] and b.times[0].tolist() == [hi] and b.diff.tolist() == [hi]
    p = write(tmp_path / "e.jsonl", f'{{"n":{lo},"time":{hi}}}\n')
    b = read_update_file(p)
    assert b.data.column("n").to_pylist() == [lo] and b.times[0].tolist() == [hi]


# ---------------------------------------------------------------- bad inputs


def test_corpus_is_big_and_small():
    files = [f for f in BAD.iterdir() if f.name != "cases.json"]
    assert len(files) >= 30
    assert sorted(f.name for f in files) == sorted(CASES)
    assert all(f.stat().st_size < 10_000 for f in BAD.iterdir())


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name):
    case = CASES[name]
    kw = {}
    if "schema" in case:
        kw["schema"] = schema_of(case["schema"])
    if "d" in case:
        kw["d"] = case["d"]
    if "time" in case:
        kw["time"] = tuple(case["time"])
    expect_error(str(BAD / name), case["expect"], **kw)


def test_missing_file(tmp_path):
    expect_error(tmp_path / "nope.csv", "cannot read the file: No such file or directory")


def test_directory(tmp_path):
    d = tmp_path / "dir.csv"
    d.mkdir()
    expect_error(d, "cannot read the file")


def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can read anything")
    p = write(tmp_path / "locked.csv", "word,time\nfoo,1\n")
    os.chmod(p, 0)
    expect_error(p, "cannot read the file")


def test_huge_line_reads(tmp_path):
    """A value longer than pyarrow's block size must still parse (blocks grow)."""
    big = "x" * (9 << 20)
    p = write(tmp_path / "huge.csv", f"word,time\nfoo,0\n{big},1\n")
    b = read_update_file(p)
    assert b.data.column("word")[1].as_py() == big
    p = write(tmp_path / "huge.jsonl", f'{{"word":"foo","time":0}}\n{{"word":"{big}","time":1}}\n')
    assert read_update_file(p).data.column("word")[1].as_py() == big


def test_huge_line_error_is_short(tmp_path):
    big = "x" * (9 << 20)
    p = write(tmp_path / "huge.csv", f"word,n,time\nfoo,1,0\nbar,{big},1\n")
    e = expect_error(p, "row 2, column n: 'xxxx", schema=pa.schema([("word", pa.string()), ("n", pa.int64())]))
    assert len(str(e)) < 300
    p = write(tmp_path / "huge2.csv", f'word,time\nfoo,0\n"{big},1\n')
    e = expect_error(p, "row 2")
    assert len(str(e)) < 300


def test_error_deep_in_a_big_file(tmp_path):
    """The first bad row is found (by bisection) far from the start, with its number."""
    n = 300_000
    times = np.arange(n).astype(str).astype(object)
    times[n - 5] = "oops"
    times[n - 2] = "-1"
    text = "word,time\n" + "".join(f"w,{t}\n" for t in times)
    p = write(tmp_path / "big.csv", text)
    e = expect_error(p, f"row {n - 4}, column time: 'oops' is not an integer")
    assert e.row == n - 4 and e.column == "time"
    times[n - 5] = "3"
    p = write(tmp_path / "big.csv", "word,time\n" + "".join(f"w,{t}\n" for t in times))
    expect_error(p, f"row {n - 1}, column time: -1 is negative")


def test_json_error_line_in_a_big_file(tmp_path):
    n = 200_000
    lines = [f'{{"w":"a","time":{i}}}' for i in range(n)]
    lines[n - 3] = '{"w":"a","time":}'
    p = write(tmp_path / "big.jsonl", "\n".join(lines) + "\n")
    expect_error(p, f"line {n - 2}: invalid JSON")


def test_error_attributes(tmp_path):
    p = write(tmp_path / "w.csv", "word,time\nfoo,0\nbar,-4\n")
    e = expect_error(p, "-4 is negative")
    assert isinstance(e, ValueError) and e.path == p and e.row == 2 and e.column == "time"
    assert str(e).startswith(p + ": ")
