"""The S3 server of the Delta Lake tests runs in a process of its own.

delta-rs holds Python's lock during some calls that wait on the network (e.g. a table's
history), so a server in a thread of the test process (tests/helpers/s3.py) could never
answer them. Overrides the session fixture ``moto_endpoint`` for tests/lake/ only.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.helpers.s3 import BUCKET, make_bucket


@pytest.fixture(scope="session")
def moto_endpoint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(endpoint, timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.05)
        make_bucket(endpoint, BUCKET)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)
