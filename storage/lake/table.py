"""One trace's Delta table: bring its log to what a committed ddcli state says.

The table lives in the trace's own folder (``traces/NAME/_delta_log/``) and names the
trace's sealed layer files in place: zero copy. Each Delta version adds the layer files
ddcli's log added and removes those it merged away (or all of them: the trace was
dropped), and carries ``txn {appId: "ddcli", version: V}`` (Delta's idempotent-write
marker: the ddcli log version it shows) and, in its ``commitInfo``, the trace's since and
upper and the ddcli version.

Two ways to write a version:

* :func:`publish` loads the table with delta-rs (``deltalake``), compares the files its
  newest version holds with the trace's sealed layers and commits the difference through
  delta-rs (creating the table the first time). A table whose ``txn`` already says ``V``
  or later is left alone, and delta-rs is told not to retry a lost race (no silent rebase
  on a newer version), so the Delta log never goes back to an older ddcli state.
* :func:`append` is the cheap way when the caller knows the table's newest version and
  the files it holds (storage/lake/follow.py keeps that record): it writes the one JSON
  commit file of the Delta protocol with put-if-absent, as delta-rs would, and reports
  False when another writer took that version first (then :func:`publish` decides).
  Loading a table costs milliseconds per version since its last checkpoint, more than the
  commit itself; a checkpoint is made with delta-rs every :data:`CHECKPOINT_EVERY` versions.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass

from storage.lake.types import delta_arrow_schema, delta_problem
from storage.lattice import format_frontier
from storage.state.trace import Trace

APP_ID = "ddcli"
ATTEMPTS = 8  # a commit that keeps losing races to other writers gives up (the next command catches up)
CHECKPOINT_EVERY = 100  # delta-rs's default checkpoint interval


@dataclass(frozen=True)
class Published:
    """Where a table is after :func:`publish`: its newest Delta version and the ddcli log
    version that one shows (None, None: no table); ``note`` says what happened."""
    version: int | None
    txn: int | None
    note: str


def storage_options(blobs) -> dict[str, str] | None:
    """delta-rs's settings for the store's storage: the same endpoint, region and
    credentials as ddcli's own client (storage/blobs/s3.py); None for a local folder."""
    if not getattr(blobs, "bucket", None):
        return None
    import os
    opts = {"AWS_REGION": blobs.region}
    if blobs.endpoint:
        opts["AWS_ENDPOINT_URL"] = blobs.endpoint
        if blobs.endpoint.startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if os.environ.get(k):
            opts[k] = os.environ[k]
    return opts


@functools.lru_cache(maxsize=1)
def ddcli_version() -> str:
    """The installed ddcli's version (read once per process: the metadata lookup walks
    every installed distribution, some 2 ms, and each table version names it)."""
    try:
        from importlib.metadata import version
        return version("ddcli")
    except Exception:  # noqa: BLE001 - running from a source tree without metadata
        return "unknown"


def commit_info(name: str, trace: Trace | None, version: int, gone: str = "the trace was dropped") -> dict:
    """What each Delta version tells a reader about the ddcli state it shows (``gone``: why
    a version without a trace holds no files)."""
    info = {"trace": name, "ddcli": ddcli_version(), "logVersion": version}
    if trace is None:
        return {"ddcli": {**info, "empty": gone}, "userMetadata": f"ddcli {info['ddcli']}: empty, {gone}"}
    info.update(since=trace.since.to_json(), upper=trace.upper.to_json(), d=trace.d)
    return {"ddcli": info,
            "userMetadata": (f"ddcli {info['ddcli']}: log version {version}, since {format_frontier(trace.since)}, "
                             f"upper {format_frontier(trace.upper)}")}


def _description(name: str, trace: Trace) -> str:
    times = "time" if trace.d == 1 else f"time_0 .. time_{trace.d - 1}"
    cond = "time <= t" if trace.d == 1 else "every time_i <= t_i"
    return (f"ddcli trace {name}: updates (data columns, {times}, diff). The collection at time t is "
            f"SUM(diff) over the rows with {cond}, grouped by the data columns, where the sum is not 0. "
            f"Written by ddcli from its own log: do not write to this table or VACUUM it.")


def _sealed(trace: Trace | None) -> dict:
    """The layer files a table shows for ``trace``: name -> (bytes, rows)."""
    return {f.name: (f.bytes, f.rows) for l in trace.layers for f in l.files} if trace is not None else {}


# ------------------------------------------------------------------ the cheap way: one JSON commit


def append(blobs, uri: str, name: str, old: Trace, new: Trace | None, version: int, at: int) -> bool:
    """Write Delta version ``at + 1`` of the table at ``uri``, whose version ``at`` shows
    ``old``'s sealed layers, so that it shows ``new``'s (None: dropped) as of ddcli log
    version ``version``. False when version ``at + 1`` exists already (nothing written)."""
    now = int(time.time() * 1000)
    before, after = _sealed(old), _sealed(new)
    info = commit_info(name, new, version)
    lines = [{"commitInfo": {"timestamp": now, "operation": "WRITE",
                             "operationParameters": {"mode": "Append", "partitionBy": "[]"},
                             "engineInfo": f"ddcli-{info['ddcli']['ddcli']}", "isBlindAppend": False, **info}}]
    lines += [{"add": {"path": f, "partitionValues": {}, "size": size, "modificationTime": now, "dataChange": True,
                       "stats": json.dumps({"numRecords": rows})}}
              for f, (size, rows) in after.items() if f not in before]
    lines += [{"remove": {"path": f, "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
                          "partitionValues": {}, "size": size}}
              for f, (size, _) in before.items() if f not in after]
    lines.append({"txn": {"appId": APP_ID, "version": version, "lastUpdated": now}})
    data = "\n".join(json.dumps(line, separators=(",", ":")) for line in lines).encode() + b"\n"
    path = blobs.join(uri, "_delta_log", f"{at + 1:020d}.json")
    if not blobs.put_if_absent(path, data, "delta.before_link"):
        return False
    if (at + 1) % CHECKPOINT_EVERY == 0:
        checkpoint(uri, storage_options(blobs))
    return True


def checkpoint(uri: str, options: dict | None) -> None:
    """A checkpoint of the table's newest version, so that readers replay few commits;
    also removes log files past the table's log retention. Only an optimisation: a
    failure leaves the commits as they are (the next checkpoint covers them)."""
    from deltalake import DeltaTable
    try:
        table = DeltaTable(uri, storage_options=options)
        table.create_checkpoint()
        table.cleanup_metadata()
    except Exception:  # noqa: BLE001 - readers replay a few more commits meanwhile
        pass


# ------------------------------------------------------------------ the general way: through delta-rs


def publish(uri: str, name: str, trace: Trace | None, version: int, *, options: dict | None,
            retention_seconds: float, frontiers_changed: bool | None = True) -> Published:
    """Bring the Delta table at ``uri`` to ``trace`` as of ddcli log version ``version``
    (``trace`` None: the trace is gone, its table is emptied). ``frontiers_changed``: the
    since or upper moved (None: not known, compare with the newest Delta version's)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError, TableNotFoundError

    problem = delta_problem(trace.schema) if trace is not None else None
    for _ in range(ATTEMPTS):
        try:
            table = DeltaTable(uri, storage_options=options)
        except TableNotFoundError:
            table = None
        try:
            if table is None:
                if trace is None or problem:
                    return Published(None, None, problem or "no table")
                _create(uri, name, trace, version, options, retention_seconds)
                return Published(0, version, "created")
            if problem:  # a trace made again with a type Delta cannot hold: its table is emptied
                return _update(uri, table, name, None, version, frontiers_changed, problem)
            return _update(uri, table, name, trace, version, frontiers_changed)
        except CommitFailedError:
            time.sleep(0.01)  # another writer committed this Delta version first: look again
        except Exception as e:  # noqa: BLE001 - a create racing another: the table exists now
            if table is None and "already exists" in str(e).lower():
                continue
            raise
    raise CommitFailedError(f"the Delta table of trace {name!r} kept changing; "
                            f"the next command brings it up to date")


def _adds(trace: Trace, names: set[str] | None = None) -> list:
    from deltalake.transaction import AddAction
    now = int(time.time() * 1000)
    return [AddAction(f, size, {}, now, True, json.dumps({"numRecords": rows}))
            for f, (size, rows) in _sealed(trace).items() if names is None or f in names]


def _properties(name: str, trace: Trace | None, version: int, gone: str = "the trace was dropped"):
    from deltalake.transaction import CommitProperties, Transaction
    return CommitProperties(custom_metadata=commit_info(name, trace, version, gone), max_commit_retries=0,
                            app_transactions=[Transaction(APP_ID, version)])


def _create(uri: str, name: str, trace: Trace, version: int, options, retention_seconds: float) -> None:
    from deltalake import Schema
    from deltalake.transaction import create_table_with_add_actions
    keep = max(int(retention_seconds), 1)
    config = {"delta.deletedFileRetentionDuration": f"interval {keep} seconds",
              "delta.logRetentionDuration": f"interval {max(keep, 30 * 24 * 3600)} seconds",
              "delta.checkpointInterval": str(CHECKPOINT_EVERY)}
    create_table_with_add_actions(uri, Schema.from_arrow(delta_arrow_schema(trace.schema, trace.d)), _adds(trace),
                                  mode="error", name=name, description=_description(name, trace),
                                  configuration=config, storage_options=options,
                                  commit_properties=_properties(name, trace, version))


def _update(uri: str, table, name: str, trace: Trace | None, version: int, frontiers_changed: bool | None,
            gone: str = "the trace was dropped") -> Published:
    """One commit that turns ``table``'s newest version into ``trace``'s sealed files
    (none when the table is there already, or further: another writer was quicker)."""
    import pyarrow as pa
    from deltalake import Schema
    from deltalake.transaction import RemoveAction

    at = table.version()
    seen = table.transaction_version(APP_ID)
    if seen is not None and seen >= version:
        return Published(at, seen, "current")
    actions = pa.table(table.get_add_actions(flatten=True))
    have = dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()))
    want = set(_sealed(trace))
    schema = Schema.from_arrow(delta_arrow_schema(trace.schema, trace.d)) if trace is not None else table.schema()
    same_schema = schema.to_json() == table.schema().to_json()
    if frontiers_changed is None:
        now = (trace.since.to_json(), trace.upper.to_json()) if trace is not None else None
        frontiers_changed = trace is None or _frontiers(uri, at) != now
    if same_schema and set(have) == want and (not frontiers_changed or trace is None and not have):
        return Published(at, seen, "current")
    if not same_schema:  # the trace was dropped and made again with other columns
        table.create_write_transaction(_adds(trace), mode="overwrite", schema=schema,
                                       commit_properties=_properties(name, trace, version))
        return Published(at + 1, version, "committed")
    now_ms = int(time.time() * 1000)
    removes = [RemoveAction(path=p, deletion_timestamp=now_ms, data_change=True, partition_values={}, size=size)
               for p, size in have.items() if p not in want]
    adds = _adds(trace, want - set(have)) if trace is not None else []
    table.create_write_transaction(adds + removes, mode="append", schema=schema,
                                   commit_properties=_properties(name, trace, version, gone))
    return Published(at + 1, version, "committed")


def shown(blobs, uri: str, version: int) -> dict | None:
    """What Delta version ``version`` of the table says it shows (its ``ddcli`` commit info),
    read with ddcli's own storage client; None when unknown."""
    try:
        lines = blobs.get(blobs.join(uri, "_delta_log", f"{version:020d}.json")).decode().splitlines()
    except (OSError, ValueError):
        return None
    for line in lines:
        info = json.loads(line).get("commitInfo", {}).get("ddcli") if line.strip() else None
        if isinstance(info, dict):
            return info
    return None


def _frontiers(uri: str, version: int) -> tuple | None:
    """The since and upper the newest Delta version was committed with (None: unknown).

    Read from the commit's JSON file with ddcli's own storage client: delta-rs's
    ``history`` holds Python's lock while it waits on the network."""
    from storage.blobs.resolve import for_path
    info = shown(for_path(uri), uri, version)
    return None if info is None else (info.get("since"), info.get("upper"))
