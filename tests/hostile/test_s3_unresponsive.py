"""An object store that stops answering ends a command within its promised bound.

``DDCLI_S3_TIMEOUT`` bounds connecting and every wait for bytes, ``AWS_MAX_ATTEMPTS`` the
attempts of a request, and once one request found the endpoint silent every later one
fails at once: a command against an endpoint that accepts connections and never
answers — from the start, or in the middle of a write — ends in one line, exit 2,
within about timeout x attempts, and leaves the store as one of its committed states.
The commands run in this process (as a new process would: fresh clients); the bound
below is generous (the retry back-off, a loaded machine), the hang it guards against
took minutes.
"""

from __future__ import annotations

import os
import time

import pytest

from storage.blobs.resolve import forget_clients
from tests.helpers.blackhole import CuttingProxy, silent_endpoint
from tests.helpers.cli import cli, ok, one_line_error, parse_csv, write
from tests.helpers.s3 import BUCKET, aws_env, new_prefix

TIMEOUT, ATTEMPTS = 1, 2
BOUND = TIMEOUT * ATTEMPTS + 8


def _run(args: list[str], store: str, endpoint: str, monkeypatch):
    """``ddcli ARGS`` with the object store at ``endpoint``: its result and seconds taken."""
    for k, v in {**aws_env(endpoint), "DDCLI_S3_TIMEOUT": str(TIMEOUT), "AWS_MAX_ATTEMPTS": str(ATTEMPTS)}.items():
        monkeypatch.setenv(k, v)
    forget_clients()
    start = time.monotonic()
    try:
        return cli(store, *args), time.monotonic() - start
    finally:
        forget_clients()


def _stopped_answering(res, elapsed: float, what) -> None:
    line = one_line_error(res, 2)
    assert "answer" in line or "reach" in line, (what, line)
    assert elapsed < BOUND, f"{what}: {elapsed:.1f} s against an endpoint that never answers"


@pytest.fixture
def s3_store(s3_env, tmp_path):
    store = new_prefix()
    ok(cli(store, "ingest", "w", write(tmp_path / "first.csv", "word,time\na,1\nb,2\n")))
    return store


def test_an_endpoint_that_accepts_and_never_answers_ends_every_command_within_the_bound(s3_store, tmp_path,
                                                                                        monkeypatch):
    f = write(tmp_path / "more.csv", "word,time\nc,5\n")
    with silent_endpoint() as endpoint:
        for args, store in ((["query", "w"], s3_store), (["ingest", "w", f], s3_store),
                            (["ingest", "w", f"s3://{BUCKET}/some/object.csv"], str(tmp_path / "local")),
                            (["compact"], s3_store)):
            res, elapsed = _run(args, store, endpoint, monkeypatch)
            _stopped_answering(res, elapsed, args)
    assert not os.path.exists(tmp_path / "local")


def _words(store: str) -> dict:
    return {r["word"]: int(r["count"]) for r in parse_csv(ok(cli(store, "query", "w", "-f", "csv")).stdout)}


def test_an_endpoint_that_goes_silent_in_the_middle_of_an_ingest_ends_it_within_the_bound(s3_store, s3_env, tmp_path,
                                                                                           monkeypatch):
    """A proxy forwards an ingest until the client has sent a given number of bytes, then
    answers nothing more: at every cut the ingest ends in one line within the bound, and
    the store, read directly afterwards, is intact with each file all there or absent."""
    probe = CuttingProxy(s3_env)
    try:
        ok(_run(["ingest", "w", write(tmp_path / "probe.csv", "word,time\np,3\nq,3\n")], s3_store,
                probe.endpoint, monkeypatch)[0])
        total = probe.sent
    finally:
        probe.close()
    want = {"a": 1, "b": 1, "p": 1, "q": 1}
    cuts = [total * k // 8 for k in (1, 3, 5, 7)]
    for k, cut in enumerate(cuts):
        f = write(tmp_path / f"f{k}.csv", f"word,time\nx{k},{10 + k}\ny{k},{10 + k}\n")
        proxy = CuttingProxy(s3_env, cut_after=cut)
        try:
            res, elapsed = _run(["ingest", "w", f], s3_store, proxy.endpoint, monkeypatch)
        finally:
            proxy.close()
        for name, value in aws_env(s3_env).items():  # read directly from here on
            monkeypatch.setenv(name, value)
        if res.exit_code == 0:
            want.update({f"x{k}": 1, f"y{k}": 1})  # the cut fell after the last answer it needed
            continue
        _stopped_answering(res, elapsed, f"cut after {cut} of {total} bytes")
        got = _words(s3_store)
        if f"x{k}" in got:  # the commit landed before its answer was lost
            want.update({f"x{k}": 1, f"y{k}": 1})
        assert got == want, f"cut after {cut} bytes"
    assert _words(s3_store) == want
    ok(cli(s3_store, "check"))
