"""Fault points: named places where a test can make a writer die as if killed.

``DDCLI_FAULT=name`` (or ``name@N`` for the N-th time the point is reached, counting from 1)
makes the process exit at once with status 137 when it reaches that point, without
cleaning up — exactly what SIGKILL would leave behind. Crash-safety tests use it.

``DDCLI_FAULT=name=enospc`` (or ``name@N=enospc``) raises ``OSError(ENOSPC)`` there
instead, as a full disk would: for tests of what a writer cleans up and reports.

Points (in the order a writer reaches them):

* ``lease.before_link`` — taking a run's lease (storage/writes/lease.py);
* ``layer.before_fsync``, ``layer.before_rename``, ``layer.after_rename`` — writing a layer file;
* ``layer.totals`` — keeping a summary beside a large layer (storage/layer.py: its per-key totals, its rows' hashes);
* ``log.before_link``, ``log.after_link`` — committing a metadata version;
* ``log.before_hint`` — a checkpoint version is committed, the hint not yet updated;
* ``log.before_prune``, ``log.mid_prune`` — pruning old versions after a checkpoint (or
  in ``compact``): before the first deletion, and after it;
* ``ingest.before_commit``, ``ingest.after_commit`` — around the commit of an ingest;
* ``advance.before_commit``, ``advance.after_commit`` — around the commit of an advance;
* ``compact.before_commit``, ``compact.after_commit`` — around the commit of a merge;
* ``reader.before_commit``, ``reader.after_commit`` — around creating or dropping a named reader;
* ``ack.before_commit``, ``ack.after_commit`` — around a named reader's acknowledgement
  (``ddcli changes --ack``: its output is completely written by then);
* ``delta.before_commit`` — ddcli's commit is done, the Delta version of one of the traces
  it changed is not (reached once per trace); ``delta.before_link`` — creating that Delta
  version's commit file; ``delta.after_commit`` — every Delta version is written, the
  record of how far they are (storage/lake/follow.py) is not;
* ``tables.before_commit`` — the Delta logs are written, the current-state table of one of
  the outputs (storage/lake/outputs.py) is not (reached once per output); ``tables.after_commit``
  — every such table is written, their record is not.
"""

from __future__ import annotations

import errno
import os

_hits: dict[str, int] = {}


def reset() -> None:
    """Count the points from 1 again: each command of a process that runs many (ddcli's
    service) counts its own hits, as a process of its own would."""
    _hits.clear()


def point(name: str) -> None:
    spec = os.environ.get("DDCLI_FAULT")
    if not spec:
        return
    where, _, action = spec.partition("=")
    target, _, nth = where.partition("@")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] != int(nth or 1):
        return
    if action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + f" (fault injected at {name})")
    os._exit(137)
