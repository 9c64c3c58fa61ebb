"""Huge inputs take bounded memory: files are streamed, a line or value over
``DDCLI_MAX_LINE_BYTES`` is one line (exit 2) within seconds, and the updates one ingest
holds are capped by ``DDCLI_INGEST_MEMORY``; local files and S3 objects, plain and
compressed. The store is byte-identical afterwards.

Sparse files cost no disk; each huge case runs in a real process with a timeout and a
limit on its heap (``RLIMIT_DATA``; mapping a file does not count, allocating does), so
reading a file whole fails the test instead of the machine.
"""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import tree_digest
from tests.helpers.operations import REPO, ddcli_env
from tests.helpers.s3 import BUCKET, aws_env
from tests.cli.test_cli import WORDS, ddcli, ok, one_line_error
from tests.helpers.cli import jsonl

GB = 1 << 30
MEMORY_CAP = 3 * GB  # heap a huge-file ingest may take (a 20 GB read would not fit)


def _capped():
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_CAP, MEMORY_CAP))


def ingest_process(store: str, *sources: str, env: dict | None = None, timeout: float = 60):
    """``ddcli ingest h SOURCES`` in a process capped in memory; returns (result, seconds)."""
    start = time.time()
    res = subprocess.run([sys.executable, "-m", "ddcli", "ingest", "h", *sources, "--store", store],
                         env=ddcli_env(env), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                         preexec_fn=_capped)
    return res, time.time() - start


def assert_refused(res, *needles) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr[-2000:]
    for n in needles:
        assert n in res.stderr, res.stderr


@pytest.fixture
def words(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    return store


def sparse(path, head: bytes, size: int = 20 * GB) -> str:
    """A file of ``size`` bytes: ``head``, then zeros that take no disk."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return str(path)


@pytest.mark.parametrize("name, head, where", [("s.csv", b"word,time\na,1\n", "row 2: "),
                                               ("h.csv", b"word,time\n", "row 1: "),
                                               ("s.jsonl", b'{"word": "a", "time": 1}\n', "line 2: ")])
def test_a_20_gb_sparse_file_is_refused_within_seconds(words, tmp_path, name, head, where):
    path = sparse(tmp_path / name, head)
    before = tree_digest(words)
    for _ in range(2):  # pyarrow's read-ahead thread once outlived the error and aborted the exit (134), at random
        res, took = ingest_process(words, path)
        assert_refused(res, f"{path}: {where}")
        assert took < 30 and tree_digest(words) == before


def test_a_20_gb_sparse_parquet_file_is_refused_unread(words, tmp_path):
    """A Parquet file is read whole: one bigger than DDCLI_INGEST_MEMORY is refused before
    it is hashed or its footer read (a footer may claim 4 GB); compressed, its copy stops there."""
    plain = sparse(tmp_path / "s.parquet", b"PAR1")
    bomb = sparse(tmp_path / "f.parquet", b"PAR1")
    with open(bomb, "r+b") as fh:
        fh.seek(20 * GB - 8)
        fh.write((0xFFFFFF00).to_bytes(4, "little") + b"PAR1")
    zipped = tmp_path / "z.parquet.gz"
    with gzip.open(zipped, "wb", compresslevel=1) as fh:
        fh.write(b"PAR1" + bytes(64 << 20))
    before = tree_digest(words)
    for path, env in ((plain, None), (bomb, None), (str(zipped), {"DDCLI_INGEST_MEMORY": "16m"})):
        res, took = ingest_process(words, path, env=env)
        assert_refused(res, f"{path}: the Parquet file is at least", "DDCLI_INGEST_MEMORY")
        assert took < 30 and tree_digest(words) == before


def test_a_50_mb_value_under_a_raised_limit_takes_bounded_memory_and_stays_out_of_the_log(words, tmp_path):
    path = tmp_path / "value.csv"
    value = "v" * 50_000_000
    path.write_text(f"word,time\n{value},1\nshort,1\n")
    res, took = ingest_process(words, str(path), env={"DDCLI_MAX_LINE_BYTES": "64m"})
    assert res.returncode == 0, res.stderr
    from storage.store import Store
    log = Store(words).log
    assert os.path.getsize(log.path(log.latest()[0])) < 16 << 10  # the value is in the layer, not the log
    rows = jsonl(ok(ddcli(words, "query", "h", "--json")).stdout)
    assert sorted((len(r["word"]), r["count"]) for r in rows) == [(5, 1), (50_000_000, 1)]


def test_a_gzip_bomb_of_zeros_is_refused_within_seconds(words, tmp_path):
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b"word,time\na,1\n")
        zeros = bytes(1 << 20)
        for _ in range(512):  # 512 MiB of zeros in about 2 MB
            fh.write(zeros)
    before = tree_digest(words)
    res, took = ingest_process(words, str(path))
    assert_refused(res, str(path), "row 2")
    assert took < 30 and tree_digest(words) == before


def test_a_line_or_value_over_the_limit_is_refused_and_under_it_read(words, tmp_path):
    env = {"DDCLI_MAX_LINE_BYTES": "1m"}
    long = "x" * (3 << 20)
    cases = {
        "long.csv": ("word,time\nshort,1\n" + long + ",2\n").encode(),
        "long.jsonl": ('{"word": "short", "time": 1}\n{"word": "' + long + '", "time": 2}\n').encode(),
        "long.csv.gz": gzip.compress(("word,time\nshort,1\n" + long + ",2\n").encode()),
        "quote.csv": ('word,time\nshort,1\n"' + long + ",2\n").encode(),
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        before = tree_digest(words)
        err = one_line_error(ddcli(words, "ingest", "h", str(path), env=env))
        assert str(path) in err and "1 MiB (DDCLI_MAX_LINE_BYTES)" in err, err
        assert "row 2" in err or "line 2" in err, err
        assert tree_digest(words) == before
    pq.write_table(pa.table({"word": ["short", long], "time": [1, 2]}), tmp_path / "long.parquet")
    err = one_line_error(ddcli(words, "ingest", "h", str(tmp_path / "long.parquet"), env=env))
    assert "row 2, column word: the value is longer than 1 MiB" in err
    ok(ddcli(words, "ingest", "h", str(tmp_path / "long.csv"), env={"DDCLI_MAX_LINE_BYTES": "4m"}))


def test_a_50_mb_value_is_refused_by_default(words, tmp_path):
    path = tmp_path / "value.csv"
    with open(path, "w") as fh:
        fh.write("word,time\n")
        fh.write("v" * 50_000_000)
        fh.write(",1\n")
    before = tree_digest(words)
    res, took = ingest_process(words, str(path))
    assert_refused(res, "16 MiB (DDCLI_MAX_LINE_BYTES)")
    assert took < 30 and tree_digest(words) == before


SLOW_READ_AHEAD = """
import sys, threading, time
from storage.errors import UpdateFileError
from storage.files import streams
from storage.files.read import read_update_file

real = streams.ByteStream.read

def slow(self, n=-1):
    data = real(self, n)
    if not data and threading.current_thread() is not threading.main_thread():
        time.sleep(0.3)  # pyarrow's read-ahead thread, slow to come back from the end of the stream
    return data

streams.ByteStream.read = slow
try:
    read_update_file(sys.argv[1])
except UpdateFileError as e:
    print(e, file=sys.stderr)
    sys.exit(2)
"""


def test_refusing_a_long_line_waits_for_the_read_ahead_thread_before_the_process_exits(tmp_path):
    """pyarrow's read-ahead thread goes on after the reader failed on the first block; a
    process that exits while it is still in Python aborts (exit -6, "terminate called
    without an active exception": 1 refusal in 7 did). Slowed down, it is waited for."""
    path = tmp_path / "value.csv"
    path.write_bytes(b"word,time\n" + b"v" * 50_000_000 + b",1\n")
    script = tmp_path / "slow_read_ahead.py"
    script.write_text(SLOW_READ_AHEAD)
    res = subprocess.run([sys.executable, str(script), str(path)], cwd=REPO, env=ddcli_env(None),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "16 MiB (DDCLI_MAX_LINE_BYTES)" in res.stderr


def test_updates_beyond_the_memory_budget_are_refused_and_nothing_is_written(words, tmp_path):
    rows = b"word,time\n" + b"a,1\n" * 500_000
    (tmp_path / "rows.csv").write_bytes(rows)
    (tmp_path / "rows.csv.gz").write_bytes(gzip.compress(rows))
    before = tree_digest(words)
    for name in ("rows.csv", "rows.csv.gz"):
        err = one_line_error(ddcli(words, "ingest", "h", str(tmp_path / name), env={"DDCLI_INGEST_MEMORY": "2m"}))
        assert "take more than 2 MiB of memory (DDCLI_INGEST_MEMORY)" in err
    (tmp_path / "half.csv").write_bytes(b"word,time\n" + b"a,1\n" * 100_000)
    (tmp_path / "other.csv").write_bytes(b"word,time\n" + b"b,1\n" * 100_000)
    err = one_line_error(ddcli(words, "ingest", "h", str(tmp_path / "half.csv"), str(tmp_path / "other.csv"),
                               env={"DDCLI_INGEST_MEMORY": "3m"}))
    assert "other.csv" in err  # the budget is the whole ingest's, not one file's
    assert tree_digest(words) == before
    ok(ddcli(words, "ingest", "h", str(tmp_path / "rows.csv"), env={"DDCLI_INGEST_MEMORY": "64m"}))


def test_a_parquet_file_that_decodes_to_more_than_the_budget_is_refused_before_decoding(words, tmp_path):
    path = tmp_path / "dense.parquet"  # 200 MB of text in a few hundred KB
    pq.write_table(pa.table({"word": ["w" * 1000] * 200_000, "time": [1] * 200_000}), path,
                   compression="zstd", use_dictionary=False)
    assert path.stat().st_size < 2 << 20
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", "h", str(path), env={"DDCLI_INGEST_MEMORY": "64m"}))
    assert f"{path}: the updates read so far take more than 64 MiB of memory (DDCLI_INGEST_MEMORY)" in err
    assert tree_digest(words) == before


def test_a_bad_row_in_a_late_block_writes_nothing(words, tmp_path):
    """Validation of every row before anything is written holds with streaming."""
    text = "word,time\n" + "".join(f"w{i},{i}\n" for i in range(200_000)) + "late,soon\n"
    path = tmp_path / "late.csv"
    path.write_text(text)
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "ingest", "h", str(path), env={"DDCLI_MAX_LINE_BYTES": "64k"}))
    assert "row 200001, column time: 'soon' is not an integer" in err
    assert tree_digest(words) == before


@pytest.mark.parametrize("value", ["lots", "0", "-3m"])
def test_a_bad_setting_is_one_line(words, tmp_path, value):
    err = one_line_error(ddcli(words, "ingest", "h", str(WORDS[1]), env={"DDCLI_MAX_LINE_BYTES": value}))
    assert f"DDCLI_MAX_LINE_BYTES={value!r} is not a size" in err


def test_huge_s3_objects_are_refused_within_seconds(s3_env, tmp_path):
    import boto3
    env = aws_env(s3_env)
    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1",
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    prefix = f"huge-{os.getpid()}-{time.time_ns()}"
    codec = pa.Codec("zstd")
    zeros = codec.compress(bytes(64 << 20), asbytes=True)
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/bomb.csv.zst",
                      Body=codec.compress(b"word,time\na,1\n", asbytes=True) + zeros * 8)  # 512 MiB
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/long.jsonl", Body=b'{"word": "' + b"y" * (3 << 20) + b'"}\n')
    store = str(tmp_path / "store")
    res, took = ingest_process(store, f"s3://{BUCKET}/{prefix}/bomb.csv.zst", env=env)
    assert_refused(res, "bomb.csv.zst", "row 2")
    assert took < 30 and not os.path.exists(store)
    res, took = ingest_process(store, f"s3://{BUCKET}/{prefix}/*.jsonl", env={**env, "DDCLI_MAX_LINE_BYTES": "1m"})
    assert_refused(res, "long.jsonl: line 1: the line is longer than 1 MiB")
    assert not os.path.exists(store)
