"""OpenLineage events of ``ddcli run`` against a receiver the test starts (``http.server``
in a thread): START and FAIL of a run refused before Spark starts, what their JSON holds
(the spec's fields, the traces as datasets, custom facets with ``_producer`` and
``_schemaURL``), and a receiver that is down or hangs: the run's outcome is the same and
it waits at most the lineage timeout. A real run's START and COMPLETE are checked in
tests/observe/test_run_seen.py, with the one Spark run it makes."""

from __future__ import annotations

import os
import socket
import time

import pytest

from tests.helpers.cli import WORDS, one_line_error, runner, write
from tests.helpers.lineage import Receiver

from ddcli.cli import app


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def hanging():
    """A receiver that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()


def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def bad_pipeline(tmp_path):
    """A store with ``words``, and a pipeline that names a column words does not have:
    planned (START), then refused by the pre-check before Spark starts (FAIL, exit 2)."""
    store = str(tmp_path / "store")
    assert runner.invoke(app, ["ingest", "words", str(WORDS[0]), "--store", store]).exit_code == 0
    path = write(tmp_path / "typo.py", "def pipeline(p):\n    p.output('typo_counts', p.input('words').count(by='wrod'))\n")
    return store, path


def run(store: str, path: str, env: dict):
    started = time.monotonic()
    res = runner.invoke(app, ["run", path, "--store", store], env={"DDCLI_NO_PROGRESS": "1", **env})
    return res, time.monotonic() - started


def test_a_refused_run_sends_start_and_fail_naming_its_input(receiver, bad_pipeline):
    store, path = bad_pipeline
    res, _ = run(store, path, {"OPENLINEAGE_URL": receiver.url, "OPENLINEAGE_NAMESPACE": "nightly"})
    err = one_line_error(res)
    assert "wrod" in err
    paths = [p for p, _ in receiver.events]
    events = [e for _, e in receiver.events]
    assert paths == ["/api/v1/lineage"] * 2 and [e["eventType"] for e in events] == ["START", "FAIL"], events
    start, fail = events
    assert start["run"]["runId"] == fail["run"]["runId"] and len(start["run"]["runId"]) == 36
    assert start["job"]["namespace"] == "nightly" and start["job"]["name"] == "typo"
    assert start["job"]["facets"]["jobType"]["processingType"] == "BATCH"
    assert start["eventTime"] <= fail["eventTime"] and start["eventTime"].endswith("+00:00")
    assert start["producer"].startswith("urn:ddcli:") and start["schemaURL"].startswith("https://openlineage.io/spec/")
    (words,) = start["inputs"]
    assert words["namespace"] == "file" and words["name"] == os.path.join(os.path.abspath(store), "traces", "words")
    trace = words["facets"]["ddcli_trace"]
    assert trace == {**trace, "trace": "words", "since": "0", "upper": "3", "rows": 6, "layers": 1}
    assert trace["_producer"] == start["producer"] and trace["_schemaURL"].endswith("#/$defs/DdcliTraceDatasetFacet")
    assert words["inputFacets"]["inputStatistics"]["rowCount"] == 6
    assert start["outputs"] == []  # typo_counts does not exist yet
    assert "wrod" in fail["run"]["facets"]["errorMessage"]["message"]
    assert fail["run"]["facets"]["ddcli_run"]["seconds"] >= 0 and fail["inputs"] == start["inputs"]


@pytest.mark.parametrize("where", ["down", "hanging"])
def test_a_receiver_down_or_hanging_changes_nothing_but_a_bounded_wait(where, bad_pipeline, hanging):
    store, path = bad_pipeline
    url = closed_port() if where == "down" else hanging
    res, took = run(store, path, {"OPENLINEAGE_URL": url, "DDCLI_LINEAGE_TIMEOUT": "1"})
    assert "wrod" in one_line_error(res)  # the run's own outcome, alone (a failed command says only that)
    assert took < 30, took  # the wait is bounded (1 s here); the rest is the command itself on a loaded machine


def test_the_emitter_waits_at_most_its_budget_for_a_hanging_send():
    from ops.run.lineage import Emitter
    sent = []
    slow = Emitter(budget=0.3, send=lambda e: (time.sleep(60), sent.append(e)))  # noqa: B023
    slow.send({"n": 1})
    slow.send({"n": 2})
    started = time.monotonic()
    warning = slow.close()
    assert time.monotonic() - started < 10 and sent == []
    assert warning.startswith("OpenLineage: 2 events not sent within 0.3 s")
    fast = Emitter(budget=5, send=sent.append)
    for n in range(5):
        fast.send({"n": n})
    assert fast.close() is None and sent == [{"n": n} for n in range(5)]
    broken = Emitter(budget=5, send=lambda e: 1 / 0)
    broken.send({})
    assert broken.close() == "OpenLineage: 1 event(s) not sent: ZeroDivisionError: division by zero"


def test_no_url_no_events(bad_pipeline, receiver):
    store, path = bad_pipeline
    res, _ = run(store, path, {"OPENLINEAGE_URL": ""})
    assert res.exit_code == 2 and receiver.events == [] and "warning" not in res.stderr
    res, _ = run(store, path, {"OPENLINEAGE_URL": receiver.url, "OPENLINEAGE_DISABLED": "true"})
    assert res.exit_code == 2 and receiver.events == []
    res, _ = run(store, path, {"OPENLINEAGE_URL": receiver.url, "OPENLINEAGE_ENDPOINT": "/custom/path",
                               "OPENLINEAGE_API_KEY": "k3y"})
    assert [p for p, _ in receiver.events] == ["/custom/path"] * 2 and receiver.auth == ["Bearer k3y"] * 2


def test_a_redirect_is_not_followed_and_the_api_key_stays_with_the_receiver(bad_pipeline, receiver, monkeypatch):
    """A receiver answering 302 to another host:port: nothing goes there, least of all the
    key, and the events not sent are one warning line saying why."""
    redirecting = Receiver(redirect=receiver.url + "/api/v1/lineage")
    try:
        store, path = bad_pipeline
        res, _ = run(store, path, {"OPENLINEAGE_URL": redirecting.url, "OPENLINEAGE_API_KEY": "s3cret"})
        assert "wrod" in one_line_error(res)
        assert redirecting.auth == ["Bearer s3cret"] * 2 and receiver.requests == []

        from ops.run.lineage import Emitter
        monkeypatch.setenv("OPENLINEAGE_URL", redirecting.url)
        monkeypatch.setenv("OPENLINEAGE_API_KEY", "s3cret")
        emitter = Emitter(budget=30)
        emitter.send({"eventType": "START", "eventTime": "2026-01-01T00:00:00+00:00", "runId": "r", "namespace": "n",
                      "job": "j", "inputs": [], "outputs": [], "run": {}})
        warning = emitter.close()
        assert receiver.requests == [] and "\n" not in warning
        assert warning.startswith("OpenLineage: 1 event(s) not sent") and "302" in warning and receiver.url in warning
    finally:
        redirecting.close()
