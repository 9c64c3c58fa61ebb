"""Per-key totals of a large stored layer, kept beside it, for invertible reduces.

An invertible reduce (``ops/reduce/summaries/abelian.py``) needs, per touched key, the totals
of its old updates: their multiplicity, and per value column the multiplicity of its
non-null rows, its weighted sum (integers and decimals) and one of its values. Summed
from the rows, a refresh costs the keys' history: a key of millions of rows (TPC-H's Q1
groups its 6 million lineitems in four keys) is read whole at every refresh. A layer is
immutable, so its per-key totals are too: they are computed once, the first time a
refresh needs them, and kept beside the layer (``LAYER.parquet.totals-H-D``, ``H`` naming
the key and value columns they were summed for, ``D`` their bytes' digest), so a later
refresh reads a row per key and layer. Layers below :data:`MIN_ROWS` are summed as they are read, as cheap as reading
their totals. Garbage collection keeps a layer's totals exactly as long as the layer
(``storage/writes/gc.py``).
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from storage.layer import SUMMARISED_ROWS as MIN_ROWS
from storage.layer import SUMMARY_SUFFIX, kept_summary
from storage.sql.duck import file_list, quote
_I = "_ddcli_"
N, T = _I + "n", _I + "t"  # the multiplicity and the latest time of a key's updates

_rows: dict[str, int] = {}  # a layer's rows (layers are immutable: kept while the process lives)


def count_of(c: str) -> str:
    return f"n:{c}"


def sum_of(c: str) -> str:
    return f"s:{c}"


def one_of(c: str) -> str:
    return f"r:{c}"


def wide_type(duck_type: str) -> str | None:
    """The exact type a column's weighted sum is kept in (None: no sum of it is kept)."""
    if duck_type.startswith("DECIMAL"):
        return f"DECIMAL(38, {duck_type.split(',')[1].strip(' )')})"
    if duck_type in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER",
                     "UBIGINT"):
        return "HUGEINT"
    return None


def totals_sql(source: str, key: list[str], types: dict[str, str], time_col: str) -> str:
    """SQL of the per-key totals of the updates ``source`` selects (``types``: each value
    column's DuckDB type)."""
    k = ", ".join(quote(c) for c in key)
    parts = [f"SUM(diff)::BIGINT AS {quote(N)}", f"max({quote(time_col)})::BIGINT AS {quote(T)}"]
    for c, t in types.items():
        parts.append(f"SUM(CASE WHEN {quote(c)} IS NULL THEN 0 ELSE diff END)::BIGINT AS {quote(count_of(c))}")
        parts.append(f"any_value({quote(c)}) AS {quote(one_of(c))}")
        wide = wide_type(t)
        if wide is not None:  # a decimal keeps its scale; parquet holds no HUGEINT: DECIMAL(38, 0)
            kept = "DECIMAL(38, 0)" if wide == "HUGEINT" else wide
            parts.append(f"SUM({quote(c)}::{wide} * diff)::{kept} AS {quote(sum_of(c))}")
    return (f"SELECT {k + ', ' if k else ''}{', '.join(parts)} FROM ({source}) "
            f"GROUP BY {k or '()'} HAVING count(*) > 0")


def sources(con, files: list[str], keys: pa.Table, key: list[str], types: dict[str, str],
            time_col: str) -> str:
    """SQL of the per-key totals of ``files``' updates of the touched keys (``touched_keys``
    of ``con``), one row per key and source: large layers' kept totals (made here when
    missing), the small layers summed as they are read."""
    from ops.operators.keyed_reads import keyed_source
    tag = hashlib.sha1(json.dumps([key, sorted(types.items()), time_col]).encode()).hexdigest()[:12]
    small, kept = [], []
    for f in files:
        if _layer_rows(f) < MIN_ROWS:
            small.append(f)
        else:
            kept.append(_kept_totals(con, f, f"{f}{SUMMARY_SUFFIX}{tag}", key, types, time_col))
    parts = []
    if small:
        parts.append(totals_sql(keyed_source(con, small, keys, key), key, types, time_col))
    if kept:
        parts.append(keyed_source(con, kept, keys, key))
    return " UNION ALL BY NAME ".join(f"({p})" for p in parts)


def _layer_rows(path: str) -> int:
    if path not in _rows:
        from storage.blobs.resolve import read_metadata
        _rows[path] = read_metadata(path).num_rows
    return _rows[path]


def _kept_totals(con, layer: str, stem: str, key: list[str], types: dict[str, str], time_col: str) -> str:
    """The layer's totals kept beside it (storage/layer.py), summed now unless intact ones are there."""
    return kept_summary(stem, lambda: con.sql(
        totals_sql(f"SELECT * FROM read_parquet({file_list([layer])})", key, types, time_col)
        + (f" ORDER BY {', '.join(quote(c) for c in key)}" if key else "")).to_arrow_table())
