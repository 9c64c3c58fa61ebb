"""An S3-compatible server for the tests: moto's standalone server, started in this process.

moto enforces ``If-None-Match: *`` on ``PutObject`` (412 when the name exists), which is
what the commit protocol relies on. It accepts any access key unless told to check them
(``INITIAL_NO_AUTH_ACTION_COUNT``), so tests of refused credentials use that.

* :func:`moto_endpoint` — the server's URL, one per test process (session fixture).
* :func:`server_process` — a server of its own buckets, in a process of its own.
* :func:`s3_env` — the AWS variables a test (and every subprocess it starts) uses.
* :func:`store_location` — parametrises a test over a local folder and an ``s3://`` prefix.
* :func:`object_digest` — :func:`conftest.tree_digest` of an ``s3://`` prefix.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest

BUCKET = "ddcli-tests"
BACKENDS = ["local", "s3"]


def start_server():
    """``(server, endpoint)``: a moto S3 server on a free port of this host."""
    import logging

    from moto.server import ThreadedMotoServer
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


@contextlib.contextmanager
def server_process():
    """The endpoint of a moto S3 server in a process of its own, stopped afterwards: its
    buckets are its own (the servers of one process share theirs)."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "moto server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def aws_env(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "2",
            "DDCLI_S3_TIMEOUT": "2"}


def make_bucket(endpoint: str, bucket: str) -> None:
    import boto3
    env = aws_env(endpoint)
    c = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    try:
        c.create_bucket(Bucket=bucket)
    except c.exceptions.BucketAlreadyOwnedByYou:
        pass


@pytest.fixture(scope="session")
def moto_endpoint():
    server, endpoint = start_server()
    make_bucket(endpoint, BUCKET)
    yield endpoint
    server.stop()


@pytest.fixture
def s3_env(moto_endpoint, monkeypatch) -> str:
    """Point the AWS variables at the test server; returns its endpoint."""
    for k, v in aws_env(moto_endpoint).items():
        monkeypatch.setenv(k, v)
    from storage.blobs.resolve import forget_clients
    forget_clients()  # clients built for another endpoint
    return moto_endpoint


def new_prefix() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/store"


@pytest.fixture(params=BACKENDS)
def store_location(request, tmp_path) -> str:
    """Where a test's store lives: a local folder, or a fresh prefix on the moto server."""
    if request.param == "local":
        return str(tmp_path / "store")
    request.getfixturevalue("s3_env")
    return new_prefix()


def object_digest(url: str) -> dict[str, str] | None:
    """Every object under an ``s3://`` prefix (relative key -> its ETag, the MD5 of its
    bytes for a single-part put, and its size); None when empty."""
    from storage.blobs.resolve import for_path
    blobs = for_path(url)
    bucket, _, prefix = url[len("s3://"):].partition("/")
    c = blobs.client()
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = f"{o['ETag']}:{o['Size']}"
    return out or None


def all_files(url: str) -> set[str]:
    """Every object under an ``s3://`` prefix, as ``s3://`` paths."""
    return {f"{url}/{k}" for k in (object_digest(url) or {})}


def place_store(local_store: str, location: str) -> str:
    """A copy of the local store folder ``local_store`` where ``location`` says: the folder
    itself for a local location, its files uploaded under an ``s3://`` prefix otherwise
    (a store names its files relative to its root, so the copy is the same store)."""
    import os
    if not location.startswith("s3://"):
        return local_store
    from storage.blobs.resolve import for_path
    blobs = for_path(location)
    for dirpath, _, names in os.walk(local_store):
        for n in names:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, local_store).replace(os.sep, "/")
            with open(p, "rb") as fh:
                blobs.replace(f"{location}/{rel}", fh.read())
    return location
