"""A Delta table's versions as changes, read with delta-rs (``deltalake``).

Each version's changes, as the Delta protocol's change data feed defines them:

* when the table has its change data feed on at that version
  (``delta.enableChangeDataFeed``), from the feed (``DeltaTable.load_cdf``, one call for a
  run of such versions): ``insert`` and ``update_postimage`` rows +1, ``delete`` and
  ``update_preimage`` rows -1;
* otherwise from the data files the version added and removed, as its commit file
  (``_delta_log/NNN.json``) names them with their partition values: the removed files' rows
  -1 and the added files' rows +1. A rewritten file (a delete or an update copies the rows
  it keeps) is removed and added, and the rows both hold cancel when the trace consolidates
  them. Files added or removed with ``dataChange: false`` (a compaction, ``OPTIMIZE``) move
  rows without changing them and are not read. When the commit file is gone (the log was
  cleaned up), the table's files at the version are compared with those at the one before.
  Rows deleted by deletion vectors are refused in one line unless the feed is on.

A table on S3 is read with the settings of S3 stores (endpoint, region, credentials:
storage/lake/table.py's ``storage_options``). Its commit times are the commits'
``timestamp`` (milliseconds, here in microseconds).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.errors import StoreError
from storage.sources.change import Change, plain_table

_ADDED = ("insert", "update_postimage")
_META = ("_change_type", "_commit_version", "_commit_timestamp")


class DeltaSource:
    """The Delta table at ``location`` (a folder, ``file://`` or an ``s3://`` URL; another
    scheme delta-rs knows is passed to it as it is, with its own settings)."""

    def __init__(self, location: str):
        if not location:
            raise StoreError("delta: give the table's folder or s3:// URL, e.g. delta:/data/orders")
        if location.startswith("file://"):
            location = location[len("file://"):]
        self.location = location.rstrip("/") if "://" in location else os.path.realpath(location)
        self.id = "delta:" + self.location
        self.label = f"delta table {self.location}"

    def _options(self) -> dict | None:
        if not self.location.startswith("s3://"):
            return None
        from storage.blobs.resolve import for_path
        from storage.lake.table import storage_options
        return storage_options(for_path(self.location))

    def _fail(self, what: str, e: Exception) -> StoreError:
        detail = " ".join(str(e).split())[:300]
        return StoreError(f"{self.label}: {what}: {detail}")

    def changes(self, after: dict | None, *, limit: int | None, budget, progress=None) -> list[Change]:
        """The versions after ``after`` (the record of the last one taken), oldest first."""
        from deltalake import DeltaTable
        try:
            dt = DeltaTable(self.location, storage_options=self._options())
        except Exception as e:  # noqa: BLE001 - delta-rs raises its own types for a missing table
            raise self._fail("cannot be opened as a Delta table", e) from None
        latest = dt.version()
        first = 0 if after is None else int(after["version"]) + 1
        if first > latest:
            return []
        last = latest if limit is None else min(latest, first + limit - 1)
        stamps = {h["version"]: h.get("timestamp") for h in dt.history(latest - first + 1) if "version" in h}
        snap = self._snapshot(dt, first)
        out, feed = [], []
        for v in range(first, last + 1):
            if progress:
                progress(f"{self.label} version {v}")
            actions = _commit_actions(snap.dataset.filesystem, v)
            if v != first and (actions is None or any("metaData" in a for a in actions)):
                snap = self._snapshot(dt, v)  # the schema or the settings may change here
            ts = stamps.get(v)
            c = Change({"version": v}, v, None if ts is None else int(ts) * 1000, snap.dataset.schema)
            if snap.cdf:
                feed.append(c)
            else:
                c.rows = _read(*self._files_changed(dt, v, actions, snap), c.schema, budget, self.label)
            out.append(c)
        for run in _runs(feed):
            self._feed(dt, run, budget)
        return out

    def _snapshot(self, dt, version: int) -> "_Snapshot":
        try:
            dt.load_as_version(version)
            meta = dt.metadata()
            cdf = meta.configuration.get("delta.enableChangeDataFeed", "").lower() == "true"
            return _Snapshot(dt.to_pyarrow_dataset(), list(meta.partition_columns), cdf)
        except Exception as e:  # noqa: BLE001 - a version no longer in the log, a feature delta-rs cannot read, ...
            raise self._fail(f"version {version} cannot be read", e) from None

    def _files_changed(self, dt, version: int, actions: list | None, snap: "_Snapshot") -> tuple[list, list]:
        """The fragments of the data files version ``version`` removed and added: from its
        commit's actions (``dataChange: false`` ones, a compaction's, move rows without
        changing them), or, when its commit file is gone (the log was cleaned) or does not
        give the files' partition values, from the table's files before and after it."""
        if actions is not None:
            files = {k: [a[k] for a in actions if k in a and a[k].get("dataChange", True)] for k in ("remove", "add")}
            if not (snap.partitions and any(f.get("partitionValues") is None for fs in files.values() for f in fs)):
                return tuple([self._fragment(f, snap, version) for f in files[k]] for k in ("remove", "add"))
        before = self._snapshot(dt, version - 1).fragments() if version > 0 else {}
        now = self._snapshot(dt, version).fragments()
        return [f for p, f in before.items() if p not in now], [f for p, f in now.items() if p not in before]

    def _fragment(self, action: dict, snap: "_Snapshot", version: int):
        """A pyarrow fragment of the data file an add or remove action names."""
        if action.get("deletionVector"):
            raise StoreError(f"{self.label}: version {version} deletes rows with deletion vectors, which ddcli "
                             f"cannot apply without the change data feed (delta.enableChangeDataFeed)")
        expr = None
        for col, value in (action.get("partitionValues") or {}).items():
            typ = snap.dataset.schema.field(col).type
            e = pc.field(col).is_null() if value is None else pc.field(col) == _partition_value(value, typ)
            expr = e if expr is None else expr & e
        path = urllib.parse.unquote(action["path"])
        return snap.dataset.format.make_fragment(path, snap.dataset.filesystem, partition_expression=expr)

    def _feed(self, dt, run: list[Change], budget) -> None:
        """Fill the rows of a run of consecutive versions from the change data feed."""
        try:
            feed = plain_table(pa.table(dt.load_cdf(starting_version=run[0].number, ending_version=run[-1].number)))
        except Exception as e:  # noqa: BLE001
            raise self._fail(f"the change data feed of versions {run[0].number}-{run[-1].number} cannot be read",
                             e) from None
        budget.take(feed.nbytes, self.label)
        kind = feed.column("_change_type").cast(pa.string())
        diff = pc.if_else(pc.is_in(kind, pa.array(_ADDED)), 1, -1).cast(pa.int64())
        version = feed.column("_commit_version").cast(pa.int64())
        data = feed.drop_columns([c for c in _META if c in feed.column_names])
        data = data.append_column("diff", diff)
        for c in run:
            c.rows = data.filter(pc.equal(version, c.number)).select(c.schema.names + ["diff"])


@dataclass
class _Snapshot:
    """The table at one version: its dataset (schema, files, file system), partition
    columns and whether its change data feed is on."""
    dataset: object
    partitions: list[str]
    cdf: bool

    def fragments(self) -> dict:
        return {f.path: f for f in self.dataset.get_fragments()}


def _commit_actions(fs, version: int) -> list[dict] | None:
    """The actions of commit ``version`` (None when its file is gone: the log was cleaned)."""
    try:
        with fs.open_input_stream(f"_delta_log/{version:020d}.json") as f:
            return [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None


def _partition_value(text: str, typ: pa.DataType) -> pa.Scalar:
    """A partition value as the log writes it (text; timestamps in UTC) as a scalar of ``typ``."""
    if pa.types.is_timestamp(typ) and typ.tz is not None:
        return pa.array([text]).cast(pa.timestamp(typ.unit)).cast(typ)[0]
    return pa.array([text]).cast(typ)[0]


def _runs(changes: list[Change]) -> list[list[Change]]:
    """Consecutive versions, grouped: one feed read for each group."""
    runs: list[list[Change]] = []
    for c in changes:
        if runs and runs[-1][-1].number == c.number - 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def _read(removed: list, added: list, schema: pa.Schema, budget, label: str) -> pa.Table | None:
    """The rows of the ``removed`` fragments (-1) and the ``added`` ones (+1)."""
    parts = []
    for frags, sign in ((removed, -1), (added, 1)):
        for frag in frags:
            try:
                t = frag.to_table(schema=schema)
            except (OSError, pa.ArrowException) as e:
                raise StoreError(f"{label}: data file {frag.path} cannot be read: {' '.join(str(e).split())[:300]}") from None
            budget.take(t.nbytes, label)
            parts.append(t.append_column("diff", pa.array(np.full(t.num_rows, sign, dtype=np.int64))))
    return pa.concat_tables(parts) if parts else None
