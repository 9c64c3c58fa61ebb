"""Spark's JVM talks to its local Python workers over a Unix socket in the session's private
scratch folder (ops/spark/session.py), unless the socket's path would be too long."""

from __future__ import annotations

import os

from ops.spark.session import MAX_UNIX_SOCKET_PATH, UNIX_SOCKET_NAME, worker_socket_settings


def test_a_socket_path_too_long_for_the_system_keeps_tcp():
    short = "/tmp/ddcli-spark-abcdefgh"
    assert worker_socket_settings(short) == {"spark.python.unix.domain.socket.enabled": "true",
                                             "spark.python.unix.domain.socket.dir": short}
    deep = "/tmp/" + "x" * (MAX_UNIX_SOCKET_PATH - len(UNIX_SOCKET_NAME) - len("/tmp/"))
    assert len(os.path.join(deep, UNIX_SOCKET_NAME)) == MAX_UNIX_SOCKET_PATH + 1
    assert worker_socket_settings(deep) == {}
    assert worker_socket_settings(deep[:-1]) != {}


def test_local_python_tasks_run_over_a_socket_in_the_private_scratch_folder(spark):
    from ops.spark.session import get_spark

    # (the engine's session: started again if an earlier test stopped it, as an in-process Ctrl-C does)
    sc = get_spark().sparkContext
    scratch = sc.getConf().get("spark.local.dir")
    expected = worker_socket_settings(scratch)
    assert sc.getConf().get("spark.python.unix.domain.socket.enabled", "false") == \
        expected.get("spark.python.unix.domain.socket.enabled", "false")
    assert sc.parallelize(range(4), 2).map(lambda x: x * x).sum() == 14
    if expected:
        assert any(name.endswith(".sock") for name in os.listdir(scratch))  # the Python daemon's
        assert os.stat(scratch).st_mode & 0o077 == 0  # nobody else may reach it
