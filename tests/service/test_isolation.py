"""The warm engine gives each command its own settings, clients and environment: nothing of
one command (its object store's endpoint and credentials, what it learnt of them, its
ddcli.toml) carries into another's, in the service's process or in its Spark tasks; and a
client never waits long on a service that does not answer, nor stops other services than
its own.

Every command is ``python -m ddcli`` in a process of its own (tests/service/test_service.py
says how services are started and stopped); the stores are read back with pyarrow.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

from storage.store import Store
from tests.helpers.blackhole import CuttingProxy
from tests.helpers.s3 import aws_env, make_bucket, server_process
from tests.service.test_service import WORDCOUNT, WORDS, ddcli, fold_csv, ok, own_services, services  # noqa: F401


def _counts_on(endpoint: str, location: str, monkeypatch) -> dict:
    """The trace ``counts`` of the store at ``location`` on ``endpoint``, accumulated: word -> count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage.blobs.resolve import forget_clients
    for k, v in aws_env(endpoint).items():
        monkeypatch.setenv(k, v)
    forget_clients()
    st = Store(location)
    t = st.state().traces["counts"]
    acc: Counter = Counter()
    for path in st.layer_paths(t, t.layers):
        for r in pq.read_table(pa.BufferReader(st.blobs.get(path))).to_pylist():
            acc[(r["word"], r["count"])] += r["diff"]
    return {w: n for (w, n), m in acc.items() if m}


def test_each_command_gets_its_own_object_store_client_and_a_silence_ends_with_its_command(tmp_path, monkeypatch):
    """Two S3 servers with a bucket of the same name: a run against one, then against the
    other, each reads and writes its own (a client built for the first command's endpoint
    must not serve the second). Before them, a command that met its endpoint silent: the
    next command on that endpoint, answering again, runs."""
    with server_process() as a_url, server_process() as b_url:
        proxy = CuttingProxy(a_url)
        try:
            for url in (a_url, b_url):
                make_bucket(url, "shared")
            location = "s3://shared/st"
            quick = {"DDCLI_S3_TIMEOUT": "1", "AWS_MAX_ATTEMPTS": "1"}
            on_a, on_b = {**aws_env(proxy.endpoint), **quick}, {**aws_env(b_url), **quick}
            ok(ddcli(["ingest", "words", WORDS[0], "--store", location], tmp_path, on_a))
            ok(ddcli(["ingest", "words", *WORDS, "--store", location], tmp_path, on_b))

            proxy.cut_after = proxy.sent  # A stops answering
            res = ddcli(["run", WORDCOUNT, "--store", location], tmp_path, on_a)
            assert res.returncode == 2 and "stopped answering" in res.stderr, res
            assert len(services()) == 1
            proxy.cut_after = None  # and answers again
            ok(ddcli(["run", WORDCOUNT, "--store", location], tmp_path, on_a))
            res = ok(ddcli(["run", WORDCOUNT, "--store", location], tmp_path, on_b))
            assert "nothing to do" not in res.stdout + res.stderr, res
            assert len(services()) == 1  # all three commands went to one service

            assert _counts_on(b_url, location, monkeypatch) == fold_csv(WORDS)
            assert _counts_on(a_url, location, monkeypatch) == fold_csv(WORDS[:1])
        finally:
            proxy.close()


PER_KEY = '''
import pyarrow as pa


def rows(t):
    return pa.table({"rows": pa.array([t.num_rows], pa.int64()), "_count": pa.array([1], pa.int64())})


def pipeline(p):
    p.output("per", p.input("xs").reduce_per_key(by="word", fn=rows))
'''


def _folder(path, toml: str | None):
    """A folder with a store holding ``xs`` (a key ``big`` of ten rows at ten times, a key
    ``small`` of one) and the per-key pipeline; ``toml``: its ddcli.toml."""
    path.mkdir()
    lines = ["word,n,time,diff"] + [f"big,{i},{i},1" for i in range(10)] + ["small,0,0,1"]
    (path / "xs.csv").write_text("\n".join(lines) + "\n")
    (path / "per.py").write_text(PER_KEY)
    if toml is not None:
        (path / "ddcli.toml").write_text(toml)
    ok(ddcli(["ingest", "xs", "xs.csv"], path))
    return path


def _per_key_rows(folder) -> dict:
    import pyarrow.parquet as pq
    st = Store(str(folder / "ddstore"))
    t = st.state().traces["per"]
    acc: Counter = Counter()
    for path in st.layer_paths(t, t.layers):
        for r in pq.read_table(path).to_pylist():
            acc[(r["word"], r["rows"])] += r["diff"]
    return {k: m for k, m in acc.items() if m}


def test_a_folders_settings_stay_with_its_commands_and_a_key_over_the_budget_is_one_line(tmp_path):
    """A run from a folder whose ddcli.toml sets reduce_memory = '1k' is refused in one line
    naming the key (exit 2) through the service and in its own process; a run from a
    folder without the file, through the same service, has the default budget."""
    small = _folder(tmp_path / "small", "reduce_memory = '1k'\n")
    plain = _folder(tmp_path / "plain", None)

    for env in ({}, {"DDCLI_SERVICE": "0"}):
        res = ddcli(["run", "per.py"], small, env)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res
        assert lines[0].startswith("error: reduce_per_key(rows): key {'word': 'big'} needs 100 cells"), lines
        assert "DDCLI_REDUCE_MEMORY" in lines[0] and "Traceback" not in lines[0], lines

    ok(ddcli(["run", "per.py"], plain))
    assert len(services()) == 1  # both folders' runs went to one service
    rows = Counter(line.split(",")[0] for line in (plain / "xs.csv").read_text().splitlines()[1:])
    assert _per_key_rows(plain) == {(w, n): 1 for w, n in rows.items()}
    assert "per" not in Store(str(small / "ddstore")).state().traces


def test_a_service_that_does_not_answer_costs_a_client_seconds_and_a_line(tmp_path):
    """A stopped (SIGSTOP) service: the client says so in one warning line and runs the
    command in its own process, after seconds rather than minutes."""
    res = ddcli(["run", "missing.py"], tmp_path)  # starts the service (no Spark)
    assert res.returncode == 2, res
    ((_, pid),) = services().items()
    os.kill(pid, signal.SIGSTOP)
    try:
        res = ddcli(["run", "missing.py"], tmp_path, timeout=60)
    finally:
        os.kill(pid, signal.SIGCONT)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 2, res
    assert lines[0].startswith("warning: the ddcli service did not answer") and "runs in this process" in lines[0]
    assert lines[1].startswith("error: ") and "missing.py" in lines[1]


def test_service_stop_stops_the_clients_own_service_and_all_of_them_with_all(tmp_path):
    """Two services of two settings: ``service stop`` with one's settings stops that one
    only; ``--all`` stops the other too."""
    keys = {}
    for memory in ("1g", "2g"):
        before = set(services())
        res = ddcli(["run", "missing.py"], tmp_path, {"DDCLI_SPARK_MEMORY": memory})
        assert res.returncode == 2, res
        (keys[memory],) = set(services()) - before
    stopped = json.loads(ok(ddcli(["service", "stop", "--json"], tmp_path, {"DDCLI_SPARK_MEMORY": "2g"})).stdout)
    assert stopped["stopped"] == [keys["2g"]] and list(services()) == [keys["1g"]]
    stopped = json.loads(ok(ddcli(["service", "stop", "--all", "--json"], tmp_path)).stdout)
    assert stopped["stopped"] == [keys["1g"]] and services() == {}

