"""A trace read as a Delta Lake table by tools that know nothing of ddcli.

The readers here import delta-rs (``deltalake``), polars and pyarrow only, never the
project's code: they are the independent side of the tests in tests/lake/. The collection
at time ``t`` is what README.md tells other tools to compute: the sum of ``diff`` over the
rows whose time is ``<= t`` (coordinatewise for ``time_0 … time_{d-1}``), grouped by the
data columns, zeros dropped.
"""

from __future__ import annotations

import os
from collections import Counter

_META = {"diff"}


def storage_options(uri: str) -> dict | None:
    """delta-rs and polars settings for an ``s3://`` table on the tests' server."""
    if not uri.startswith("s3://"):
        return None
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"]}


def _time_columns(names: list[str]) -> list[str]:
    if "time" in names:
        return ["time"]
    return sorted((n for n in names if n.startswith("time_") and n[5:].isdigit()), key=lambda n: int(n[5:]))


def delta_rs_updates(uri: str, version: int | None = None):
    """The table's rows as a pyarrow table, read by delta-rs."""
    from deltalake import DeltaTable
    return DeltaTable(uri, version=version, storage_options=storage_options(uri)).to_pyarrow_table()


def delta_rs_at(uri: str, t, version: int | None = None) -> dict[tuple, int]:
    """The collection at ``t`` (a tuple of coordinates) read by delta-rs, summed in Python."""
    table = delta_rs_updates(uri, version)
    tcols = _time_columns(table.column_names)
    data = [c for c in table.column_names if c not in _META and c not in tcols]
    rows = table.to_pylist()
    acc: Counter = Counter()
    for r in rows:
        if all(r[c] <= x for c, x in zip(tcols, t)):
            acc[tuple(r[c] for c in data)] += r["diff"]
    return {k: v for k, v in acc.items() if v}


def polars_at(uri: str, t) -> dict[tuple, int]:
    """The collection at ``t`` computed by polars over ``read_delta`` (its own Parquet reader)."""
    import polars as pl
    df = pl.read_delta(uri, storage_options=storage_options(uri))
    tcols = _time_columns(df.columns)
    data = [c for c in df.columns if c not in _META and c not in tcols]
    cond = pl.lit(True)
    for c, x in zip(tcols, t):
        cond = cond & (pl.col(c) <= x)
    out = (df.filter(cond).group_by(data).agg(pl.col("diff").sum().alias("n")).filter(pl.col("n") != 0))
    return {tuple(r[:-1]): r[-1] for r in out.iter_rows()}


def delta_files(uri: str, version: int | None = None) -> set[str]:
    """The file names the table's version (default: newest) holds."""
    from deltalake import DeltaTable
    dt = DeltaTable(uri, version=version, storage_options=storage_options(uri))
    return {u.rsplit("/", 1)[-1] for u in dt.file_uris()}


def delta_version(uri: str) -> int:
    from deltalake import DeltaTable
    return DeltaTable(uri, storage_options=storage_options(uri)).version()


def last_commit_info(uri: str) -> dict:
    from deltalake import DeltaTable
    return DeltaTable(uri, storage_options=storage_options(uri)).history(1)[0]


def ddcli_log_version(uri: str) -> int | None:
    """The ddcli log version the newest Delta version says it shows (its ``txn``)."""
    from deltalake import DeltaTable
    return DeltaTable(uri, storage_options=storage_options(uri)).transaction_version("ddcli")
