"""The store's clock: the one place the storage layer reads the time from to tell a file's age.

Ages decide what garbage collection may delete and which metadata versions the log may
prune (storage/writes/gc.py, storage/log/commit.py): a file or version is old when its time (a local
file's mtime, an object's ``LastModified``) is more than the grace period or the log's
retention before :func:`now`.

Tests make files old by moving this clock instead of the files' times, which an object
store cannot set back: ``DDCLI_TEST_NOW`` (seconds since 1970, read here and nowhere else)
fixes the time :func:`now` returns, in this process and in every process it starts. Users
never set it.
"""

from __future__ import annotations

import os
import time

TEST_NOW = "DDCLI_TEST_NOW"


def now() -> float:
    """Seconds since 1970: the system's clock, or the fixed time a test set."""
    fixed = os.environ.get(TEST_NOW)
    return float(fixed) if fixed else time.time()
