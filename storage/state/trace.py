"""A trace's metadata: schema, key, time dimension, frontiers, layers and reader holds.

Traces are plain values: every change builds a new ``Trace`` and the store commits it
through the log. ``layers`` are the sealed batches in sequence order (their times are not
beyond ``upper``); ``pending`` holds updates ingested beyond ``upper`` (possible when
``d >= 2`` and no ``--upper`` was given) until a later seal moves them into a layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import pyarrow as pa

from storage.errors import StoreError
from storage.lattice import Frontier
from storage.layer import Layer
from storage.state import ingested

# \A…\Z, not ^…$: "$" also matches before a trailing newline ("w\n" is not a name)
NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAME_LENGTH = 64  # a name is a folder name and a SQL identifier: short and plain
RESERVED_COLUMNS = {"diff", "count", "time"}


def check_name(name: str, what: str = "trace") -> str:
    if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
        raise StoreError(f"bad {what} name {name[:20]!r}...: {len(name)} characters, "
                         f"at most {MAX_NAME_LENGTH} are allowed")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise StoreError(f"bad {what} name {name!r}: use letters, digits and _, not starting with a digit")
    return name


def check_new_name(name: str, existing, what: str = "trace") -> str:
    """A name for a new trace: valid, and not another trace's name in other letter case
    (``W`` and ``w`` are one name to SQL, whose identifiers ignore case)."""
    check_name(name, what)
    for other in existing:
        if other != name and other.lower() == name.lower():
            raise StoreError(f"{what} name {name!r} clashes with the existing trace {other!r}: "
                             f"trace names must differ in more than letter case")
    return name


def count_column(trace: "Trace") -> str:
    """The name of the multiplicity column of a collection: ``count``, or ``multiplicity``
    when the trace has a data column named ``count`` (e.g. a word count's output)."""
    return "multiplicity" if "count" in trace.data_columns else "count"


def type_to_str(t: pa.DataType) -> str:
    return str(t)


_TS_RE = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=(.+))?\]$")
_DEC_RE = re.compile(r"^decimal(32|64|128|256)\((\d+), (-?\d+)\)$")
_FSB_RE = re.compile(r"^fixed_size_binary\[(\d+)\]$")


def type_from_str(s: str) -> pa.DataType:
    """Inverse of :func:`type_to_str` for the column types a trace can hold."""
    aliases = {"string": pa.string(), "large_string": pa.large_string(), "bool": pa.bool_()}
    if s in aliases:
        return aliases[s]
    if m := _TS_RE.match(s):
        return pa.timestamp(m.group(1), tz=m.group(2))
    if m := _DEC_RE.match(s):
        bits, p, sc = m.group(1), int(m.group(2)), int(m.group(3))
        return getattr(pa, f"decimal{bits}")(p, sc)
    if m := _FSB_RE.match(s):
        return pa.binary(int(m.group(1)))
    try:
        return pa.type_for_alias(s)
    except (ValueError, KeyError):
        raise StoreError(f"column type {s!r} in the store's metadata is not one ddcli can read") from None


@dataclass(frozen=True)
class Hold:
    """A reader's claim on a trace: compaction stays at or behind ``since`` and layers are
    never merged across sequence number ``seq`` (the point the reader consumed).

    For a named reader (storage/state/readers.py): ``position`` is the upper it last
    acknowledged, and ``start`` the trace's since when it was created, until it
    acknowledges for the first time. Both None for a pipeline's hold."""

    since: Frontier
    seq: int
    position: Frontier | None = None
    start: Frontier | None = None

    def to_json(self) -> dict:
        v = {"since": self.since.to_json(), "seq": self.seq}
        for key in ("position", "start"):
            if getattr(self, key) is not None:
                v[key] = getattr(self, key).to_json()
        return v

    @classmethod
    def from_json(cls, v: dict, d: int) -> "Hold":
        position, start = (Frontier.from_json(v[k], d) if k in v else None for k in ("position", "start"))
        return cls(Frontier.from_json(v["since"], d), v["seq"], position, start)


@dataclass
class Trace:
    name: str
    schema: pa.Schema
    key: list[str]
    d: int
    since: Frontier
    upper: Frontier
    layers: list[Layer] = field(default_factory=list)
    pending: list[Layer] = field(default_factory=list)
    next_seq: int = 0
    holds: dict[str, Hold] = field(default_factory=dict)
    ingested: dict[str, int] = field(default_factory=dict)  # storage/state/ingested.py: bounded
    owner: str | None = None  # the pipeline that writes this trace, if any
    sources: dict[str, dict] = field(default_factory=dict)  # lake table -> how far it was taken (storage/sources/)

    @property
    def data_columns(self) -> list[str]:
        return list(self.schema.names)

    def effective_since(self) -> Frontier:
        """Where compaction may advance times: the requested since met with every hold."""
        f = self.since
        for h in self.holds.values():
            f = f.meet(h.since)
        return f

    def all_layers(self) -> list[Layer]:
        return list(self.layers) + list(self.pending)

    def rows(self) -> int:
        return sum(l.rows for l in self.all_layers())

    def bytes(self) -> int:
        return sum(l.bytes for l in self.all_layers())

    def with_(self, **changes) -> "Trace":
        return replace(self, **changes)

    def to_json(self) -> dict:
        return {
            "schema": [[f.name, type_to_str(f.type)] for f in self.schema],
            "key": self.key, "d": self.d,
            "since": self.since.to_json(), "upper": self.upper.to_json(),
            "layers": [l.to_json() for l in self.layers],
            "pending": [l.to_json() for l in self.pending],
            "next_seq": self.next_seq,
            "holds": {h: v.to_json() for h, v in self.holds.items()},
            "ingested": dict(self.ingested), "owner": self.owner,
            **({"sources": {k: dict(v) for k, v in self.sources.items()}} if self.sources else {}),
        }

    @classmethod
    def from_json(cls, name: str, v: dict) -> "Trace":
        d = v["d"]
        return cls(
            name=name,
            schema=pa.schema([pa.field(n, type_from_str(t)) for n, t in v["schema"]]),
            key=list(v["key"]), d=d,
            since=Frontier.from_json(v["since"], d), upper=Frontier.from_json(v["upper"], d),
            layers=[Layer.from_json(l, d) for l in v["layers"]],
            pending=[Layer.from_json(l, d) for l in v.get("pending", [])],
            next_seq=v["next_seq"],
            holds={h: Hold.from_json(x, d) for h, x in v.get("holds", {}).items()},
            ingested=ingested.from_json(v.get("ingested")), owner=v.get("owner"),
            sources={str(k): dict(x) for k, x in v.get("sources", {}).items()},
        )
