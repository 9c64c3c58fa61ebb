"""The same pipelines on a Spark standalone cluster as on a laptop.

A master and two workers run as separate JVMs (pyspark's ``bin/spark-class``), the
workers in a network namespace of their own where the machine allows it
(tests/helpers/spark_cluster.py says how they are kept from working by accident). ``ddcli run``
then runs wordcount, length_count, reach, the as-of join and cc there, in two epochs, and
the output traces must equal those of the same commands in local mode.

One test holds all the cluster work, so that pytest-xdist (which spreads tests, not
modules) never starts a second cluster.
"""

from __future__ import annotations

import os
import time
import warnings

import pytest

from ops.errors import SparkSetupError
from tests.helpers.cli import cli, ok, write
from tests.helpers.operations import PIPELINES, REPO, run_ddcli
from tests.helpers.spark_cluster import Cluster, executor_python

SAMPLE = os.path.join(REPO, "sample_data")
# cc: a loop no columns deal, resident on the cluster: in one task per executor core (two),
# exchanging rows through a folder under the store (ops/loops/local.py)
PIPES = [os.path.join(PIPELINES, f"{p}.py") for p in ("wordcount", "length_count", "reach", "asof", "cc")]
OUTPUTS = ["counts", "length_counts", "reach", "bills", "labels"]


def _epochs(folder: str) -> list[list[list[str]]]:
    """The commands of each epoch (ingest and seal), the same for both stores."""
    s = lambda name: os.path.join(SAMPLE, name)  # noqa: E731
    edges_2 = write(os.path.join(folder, "edges_2.csv"), "src,dst,time,diff\nd,e,3,1\nb,c,4,-1\nx,a,4,1\n")
    roots_2 = write(os.path.join(folder, "roots_2.csv"), "node,time\nc,4\n")
    return [
        [["ingest", "words", s("words_1.csv")],
         ["ingest", "strings", s("strings_1.csv")],
         ["advance", "strings", "--upper", "(1,0)"],
         ["ingest", "edges", s("edges_1.csv"), "--key", "src"],
         ["ingest", "roots", s("roots_1.csv")],
         ["ingest", "prices", s("prices_1.csv")],
         ["ingest", "orders", s("orders_asof_1.csv")]],
        [["ingest", "words", s("words_2.csv")],
         ["advance", "words", "--since", "3"],
         ["ingest", "strings", s("strings_2.csv")],
         ["advance", "strings", "--upper", "(2,0)"],
         ["ingest", "edges", edges_2],
         ["ingest", "roots", roots_2, "--upper", "5"],
         ["ingest", "prices", s("prices_2.csv")],
         ["ingest", "orders", s("orders_asof_2.csv")]],
    ]


def _traces(store_path: str) -> dict:
    """Every output trace: its frontiers, schema and key, and its updates consolidated
    (the same updates at the same times, whatever layers hold them)."""
    from collections import Counter

    from storage.lattice import time_columns
    from storage.store import Store
    st = Store(store_path)
    out = {}
    for name in OUTPUTS:
        tr = st.trace(name)
        table = st.read_updates(tr)
        cols = tr.data_columns + time_columns(tr.d)
        acc: Counter = Counter()
        for row, diff in zip(zip(*[table.column(c).to_pylist() for c in cols]), table.column("diff").to_pylist()):
            acc[row] += diff
        out[name] = {"since": tr.since.to_json(), "upper": tr.upper.to_json(), "key": tr.key,
                     "schema": str(tr.schema), "updates": sorted((r, n) for r, n in acc.items() if n)}
    return out


def _cluster_env(cluster: Cluster, python: str, **extra) -> dict:
    env = {"DDCLI_SPARK_MASTER": cluster.url, "DDCLI_SPARK_EXECUTOR_PYTHON": python,
           "DDCLI_SPARK_CONNECT_TIMEOUT": "300"}  # a loaded CI machine starts JVMs slowly
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def python(tmp_path_factory):
    """The executors' Python: the third-party packages, and ddcli's only through the zip."""
    import subprocess
    folder = tmp_path_factory.mktemp("executor-venv")
    exe = executor_python(str(folder / "venv"))
    probe = subprocess.run([exe, "-c", "import pyarrow, numpy, pandas, duckdb, pyspark; import ops"],
                           cwd=str(folder), env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert "No module named 'ops'" in probe.stderr, probe.stderr
    return exe


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A master and two workers (in their own network namespace where possible); the
    finalizer kills their process groups and deletes the namespace whatever happened."""
    started = time.monotonic()
    c = Cluster(str(tmp_path_factory.mktemp("cluster")), workers=2)
    netns = None
    try:
        c.start()
        netns = c.netns
        print(f"\ncluster {c.url} up in {time.monotonic() - started:.0f} s; isolation: {c.isolation}")
        if netns is None:  # said in pytest's warnings summary, not only with -s
            warnings.warn(f"the Spark cluster test runs without a network namespace: {c.isolation}")
        yield c
    finally:
        c.stop()
    if netns:
        assert not os.path.exists(f"/var/run/netns/{netns}"), "the namespace outlived the cluster"


@pytest.mark.slow
def test_the_sample_pipelines_on_a_standalone_cluster_equal_local_mode(spark, cluster, python, tmp_path):
    started = time.monotonic()
    local, remote = str(tmp_path / "local"), str(tmp_path / "remote")
    for epoch, commands in enumerate(_epochs(str(tmp_path))):
        for args in commands:
            ok(cli(local, *args))
            ok(cli(remote, *args))
        ok(cli(local, "run", *PIPES))
        # epoch 0: the driver's addresses by default (its address on the route to the
        # master); epoch 1: given explicitly
        extra = {} if epoch == 0 else {"DDCLI_SPARK_DRIVER_HOST": cluster.host_addr,
                                       "DDCLI_SPARK_BIND_ADDRESS": cluster.host_addr}
        t0 = time.monotonic()
        env = _cluster_env(cluster, python, DDCLI_PROGRESS="1", DDCLI_NO_PROGRESS="0", **extra)  # progress lines on
        res = run_ddcli(["run", *PIPES], remote, env=env, timeout=900)
        assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
        assert res.stdout.count("pipeline '") == 5, res.stdout
        # cc ran resident in the executors' two slots (a barrier stage of as many tasks as
        # the cluster runs at once), not in one task nor round by round
        # (tests/loops/test_loop_partition_local.py checks the same step in local mode)
        lines = res.stderr.splitlines()
        assert any("resident in 2 tasks that exchange" in line for line in lines), res.stderr
        assert any("rounds inside 2 resident tasks" in line for line in lines), res.stderr
        assert "round by round" not in res.stderr and "in one task" not in res.stderr, res.stderr
        assert not os.path.exists(os.path.join(remote, "exchange")), "the exchange's folders are removed"
        print(f"epoch {epoch}: five pipelines on the cluster in {time.monotonic() - t0:.0f} s:", res.stdout.strip(),
              *[line for line in lines if "resident" in line], sep="\n")
        assert _traces(remote) == _traces(local)

    # the outputs hold something worth comparing
    got = _traces(remote)
    assert all(got[name]["updates"] for name in OUTPUTS)
    assert any(n < 0 for _, n in got["reach"]["updates"]), "epoch 2 retracts paths"

    # the tasks ran on both workers' executors, which fetched the shipped zip
    executors = cluster.app_dirs()
    assert {os.path.relpath(e, cluster.folder).split(os.sep)[0] for e in executors} == {"worker0", "worker1"}, executors
    assert any(name.startswith("ddcli-") and name.endswith(".zip") for e in executors for name in os.listdir(e))

    # verify on the cluster too
    t0 = time.monotonic()
    res = run_ddcli(["verify", PIPES[1]], remote, env=_cluster_env(cluster, python), timeout=900)
    assert res.returncode == 0 and "verified" in res.stdout, f"{res.stdout}\n{res.stderr}"
    print(f"verify length_count on the cluster in {time.monotonic() - t0:.0f} s")

    # without the shipped zip the executors cannot import ddcli's packages: one line, exit 2
    unshipped = str(tmp_path / "unshipped")
    ok(cli(unshipped, "ingest", "words", os.path.join(SAMPLE, "words_1.csv")))
    res = run_ddcli(["run", PIPES[0]], unshipped, env=_cluster_env(cluster, python, DDCLI_SPARK_SHIP_CODE="0"),
                    timeout=900)
    assert res.returncode == 2, f"{res.stdout}\n{res.stderr}"
    assert res.stderr.startswith("error: the executors of spark://") and "No module named 'ops'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    print(f"cluster test in {time.monotonic() - started:.0f} s")


def test_an_unreachable_master_is_one_line_and_no_hang(tmp_path):
    import socket
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = str(tmp_path / "store")
    ok(cli(store, "ingest", "words", os.path.join(SAMPLE, "words_1.csv")))
    t0 = time.monotonic()
    res = run_ddcli(["run", PIPES[0], "--master", f"spark://127.0.0.1:{port}"], store, timeout=120)
    assert res.returncode == 2, f"{res.stdout}\n{res.stderr}"
    assert res.stderr.strip() == (f"error: cannot reach the Spark master spark://127.0.0.1:{port} (127.0.0.1:{port}: "
                                  f"Connection refused); is it running, and is the address right? "
                                  f"(DDCLI_SPARK_CONNECT_TIMEOUT sets the wait)")
    assert time.monotonic() - t0 < 60


def test_local_mode_keeps_the_driver_on_loopback_and_a_cluster_gets_a_routable_address(monkeypatch):
    from ops.spark import session
    for name in ("DDCLI_SPARK_DRIVER_HOST", "DDCLI_SPARK_BIND_ADDRESS", "DDCLI_SPARK_EXECUTOR_PYTHON", "PYSPARK_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    import sys
    assert session.driver_addresses("local[*]") == ("127.0.0.1", "127.0.0.1")
    assert session.driver_addresses("local[2]") == ("127.0.0.1", "127.0.0.1")
    assert session.executor_python("local[*]") == sys.executable
    # a cluster: the address on the route to the master (a UDP connect sends nothing)
    assert session.driver_addresses("spark://127.0.0.1:7077") == ("127.0.0.1", "127.0.0.1")
    assert session.executor_python("spark://127.0.0.1:7077") == "python3"
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    assert session.executor_python("spark://h:7077") == "/opt/py/bin/python"
    monkeypatch.setenv("DDCLI_SPARK_EXECUTOR_PYTHON", "/srv/env/bin/python")
    assert session.executor_python("spark://h:7077") == "/srv/env/bin/python"
    monkeypatch.setenv("DDCLI_SPARK_DRIVER_HOST", "10.1.2.3")
    assert session.driver_addresses("spark://h:7077") == ("10.1.2.3", "10.1.2.3")
    monkeypatch.setenv("DDCLI_SPARK_BIND_ADDRESS", "0.0.0.0")
    assert session.driver_addresses("spark://h:7077") == ("10.1.2.3", "0.0.0.0")
    assert session._master_addresses("spark://a:7077,b:7078") == [("a", 7077), ("b", 7078)]
    assert session._master_addresses("yarn") == []
    with pytest.raises(SparkSetupError, match="expected spark://HOST:PORT"):
        session._master_addresses("spark://nohostport")
    assert session.is_local("local") and session.is_local("local[*]") and not session.is_local("spark://h:1")


def test_the_shipped_code_is_one_zip_per_content_of_ops_and_storage():
    import zipfile

    from ops.spark import code_zip
    path = code_zip.code_zip()
    assert code_zip.code_zip() == path  # cached: same content, same file
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
    assert {"ops/__init__.py", "ops/io/write.py", "storage/__init__.py", "storage/layer.py"} <= names
    assert all(n.endswith(".py") and n.split("/")[0] in ("ops", "storage") for n in names)
