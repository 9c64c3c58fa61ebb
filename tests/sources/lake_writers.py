"""What the lake-source tests share: random rows of every column type, and ddcli's side
(``ddcli query --as-of T`` as a multiset)."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers.cli import ok

SCHEMA = pa.schema([("id", pa.int64()), ("grp", pa.string()), ("x", pa.float64()), ("amount", pa.decimal128(12, 2)),
                    ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("flag", pa.bool_())])


@functools.cache
def _command():
    """ddcli's command group, built once (Typer builds it again for every invocation)."""
    import typer.main

    from ddcli.cli import app
    return typer.main.get_command(app)


def ddcli(store: str, *args: str):
    """``ddcli ARGS --store STORE`` in this process."""
    from click.testing import CliRunner
    return CliRunner().invoke(_command(), list(args) + ["--store", store])


def rows(rng: random.Random, n: int, ids=None) -> pa.Table:
    """``n`` random rows of every column type, nulls included (ids drawn from 0..39)."""
    def maybe(v):
        return None if rng.random() < 0.15 else v
    ids = ids if ids is not None else [rng.randrange(40) for _ in range(n)]
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({
        "id": ids,
        "grp": [maybe(rng.choice(["a", "b", "é", ""])) for _ in ids],
        "x": [maybe(rng.uniform(-1e6, 1e6) if rng.random() < 0.5 else rng.choice([0.1, -0.0, 1e-300])) for _ in ids],
        "amount": [maybe(decimal.Decimal(rng.randrange(-10**8, 10**8)).scaleb(-2)) for _ in ids],
        "day": [maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(2000))) for _ in ids],
        "ts": [maybe(base + dt.timedelta(microseconds=rng.randrange(10**12))) for _ in ids],
        "flag": [maybe(rng.random() < 0.5) for _ in ids],
    }, schema=SCHEMA)


def ddcli_at(store: str, trace: str, t: int, tmp) -> Counter:
    out = str(tmp / f"q{t}.parquet")
    ok(ddcli(store, "query", trace, "--as-of", str(t), "--format", "parquet", "-o", out))
    table = pq.read_table(out)
    got: Counter = Counter()
    for r in table.to_pylist():
        n = r.pop("count")
        got[tuple(r.values())] += n
    return got
