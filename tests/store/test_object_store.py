"""A store on S3-compatible object storage (moto's server, started by the tests).

The store suites (accumulation, crash safety, racing writers, bad inputs) run over a
local folder and the object store through the ``store_location`` fixture; this file
holds what only an object store has: where ``status`` says the store lives, one-line
errors for a missing bucket, refused credentials and an unreachable endpoint, racing
``ddcli`` processes on one version, and a pipeline run whose store is on the server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from storage.store import Store
from tests.helpers.cli import cli, jsonl, ok
from tests.helpers.operations import REPO, ddcli_env
from tests.helpers.s3 import BUCKET, aws_env, new_prefix
from tests.helpers.store_refs import files_on_disk, write_updates

SAMPLE = os.path.join(REPO, "sample_data")


def ddcli(args: list[str], store: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddcli", *args, "--store", store], env=ddcli_env(env),
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_status_says_where_the_store_lives(s3_env, tmp_path):
    loc = new_prefix()
    ok(cli(loc, "ingest", "words", os.path.join(SAMPLE, "words_1.csv")))
    res = ok(cli(loc, "status"))
    assert f"store: {loc} (endpoint {s3_env}, region us-east-1)" in res.stdout
    local = str(tmp_path / "store")
    ok(cli(local, "ingest", "words", os.path.join(SAMPLE, "words_1.csv")))
    assert f"store: {local} (local folder)" in ok(cli(local, "status")).stdout


def _one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_a_missing_bucket_is_one_line(s3_env):
    res = ddcli(["status"], "s3://no-such-bucket/p", aws_env(s3_env))
    _one_line_error(res, "bucket 'no-such-bucket' does not exist")


def test_an_unreachable_endpoint_is_one_line_within_seconds():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.time()
    res = ddcli(["status"], f"s3://{BUCKET}/p", aws_env(f"http://127.0.0.1:{port}"))
    _one_line_error(res, "cannot reach the object store at http://127.0.0.1")
    assert time.time() - start < 30


def test_refused_credentials_are_one_line(tmp_path):
    """moto accepts any key unless authentication is switched on; with it on (and no
    user created) every key is unknown to it: InvalidAccessKeyId."""
    port = _free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        res = ddcli(["status"], f"s3://{BUCKET}/p", aws_env(f"http://127.0.0.1:{port}"))
        _one_line_error(res, "refused the credentials", "AWS_ACCESS_KEY_ID")
    finally:
        server.terminate()
        server.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, timeout: float = 30) -> None:
    end = time.time() + timeout
    while time.time() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"moto server on port {port} did not start")


def test_racing_ddcli_processes_one_wins_per_version_losers_exit_3_and_change_nothing(s3_env, tmp_path):
    """N ``ddcli ingest`` processes into one trace: each version has exactly one winner
    (a put with If-None-Match: *); a loser finds the trace changed, exits 3 and leaves
    nothing behind (no version, no layer object)."""
    loc = new_prefix()
    store = Store(loc)
    store.ingest("t", [write_updates(str(tmp_path / "first.csv"), [((0, "a"), (0, 0), 1)], 2)])
    before = store.state().version
    n = 4
    files = [write_updates(str(tmp_path / f"p{i}.csv"), [((10 + i, "p"), (i, 3 - i), 1)], 2) for i in range(n)]
    procs = [subprocess.Popen([sys.executable, "-m", "ddcli", "ingest", "t", f, "--store", loc],
                              env=ddcli_env(aws_env(s3_env)), cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for f in files]
    codes = [p.wait(120) for p in procs]
    errors = [p.stderr.read() for p in procs]
    assert set(codes) <= {0, 3}, (codes, errors)
    winners = codes.count(0)
    assert winners >= 1
    after = store.state()
    assert after.version == before + winners, "exactly one winner per version"
    for c, e in zip(codes, errors):
        if c == 3:
            assert len(e.strip().splitlines()) == 1 and "conflict" in e.lower(), e
    named = set()
    for st in store.log.states().values():
        for name, t in st["traces"].items():
            for l in t["layers"] + t["pending"]:
                named.update(store.blobs.join(store.trace_dir(name), f["name"]) for f in l["files"])
    assert files_on_disk(store) <= named, "a losing writer left a layer object behind"


@pytest.mark.slow
def test_a_pipeline_run_on_the_object_store_equals_the_same_run_on_a_local_store(s3_env, tmp_path):
    """``ddcli run`` (Spark reads the layers through pyarrow, its tasks write layer objects;
    a join of two inputs' tasks read their files' footers and row groups themselves) gives
    the same output traces on the object store as on a local folder. One run each: a Spark
    start per run is most of this test's time."""
    env = aws_env(s3_env)
    wc = os.path.join(SAMPLE, "pipelines", "wordcount.py")
    pairs = tmp_path / "pairs.py"
    pairs.write_text('def pipeline(p):\n    p.output("pairs", p.input("words").join(p.input("words"), on="word"))\n')
    histories = []
    for loc in (str(tmp_path / "store"), new_prefix()):
        words = [os.path.join(SAMPLE, f"words_{i}.csv") for i in (1, 2)]
        res = ddcli(["ingest", "words", *words], loc, env)
        assert res.returncode == 0, res.stderr
        res = ddcli(["run", wc], loc, env, timeout=600)
        assert res.returncode == 0, res.stderr
        on_spark = {**env, "DDCLI_DRIVER_ROWS": "0"}  # the join's tasks, not the driver (ops/run/in_driver.py)
        res = ddcli(["run", str(pairs), "--json"], loc, on_spark, timeout=600)
        assert res.returncode == 0, res.stderr
        writes = [s for s in json.loads(res.stdout)["steps"] if s["step"] == "write"]
        assert writes and all(s.get("in_task") for s in writes), writes  # the join's tasks wrote them
        found = []
        for trace in ("counts", "pairs"):
            res = ddcli(["history", trace, "--format", "jsonl"], loc, env)
            assert res.returncode == 0, res.stderr
            found.append(jsonl(res.stdout))
        histories.append(found)
    assert histories[0] == histories[1] and all(histories[0])


def test_a_commit_whose_put_ends_ambiguously_is_resolved_by_reading_back_its_commit_id(s3_env, monkeypatch):
    from storage.blobs.s3 import S3Blobs
    from storage.errors import Ambiguous, Conflict
    from storage.log.commit import Log

    loc = new_prefix()
    log = Log(loc)
    log.commit(lambda s: {"traces": {}, "n": 0})
    real = S3Blobs.put_if_absent

    def landed_then_timed_out(self, path, data):
        real(self, path, data)
        raise Ambiguous("read timeout after the request was sent")

    monkeypatch.setattr(S3Blobs, "put_if_absent", landed_then_timed_out)
    assert log.commit(lambda s: {**s, "n": s["n"] + 1})[0] == 2

    def retried_after_landing(self, path, data):  # botocore's retry of a put that had landed: 412
        real(self, path, data)
        return False

    monkeypatch.setattr(S3Blobs, "put_if_absent", retried_after_landing)
    assert log.commit(lambda s: {**s, "n": s["n"] + 1})[0] == 3

    def lost(self, path, data):
        raise Ambiguous("connection dropped before the request was sent")

    monkeypatch.setattr(S3Blobs, "put_if_absent", lost)
    with pytest.raises(Conflict, match="not in the store; nothing was written"):
        log.commit(lambda s: {**s, "n": s["n"] + 1})
    v, state = Log(loc).latest()
    assert (v, state["n"]) == (3, 2), "each commit landed exactly once"


def test_a_run_lease_on_the_object_store_is_taken_once(s3_env):
    from storage.errors import Conflict
    from storage.writes.lease import lease

    loc = new_prefix()
    with lease(loc, "wc"):
        with pytest.raises(Conflict, match="being run by another process"):
            with lease(loc, "wc"):
                pass
    with lease(loc, "wc"):  # released: free again
        pass


def _fresh_process():
    """What a new ddcli process would find: no client, no local copies of layers."""
    from storage.blobs import s3 as blob_s3
    from storage.blobs.resolve import forget_clients
    forget_clients()
    for path in list(blob_s3._copies.files()):
        blob_s3.S3Blobs.forget_copy(None, path)


def test_a_layer_is_fetched_once_per_process_and_read_from_the_bytes_that_were_hashed(s3_env, tmp_path):
    from storage.sql.query import as_of

    loc = new_prefix()
    store = Store(loc)
    store.ingest("t", [write_updates(str(tmp_path / "a.csv"), [((k, "a"), (0,), 1) for k in range(50)], 1)])
    store.ingest("t", [write_updates(str(tmp_path / "b.csv"), [((1, "a"), (1,), -1)], 1)])
    _fresh_process()
    store = Store(loc)
    layers = len(store.layer_paths(store.trace("t")))
    before = store.blobs.requests
    first = as_of(store, "t", 1)
    fetches = store.blobs.requests - before
    before = store.blobs.requests
    again = as_of(store, "t", 1, "k < 10")
    assert store.blobs.requests - before <= fetches - layers, "the second query fetched layers again"
    assert first.num_rows == 49 and again.num_rows == 9
    from storage.blobs.s3 import _copies
    copies = [c for p, (c, _, _) in _copies.files().items() if p.startswith(loc + "/")]
    assert len(copies) == layers and all(os.path.exists(c) for c in copies)


@pytest.mark.parametrize("damage", ["flip", "other", "missing"])
def test_a_damaged_layer_on_the_object_store_is_damage_never_a_wrong_answer(s3_env, tmp_path, damage):
    from storage.errors import CorruptionError
    from storage.sql.query import as_of, history
    from tests.helpers.s3 import object_digest

    loc = new_prefix()
    rows = [((k, "a"), (k % 3,), 1) for k in range(200)]
    store = Store(loc)
    store.ingest("t", [write_updates(str(tmp_path / "a.csv"), rows, 1)])
    (path,) = store.layer_paths(store.trace("t"))
    good = store.blobs.get(path)
    if damage == "flip":
        bad = bytearray(good)
        bad[len(good) // 3] ^= 0x10
        store.blobs.replace(path, bytes(bad))
    elif damage == "other":
        other = Store(new_prefix())
        other.ingest("t", [write_updates(str(tmp_path / "b.csv"), [((k, "b"), (0,), 1) for k in range(200)], 1)])
        store.blobs.replace(path, other.blobs.get(other.layer_paths(other.trace("t"))[0]))
    else:
        store.blobs.delete(path)
    before = object_digest(loc)
    for read in (lambda s: as_of(s, "t", 2), lambda s: history(s, "t")):
        _fresh_process()
        with pytest.raises(CorruptionError, match="is missing" if damage == "missing" else "damaged"):
            read(Store(loc))
    assert object_digest(loc) == before, "a read changed the store"
    store = Store(loc)
    store.blobs.replace(path, good)  # repaired: the same process reads it again, fetched anew
    assert as_of(store, "t", 2).num_rows == 200


def test_one_process_reads_and_writes_the_same_location_at_two_endpoints_each_its_own(tmp_path, monkeypatch):
    """A process that runs command after command (the warm engine, a notebook) with the
    same ``s3://`` location at two endpoints: each command's environment names its store."""
    from storage.sql.query import as_of
    from tests.helpers.s3 import make_bucket, server_process

    with server_process() as a, server_process() as b:
        rows = {a: [((k, "a"), (0,), 1) for k in range(3)], b: [((k, "b"), (0,), 1) for k in range(5)]}
        for url in (a, b):
            make_bucket(url, "shared")
            for k, v in aws_env(url).items():
                monkeypatch.setenv(k, v)
            Store("s3://shared/st").ingest("t", [write_updates(str(tmp_path / f"{len(rows[url])}.csv"), rows[url], 1)])
        for url in (a, b, a):
            for k, v in aws_env(url).items():
                monkeypatch.setenv(k, v)
            got = as_of(Store("s3://shared/st"), "t").to_pylist()
            assert sorted((r["k"], r["v"]) for r in got) == sorted(data for data, _, _ in rows[url])
