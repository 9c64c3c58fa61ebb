"""A Delta table's versions as changes, read with delta-rs (``deltalake``).

Each version's changes, as the Delta protocol's change data feed defines them:

* when the table has its change data feed on at that version
  (``delta.enableChangeDataFeed``), from the feed (``DeltaTable.load_cdf``, one call for a
  run of such versions): ``insert`` and ``update_postimage`` rows +1, ``delete`` and
  ``update_preimage`` rows -1;
* otherwise from the data files the version added and removed: the files of the table at
  the version against those at the version before, the removed files' rows -1 and the
  added files' rows +1. A rewritten file (a delete or an update copies the rows it keeps)
  is removed and added, and the rows both hold cancel when the trace consolidates them.
  A version whose commit marks every file it adds and removes ``dataChange: false`` (a
  compaction, ``OPTIMIZE``) rearranges rows without changing them: its files are not read.

A table on S3 is read with the settings of S3 stores (endpoint, region, credentials:
storage/lake/table.py's ``storage_options``). Its commit times are the commits'
``timestamp`` (milliseconds, here in microseconds).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.errors import StoreError
from storage.sources.change import Change, plain_table

_ADDED = ("insert", "update_postimage")
_META = ("_change_type", "_commit_version", "_commit_timestamp")


class DeltaSource:
    """The Delta table at ``location`` (a folder or an ``s3://`` URL)."""

    def __init__(self, location: str):
        if not location:
            raise StoreError("delta: give the table's folder or s3:// URL, e.g. delta:/data/orders")
        self.location = location.rstrip("/") if location.startswith("s3://") else os.path.realpath(location)
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
        prev = self._version(dt, first - 1)[0] if first > 0 else {}
        out, feed = [], []
        for v in range(first, last + 1):
            if progress:
                progress(f"{self.label} version {v}")
            files, dataset = self._version(dt, v)
            schema = dataset.schema
            ts = stamps.get(v)
            c = Change({"version": v}, v, None if ts is None else int(ts) * 1000, schema)
            if dt.metadata().configuration.get("delta.enableChangeDataFeed", "").lower() == "true":
                feed.append(c)
            elif not _rearranged_only(dataset.filesystem, v):
                c.rows = _file_changes(prev, files, schema, budget, self.label)
            out.append(c)
            prev = files
        for run in _runs(feed):
            self._feed(dt, run, budget)
        return out

    def _version(self, dt, version: int) -> tuple[dict, object]:
        """The table at ``version``: its data files (path -> pyarrow fragment) and dataset."""
        try:
            dt.load_as_version(version)
            dataset = dt.to_pyarrow_dataset()
            return {f.path: f for f in dataset.get_fragments()}, dataset
        except Exception as e:  # noqa: BLE001 - a version no longer in the log, deletion vectors, ...
            raise self._fail(f"version {version} cannot be read", e) from None

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


def _rearranged_only(fs, version: int) -> bool:
    """Whether commit ``version`` only moves rows between files (every add and remove action
    says ``dataChange: false``). False when the commit file is gone (the log was cleaned):
    its files are then read, and rows moved cancel."""
    try:
        with fs.open_input_stream(f"_delta_log/{version:020d}.json") as f:
            actions = [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
    except (OSError, ValueError):
        return False
    moves = [a[k] for a in actions for k in ("add", "remove") if k in a]
    return bool(moves) and not any(m.get("dataChange", True) for m in moves)


def _runs(changes: list[Change]) -> list[list[Change]]:
    """Consecutive versions, grouped: one feed read for each group."""
    runs: list[list[Change]] = []
    for c in changes:
        if runs and runs[-1][-1].number == c.number - 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def _file_changes(prev: dict, files: dict, schema: pa.Schema, budget, label: str) -> pa.Table | None:
    """The rows of the files removed from ``prev`` (-1) and added in ``files`` (+1)."""
    parts = []
    for frags, sign in (([f for p, f in prev.items() if p not in files], -1),
                        ([f for p, f in files.items() if p not in prev], 1)):
        for frag in frags:
            try:
                t = frag.to_table(schema=schema)
            except (OSError, pa.ArrowException) as e:
                raise StoreError(f"{label}: data file {frag.path} cannot be read: {' '.join(str(e).split())[:300]}") from None
            budget.take(t.nbytes, label)
            parts.append(t.append_column("diff", pa.array(np.full(t.num_rows, sign, dtype=np.int64))))
    return pa.concat_tables(parts) if parts else None
