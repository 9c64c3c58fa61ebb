"""`--output` lands whole or not at all, and never through another name of a file.

A local target is replaced by a rename (a hard link keeps its bytes, a symbolic link keeps
pointing at the replaced file, a failure leaves the old file and no temporary one); an
`s3://bucket/key` target is one put of the complete object (a failure leaves no object),
with the same endpoint and credentials settings as S3 stores, and a missing bucket,
refused credentials or a key inside an S3 store are one line, exit 2.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import uuid

import pyarrow.parquet as pq
import pytest

from tests.conftest import tree_digest
from tests.helpers.cli import WORDS, ddcli, ok, one_line_error, parse_csv
from tests.helpers.s3 import BUCKET, aws_env, new_prefix

READS = [["query", "words"], ["history", "words"], ["sql", "SELECT word, time, diff FROM words ORDER BY ALL"]]


@pytest.fixture
def words(tmp_path):
    store = str(tmp_path / "store")
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    ok(ddcli(store, "ingest", "words", str(WORDS[1])))
    return store


def _fail_after(monkeypatch, calls: int) -> None:
    """Make the CSV writer fail after ``calls`` values, in the middle of the output."""
    from ddcli import render
    real, seen = render._csv_cell, [0]

    def failing(v):
        seen[0] += 1
        if seen[0] > calls:
            raise RuntimeError("the writer failed half-way")
        return real(v)
    monkeypatch.setattr(render, "_csv_cell", failing)


# ---------------------------------------------------------------- local files


def test_an_output_replaces_its_target_and_never_writes_through_a_link(words, tmp_path):
    want = ok(ddcli(words, "query", "words", "-f", "csv")).stdout
    other = tmp_path / "kept.csv"
    other.write_text("old bytes\n")
    hard = tmp_path / "hard.csv"
    os.link(other, hard)
    os.chmod(hard, 0o640)
    ok(ddcli(words, "query", "words", "-o", str(hard)))
    assert hard.read_text() == want and other.read_text() == "old bytes\n"
    assert stat.S_IMODE(os.stat(hard).st_mode) == 0o640  # the replaced file's permissions stay
    real = tmp_path / "real.csv"
    real.write_text("old bytes\n")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    ok(ddcli(words, "query", "words", "-o", str(link)))
    assert os.path.islink(link) and os.readlink(link) == str(real) and real.read_text() == want


@pytest.mark.parametrize("command", READS, ids=lambda c: c[0])
def test_a_failed_output_leaves_the_old_file_and_no_temporary_one(words, tmp_path, monkeypatch, command):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "result.csv"
    target.write_text("the previous result\n")
    _fail_after(monkeypatch, 5)
    res = ddcli(words, *command, "-o", str(target))
    assert res.exit_code == 1 and "half-way" in res.stderr
    assert target.read_text() == "the previous result\n"
    assert os.listdir(out_dir) == ["result.csv"]


# ---------------------------------------------------------------- s3:// objects


def _object(url: str) -> bytes | None:
    from storage.blobs.resolve import for_path
    try:
        return for_path(url).get(url)
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("command", READS, ids=lambda c: c[0])
def test_outputs_to_s3_are_the_whole_output_in_one_object(words, s3_env, tmp_path, command):
    key = f"s3://{BUCKET}/results/{uuid.uuid4().hex[:8]}"
    ok(ddcli(words, *command, "-o", f"{key}/out.csv"))
    ok(ddcli(words, *command, "-o", str(tmp_path / "out.csv")))
    assert _object(f"{key}/out.csv") == (tmp_path / "out.csv").read_bytes()
    assert parse_csv(_object(f"{key}/out.csv").decode())
    ok(ddcli(words, *command, "-o", f"{key}/out.parquet"))
    got = pq.read_table(io.BytesIO(_object(f"{key}/out.parquet")))
    assert got.num_rows == len(parse_csv((tmp_path / "out.csv").read_text())) > 0
    # written again: replaced whole
    ok(ddcli(words, *command, "-o", f"{key}/out.csv", "-f", "jsonl"))
    assert _object(f"{key}/out.csv").startswith(b"{")


def test_a_failed_output_to_s3_leaves_no_object(words, s3_env, monkeypatch):
    url = f"s3://{BUCKET}/results/{uuid.uuid4().hex[:8]}/out.csv"
    _fail_after(monkeypatch, 5)
    res = ddcli(words, "history", "words", "-o", url)
    assert res.exit_code == 1 and "half-way" in res.stderr
    assert _object(url) is None


@pytest.mark.parametrize("url, expect", [("s3://no-such-bucket-ddcli/out.csv", "does not exist"),
                                         (f"s3://{BUCKET}", "name an object"),
                                         (f"s3://{BUCKET}/folder/", "name an object")])
def test_an_unwritable_s3_output_is_one_line_before_any_work(words, s3_env, url, expect):
    before = tree_digest(words)
    err = one_line_error(ddcli(words, "advance", "words", "--since", "2", "-o", url))
    assert expect in err and url in err
    assert tree_digest(words) == before  # refused before the command changed the store


def test_an_s3_output_inside_an_s3_store_is_refused(s3_env):
    store = new_prefix()
    ok(ddcli(store, "ingest", "words", str(WORDS[0])))
    before = tree_digest(store)
    for target in (f"{store}/result.csv", f"{store}/traces/words/x.parquet", f"{store}/log/v000000000009.json"):
        err = one_line_error(ddcli(store, "query", "words", "-o", target))
        assert "inside the store" in err and store in err
        assert tree_digest(store) == before


def test_refused_credentials_for_an_s3_output_are_one_line(words):
    from tests.store.test_object_store import _free_port, _wait_for_port
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        from tests.helpers.operations import run_ddcli
        res = run_ddcli(["query", "words", "-o", f"s3://{BUCKET}/out.csv"], words,
                        env=aws_env(f"http://127.0.0.1:{port}"), timeout=120)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "refused the credentials" in res.stderr and "--output" in res.stderr
    finally:
        server.terminate()
        server.wait(10)


def test_benchmark_figures_and_plots_replace_their_files_too(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra: pip install -e '.[test]'")
    from ddcli.bench.common import require_matplotlib, save_figure, write_json
    kept = tmp_path / "kept"
    kept.write_text("old bytes\n")
    for name in ("figures.json", "plot.png"):
        os.link(kept, tmp_path / name)
    write_json({"x": 1}, str(tmp_path / "figures.json"))
    require_matplotlib().use("Agg")
    import matplotlib.pyplot as plt
    fig, _ = plt.subplots()
    save_figure(fig, str(tmp_path / "plot.png"))
    plt.close(fig)
    assert kept.read_text() == "old bytes\n"
    assert (tmp_path / "figures.json").read_text() == '{\n  "x": 1\n}\n'
    assert (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")


def test_a_change_feed_goes_to_s3_and_is_acknowledged_only_once_the_object_is_whole(words, s3_env, monkeypatch):
    """`changes --ack -o s3://…`: a put that never happened (the writer failed) leaves the
    reader where it was; the next read gives the same changes, whole, and acknowledges them."""
    url = f"s3://{BUCKET}/feeds/{uuid.uuid4().hex[:8]}/batch.csv"
    want = ok(ddcli(words, "changes", "words", "-r", "etl", "-f", "csv")).stdout
    with monkeypatch.context() as m:
        _fail_after(m, 5)
        assert ddcli(words, "changes", "words", "-r", "etl", "-o", url, "--ack").exit_code == 1
    assert _object(url) is None
    ok(ddcli(words, "changes", "words", "-r", "etl", "-o", url, "--ack"))
    assert _object(url).decode() == want and len(parse_csv(want)) > 5
    assert ok(ddcli(words, "changes", "words", "-r", "etl", "-f", "csv")).stdout == "word,time,diff\n"
