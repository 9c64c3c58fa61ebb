"""Rows and small agreements exchanged among the tasks of a resident loop, through files.

A loop that no columns deal to tasks (connected components: labels cross every partition)
runs its fixed point in N Spark tasks that run together (a barrier stage,
``ops/loops/local.py``). Each task owns, for every arrangement of the body, the rows whose
read key (a join's ``on``, a reduce's key) hashes to it; after an arranged node's changes of
a round are computed, every task sends each other task the rows it owns. The tasks also
agree, once a round, on the next iteration and on whether to stop.

The exchange goes through a folder every task sees (in local mode the machine's temporary
folder, on a cluster one under the store, whose filesystem every executor shares; see
``ops/loops/local.py``): measured here, a round trip between 2 tasks takes 1-3 ms, where
``BarrierTaskContext.allGather`` took a second a call. Exchange ``k`` of sender ``i`` is Arrow IPC
files ``k.i.j`` (to task ``j``, written under a temporary name and renamed), then a note
``k.i.done`` (JSON: the tasks it wrote to, and what it says to all). Every task makes the
same exchanges in the same order, so ``k`` numbers them. A task that fails leaves
``abort``, and the others stop waiting.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pyarrow as pa

from ops.dataflow.operators import JOIN, OPERATORS, REDUCE
from ops.loops.spine import comparable, key_hashes

ABORT = "abort"
#: seconds a task waits for the others at one exchange before it gives up (a task that
#: died without leaving ``abort``; Spark normally kills a barrier stage's tasks together)
WAIT_SECONDS = float(os.environ.get("DDCLI_LOOP_EXCHANGE_TIMEOUT", "3600"))


class ExchangeAborted(RuntimeError):
    """Another task of the loop failed, or did not come to an exchange in time."""


class Exchange:
    """Task ``me`` of ``n``, exchanging through ``folder``."""

    def __init__(self, folder: str, me: int, n: int):
        self.folder, self.me, self.n, self.seq = folder, me, n, 0
        os.makedirs(folder, exist_ok=True)

    def claim(self) -> bool:
        """False when this task ran before in this folder (a stage Spark runs again after a
        failure): the files left then would be read as this run's."""
        try:
            os.close(os.open(self._path("claim", self.me), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False

    def _path(self, *parts) -> str:
        return os.path.join(self.folder, ".".join(str(p) for p in parts))

    def swap(self, outgoing: list[pa.Table | None], note=None) -> tuple[list[pa.Table], list]:
        """Send ``outgoing[j]`` to task ``j`` and ``note`` to every task; returns the
        tables sent to this task (its own included) and every task's note, by task."""
        k = self.seq
        self.seq += 1
        sent = []
        for j, t in enumerate(outgoing):
            if t is not None and t.num_rows:
                _write_atomic(self._path(k, self.me, j), lambda fh, t=t: _write_table(fh, t))
                sent.append(j)
        done = json.dumps({"to": sent, "note": note}).encode()
        _write_atomic(self._path(k, self.me, "done"), lambda fh: fh.write(done))
        notes, tables = [], []
        for i in range(self.n):
            got = json.loads(self._wait(self._path(k, i, "done")))
            notes.append(got["note"])
            if self.me in got["to"]:
                path = self._path(k, i, self.me)
                with pa.memory_map(path) as src:
                    tables.append(pa.ipc.open_file(src).read_all())
                os.remove(path)  # only this task reads it
        return tables, notes

    def agree(self, note) -> list:
        """Every task's ``note``, by task (a swap without rows)."""
        return self.swap([None] * self.n, note)[1]

    def _wait(self, path: str) -> bytes:
        pause, started = 0.0002, time.monotonic()
        while True:
            try:
                with open(path, "rb") as fh:
                    return fh.read()
            except FileNotFoundError:
                pass
            if os.path.exists(os.path.join(self.folder, ABORT)):
                raise ExchangeAborted("another task of the loop failed")
            if time.monotonic() - started > WAIT_SECONDS:
                raise ExchangeAborted(f"no other task of the loop came to exchange {path} within {WAIT_SECONDS:.0f} s "
                                      f"(DDCLI_LOOP_EXCHANGE_TIMEOUT)")
            time.sleep(pause)
            pause = min(pause * 1.5, 0.005)

    def abort(self, why: str) -> None:
        """Tell the other tasks to stop waiting: this one failed."""
        try:
            _write_atomic(os.path.join(self.folder, ABORT), lambda fh: fh.write(why.encode()))
        except OSError:
            pass


def _write_table(fh, t: pa.Table) -> None:
    with pa.ipc.new_file(fh, t.schema) as w:
        w.write_table(t)


def _write_atomic(path: str, write) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        write(fh)
    os.replace(tmp, path)


def owners(con, t: pa.Table, key: list[str], n: int) -> np.ndarray:
    """The task owning each row of ``t``: the hash of its ``key`` columns modulo ``n``
    (``ops.loops.spine.key_hashes``: one hash for an integer of every width, so both sides
    of a join agree)."""
    if not key:  # a global aggregate, a join without keys: every row in task 0
        return np.zeros(t.num_rows, np.int64)
    return (key_hashes(con, t, key) % np.uint64(n)).astype(np.int64)


def split_by_owner(t: pa.Table | None, owner: np.ndarray, n: int) -> list[pa.Table | None]:
    """``t``'s rows in ``n`` tables, by ``owner``."""
    if t is None or t.num_rows == 0:
        return [None] * n
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(n + 1))
    ordered = t.take(pa.array(order))
    return [ordered.slice(bounds[j], bounds[j + 1] - bounds[j]) for j in range(n)]


class Router:
    """What ``ops.loops.task.fixed_point`` needs to run as one of N tasks: each arranged
    node's rows routed to their owners by the node's read key (``keys``), and agreement."""

    def __init__(self, exchange: Exchange, keys: dict[int, list[str]]):
        self.exchange, self.keys = exchange, keys

    def route(self, con, nid: int, t: pa.Table | None, schema: pa.Schema) -> pa.Table | None:
        """Node ``nid``'s rows of every task that this task owns (every task calls it)."""
        return self.route_by(con, t, self.keys[nid], schema)

    def route_by(self, con, t: pa.Table | None, key: list[str], schema: pa.Schema) -> pa.Table | None:
        n = self.exchange.n
        parts = [None] * n if t is None or t.num_rows == 0 else split_by_owner(t, owners(con, t, key, n), n)
        got = [x.cast(schema) for x in self.exchange.swap(parts)[0] if x.num_rows]
        if not got:
            return None
        return got[0] if len(got) == 1 else pa.concat_tables(got)

    def agree(self, note) -> list:
        return self.exchange.agree(note)


def read_keys(body) -> dict[int, list[str]] | str:
    """Arranged node id -> the columns its stateful readers group or join it by, or why
    the body cannot be routed: a node read by two different keys (it would need a copy
    per key), or a join whose sides' key columns are of different types (their hashes
    could differ)."""
    by_id = {n.id: n for n in body.nodes}
    keys: dict[int, list[str]] = {}
    for n in body.nodes:
        family = OPERATORS[n.op].family
        if family == JOIN:
            reads = [(i, list(n.on)) for i in n.inputs]
            for c in n.on:
                a, b = (by_id[i].schema.field(c).type for i in n.inputs)
                if not comparable(a, b):
                    return f"join of node {n.id} on {c}: its sides' types differ ({a}, {b})"
        elif family == REDUCE:
            reads = [(n.inputs[0], list(n.key))]
        else:
            continue
        for nid, key in reads:
            if keys.setdefault(nid, key) != key:
                return f"node {nid} is read by {', '.join(keys[nid])} and by {', '.join(key)}"
    return keys
