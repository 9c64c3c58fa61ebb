"""A command run by the warm engine behaves as in its own process: a differential test.

A seeded random sequence of commands from three clients — each with a working folder, a
``ddcli.toml`` and ``DDCLI_*`` values of its own, one outside ddcli's checkout, one inside
it, and one whose store is ``s3://shared/st`` on one of two S3 servers that both have a
bucket ``shared`` (``AWS_*`` values chosen per command) — with edits between them of the pipeline file and of two helper modules (one in
the checkout, on ``PYTHONPATH``, whose function Spark tasks run; one outside it, read by the
pipeline file and by tasks) and of a variable the tasks read. The sequence runs twice:
through the service, and with ``DDCLI_SERVICE=0``; each command's exit code, stdout and
stderr (timings and folders masked) and, at the end, each client's traces (their
consolidated updates) must be the same.

``DDCLI_DIFF_SEED`` and ``DDCLI_DIFF_ROUNDS`` pick another sequence (each round is one
``run`` or ``verify``, some 10-20 s in a process of its own).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import uuid
from collections import Counter

import pytest

from tests.helpers import REPO
from tests.helpers.s3 import aws_env, make_bucket, server_process
from tests.service.processes import commands_served, ddcli, service_folder, service_log, wait_for_warm_up
from tests.service.test_service import WORDS

SEED = int(os.environ.get("DDCLI_DIFF_SEED", "3"))
ROUNDS = int(os.environ.get("DDCLI_DIFF_ROUNDS", "4"))
CLIENT_STORES = {"a": "store_a", "b": "store_b", "c": "s3://shared/st"}  # each client's ddcli.toml ``store``
TASK_ROWS = {"a": 3, "b": 1 << 20, "c": 5}  # and its ``reduce_task_rows``
ENDPOINTS = ("A", "B")  # client c's two S3 servers

PIPELINE = """
import {outside} as outside
from {inside} import per_key

SUFFIX = outside.SUFFIX  # read by the pipeline file


def pipeline(p):
    words = p.input("words")
    p.output("tagged", words.select(tag="'" + SUFFIX + "'"))
    p.output("per", words.reduce_per_key("word", per_key))
    p.output("scaled", words{extra}.threshold(outside.scale))
"""

INSIDE = """
import pyarrow as pa

{pad}
def per_key(rows):
    return pa.table({{"v": pa.array([{value}] * min(rows.num_rows, 1), pa.int64())}})
"""

OUTSIDE = """
import os

SUFFIX = "{suffix}"
{pad}

def scale(counts):  # run in Spark tasks, with the client's environment
    return counts * {value} * int(os.environ.get("TASK_SCALE", "1"))
"""


def _write(path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _sequence(rng: random.Random, rounds: int) -> list[list[tuple]]:
    """Rounds of actions: edits, ingests, then one ``run`` or ``verify`` of one client (client
    c's on the S3 server the round picks)."""
    out = []
    ingested = {"a": 0, "b": 0, "c@A": 0, "c@B": 0}
    for r in range(rounds):
        client = rng.choice("abc")
        endpoint = rng.choice(ENDPOINTS) if client == "c" else None
        place = f"c@{endpoint}" if endpoint else client
        actions = []
        if ingested[place] == 0 or (ingested[place] < len(WORDS) and rng.random() < 0.4):
            actions.append(("ingest", client, WORDS[ingested[place]], endpoint))
            ingested[place] += 1
        for helper in ("inside", "outside"):
            if r == 0 or rng.random() < 0.6:
                actions.append(("edit", helper, rng.randint(1, 9), rng.choice(["x", "y", "zz"])))
        if r and rng.random() < 0.25:
            actions.append(("pipeline", client, rng.choice(["", ".distinct()"])))
        env = {"TASK_SCALE": str(rng.randint(1, 3)), "DDCLI_STRICT_NOOP": rng.choice(["0", "1"])}
        if rng.random() < 0.2 and r:
            actions.append(("command", client, ["verify", "p.py"], env, endpoint))
        else:
            actions.append(("command", client, ["run", "p.py"] + (["--rebuild"] if rng.random() < 0.6 else []), env,
                            endpoint))
        out.append(actions)
    return out


def _history(store: str, env: dict | None = None) -> dict:
    """Every trace's consolidated updates (data, time, diff), read with pyarrow (an S3 store
    with ``env``'s endpoint and keys)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage.blobs.resolve import forget_clients
    from storage.store import Store
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    forget_clients()
    try:
        st = Store(store)
        out = {}
        for name, t in st.state().traces.items():
            acc: Counter = Counter()
            for path in st.layer_paths(t, t.layers + t.pending):
                source = pa.BufferReader(st.blobs.get(path)) if store.startswith("s3://") else path
                for r in pq.read_table(source).to_pylist():
                    acc[tuple(sorted((k, v) for k, v in r.items() if k != "diff"))] += r["diff"]
            out[name] = sorted((k, v) for k, v in acc.items() if v)
        return out
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        forget_clients()


def _masked(text: str, folders: dict[str, str]) -> str:
    for label, folder in folders.items():
        text = text.replace(folder, f"<{label}>")
    return re.sub(r"\d+\.\d+ s\b", "N s", text)


def _play(sequence, root: str, names: dict[str, str], served: bool) -> tuple[list, dict]:
    """Run ``sequence`` with clients under ``root`` (``b`` inside the checkout, ``c`` on two
    S3 servers of its own); what each command answered, and the clients' traces."""
    with server_process() as url_a, server_process() as url_b:
        urls = {"A": url_a, "B": url_b}
        for url in urls.values():
            make_bucket(url, "shared")
        return _play_on(sequence, root, names, served, urls)


def _play_on(sequence, root: str, names: dict[str, str], served: bool, urls: dict[str, str]) -> tuple[list, dict]:
    clients = {"a": os.path.join(root, "a"), "b": os.path.join(REPO, f".ddcli-diff-{names['id']}"),
               "c": os.path.join(root, "c")}
    lib = os.path.join(root, "lib")
    for folder in (*clients.values(), lib):
        os.makedirs(folder)
    inside = os.path.join(REPO, f"{names['inside']}.py")
    env = {"PYTHONPATH": os.pathsep.join([REPO, lib]), "DDCLI_SERVICE": "1" if served else "0"}
    masks = {"client_a": clients["a"], "client_b": clients["b"], "client_c": clients["c"], "lib": lib, "repo": REPO,
             **{f"endpoint_{label}": url for label, url in urls.items()}}
    on = lambda endpoint: aws_env(urls[endpoint]) if endpoint else {}  # noqa: E731
    answers, step = [], 0
    try:
        for name, folder in clients.items():
            _write(os.path.join(folder, "ddcli.toml"), f'store = "{CLIENT_STORES[name]}"\nreduce_task_rows = {TASK_ROWS[name]}\n')
            _write(os.path.join(folder, "p.py"), PIPELINE.format(outside=names["outside"], inside=names["inside"], extra=""))
        for actions in sequence:
            for action in actions:
                step += 1
                pad = "#" * step  # every version of a helper has a size of its own (cached bytecode)
                if action[0] == "ingest":
                    res = ddcli(["ingest", "words", action[2]], clients[action[1]], {**env, **on(action[3])})
                    answers.append((action, res.returncode, _masked(res.stdout, masks), _masked(res.stderr, masks)))
                elif action[0] == "edit" and action[1] == "inside":
                    _write(inside, INSIDE.format(value=action[2], pad=pad))
                elif action[0] == "edit":
                    _write(os.path.join(lib, f"{names['outside']}.py"),
                           OUTSIDE.format(value=action[2], suffix=action[3], pad=pad))
                elif action[0] == "pipeline":
                    _write(os.path.join(clients[action[1]], "p.py"),
                           PIPELINE.format(outside=names["outside"], inside=names["inside"], extra=action[2]))
                else:
                    _, client, args, extra, endpoint = action
                    res = ddcli(args, clients[client], {**env, **extra, **on(endpoint)})
                    answers.append((action, res.returncode, _masked(res.stdout, masks), _masked(res.stderr, masks)))
                    if served and "DDCLI_SERVICE_DIR" in os.environ and "warm-up" not in service_log(os.environ["DDCLI_SERVICE_DIR"]):
                        wait_for_warm_up(os.environ["DDCLI_SERVICE_DIR"])  # else the next may run elsewhere
        stores = {c: _history(os.path.join(folder, CLIENT_STORES[c])) for c, folder in clients.items()
                  if c != "c" and os.path.isdir(os.path.join(folder, CLIENT_STORES[c]))}
        for label, url in urls.items():
            stores[f"c@{label}"] = _history(CLIENT_STORES["c"], aws_env(url))
    finally:
        shutil.rmtree(clients["b"], ignore_errors=True)
        if os.path.exists(inside):
            os.remove(inside)
    return answers, stores


@pytest.mark.slow
def test_commands_behave_the_same_through_the_service_and_in_their_own_processes(tmp_path):
    sequence = _sequence(random.Random(SEED), ROUNDS)
    hexid = uuid.uuid4().hex[:10]
    names = {"id": hexid, "inside": f"_diff_inside_{hexid}", "outside": f"diff_outside_{hexid}"}
    seen = {}
    for served in (False, True):
        root = str(tmp_path / ("served" if served else "alone"))
        with service_folder() as folder:
            seen[served] = _play(sequence, root, names, served)
            commands = sum(1 for actions in sequence for a in actions if a[0] == "command")
            assert commands_served(folder, at_least=commands if served else 0, timeout=5) == (commands if served else 0), \
                service_log(folder)
    alone, through = seen[False], seen[True]
    assert any(code == 0 for _, code, _, _ in alone[0]) and alone[1], alone
    for one, other in zip(alone[0], through[0]):
        assert one == other, f"seed {SEED}: a command answered otherwise through the service"
    assert alone[1] == through[1], f"seed {SEED}: the stores differ"
