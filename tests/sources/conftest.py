"""The S3 server of the lake-source tests runs in a process of its own: delta-rs holds
Python's lock while it waits on the network, so a server in a thread of the test process
(tests/helpers/s3.py) could never answer it. Overrides the session fixture ``moto_endpoint``."""

from __future__ import annotations

import pytest

from tests.helpers.s3 import BUCKET, make_bucket, server_process


@pytest.fixture(scope="session")
def moto_endpoint():
    with server_process() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint
