"""Spark fixtures for the pipeline tests (loaded by tests/conftest.py as a pytest plugin).

One SparkSession for the whole test session: ``ops.spark.session.get_spark()`` is the same
singleton the engine uses, so starting it here once means no test pays the ~5 s start-up
again. ``spark_jobs`` tells how many Spark jobs have run so far, for tests that check an
error comes before Spark does any work.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    import os

    from ops.spark.session import get_spark

    # two shuffle partitions: still several per stage (keys really are partitioned), and
    # measurably cheaper than four for the tests' small data on two cores
    os.environ.setdefault("DDCLI_SHUFFLE_PARTITIONS", "2")
    session = get_spark()
    yield session
    # the engine's atexit hook removes the scratch dir; stopping here keeps the JVM from
    # outliving pytest when it is run in-process by other tools
    from ops.spark.session import stop_spark

    stop_spark()


@pytest.fixture
def spark_jobs(spark):
    """A function returning the ids of every Spark job started so far (of the engine's
    session: started again if a test before stopped it, as an in-process Ctrl-C does)."""
    from ops.spark.session import get_spark

    tracker = get_spark().sparkContext.statusTracker()

    def jobs() -> set[int]:
        return set(tracker.getJobIdsForGroup())

    return jobs


@pytest.fixture
def on_spark(monkeypatch):
    """Small runs on Spark, not in the driver (ops/run/in_driver.py): for the tests of how
    Spark's tasks split, slice and write a run, which a small run in the driver skips."""
    monkeypatch.setenv("DDCLI_DRIVER_ROWS", "0")
