"""Benchmarks with the store on an object store: ``ddcli bench storage|incremental --s3``.

``--s3`` starts moto's S3-compatible server on this host (the ``moto[server]`` package of
the test extra) and puts the benchmark's store under ``s3://ddcli-bench/<run>/``, so the
figures compare the same work on a local folder and on an object store. It measures
what only an object store can count: the requests one commit sends
(:func:`requests_per_commit`), at few versions and at many — a commit reads the
checkpoint hint, the checkpoint and at most 16 deltas, so it is O(1) whatever the
number of versions (the log's prefix is never listed on a commit).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Callable, Iterator

BUCKET = "ddcli-bench"
_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION")


@contextlib.contextmanager
def store_locations(s3: bool, work: str) -> Iterator[Callable[[str], str]]:
    """``where(name)``: the location of the benchmark's store ``name`` — a folder under
    ``work``, or (``s3``) a prefix on a moto server started for the benchmark."""
    if not s3:
        yield lambda name: os.path.join(work, name)
        return
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        from storage.errors import StoreError
        raise StoreError("--s3 needs the moto[server] package (pip install 'moto[server]')") from None
    import logging

    import boto3

    from storage.blobs.resolve import forget_clients
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1", AWS_REGION="us-east-1")
    forget_clients()
    try:
        boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=BUCKET)
        run = uuid.uuid4().hex[:8]
        yield lambda name: f"s3://{BUCKET}/{run}/{name}"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        forget_clients()
        server.stop()


def requests_per_commit(store, commits: int = 20) -> float | None:
    """Mean requests of ``commits`` commits that change nothing (None where nothing counts
    requests: a local folder)."""
    if not store.blobs.counts_requests:
        return None
    before = store.blobs.requests
    for _ in range(commits):
        store.commit(lambda s: s)
    return (store.blobs.requests - before) / commits
