"""Columns in scope while a query is planned: each SQL column (its table alias and name)
and the column of the collection that holds it.

Collections name their columns once, so a join of two relations that share a column name
renames the right side's copy (``alias__name``); SQL keeps addressing it by alias and name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from ops.dataflow.builder import Collection
from ops.errors import PipelineError


@dataclass(frozen=True)
class Col:
    """One SQL column: ``table`` (its alias, lower case, or None) and ``name``, held in the
    collection's column ``internal``."""
    table: str | None
    name: str
    internal: str
    merged: bool = False  # a JOIN ... USING column: the unqualified name means it (coalesced in a FULL join)


@dataclass
class Rel:
    """A planned relation: a collection and its SQL columns, in order. The collection may
    hold more columns than the SQL ones (join keys, order keys): ``coll_columns`` lists
    them all when it does."""
    coll: Collection
    cols: list[Col]
    coll_columns: list[str] | None = None

    def internals(self) -> list[str]:
        return [c.internal for c in self.cols]

    def present(self) -> list[str]:
        """Every column of the collection, in order."""
        return list(self.coll_columns) if self.coll_columns is not None else list(dict.fromkeys(self.internals()))

    def requalified(self, alias: str | None) -> "Rel":
        """The same relation addressed as ``alias`` (a derived table, a view, a CTE)."""
        return Rel(self.coll, [Col(alias, c.name, c.internal) for c in self.cols if not c.merged], self.coll_columns)


class Correlated(Exception):
    """A column found only in an enclosing query's scope (a correlated subquery)."""

    def __init__(self, column: exp.Column):
        super().__init__(column.sql())
        self.column = column


@dataclass
class Scope:
    """The columns a query's expressions may name, and the enclosing queries' scopes."""
    cols: list[Col]
    outer: "Scope | None" = None
    where: object = field(default=None, repr=False)  # a Located, for error lines
    reach_out: bool = False  # an enclosing scope's columns are columns here too (a decorrelated join)

    def find(self, column: exp.Column) -> Col | None:
        """The column ``column`` names here (None if it names none); ambiguity is an error."""
        name, table = column.name.lower(), (column.table or "").lower() or None
        hits = [c for c in self.cols if c.name.lower() == name and (table is None or c.table == table)]
        if table is None and any(c.merged for c in hits):
            hits = [c for c in hits if c.merged]
        if len({c.internal for c in hits}) > 1:
            raise PipelineError(self.where.at(column, f"column {column.sql()!r} is ambiguous: qualify it "
                                                      f"({', '.join(sorted({f'{c.table}.{c.name}' for c in hits}))})"))
        return hits[0] if hits else None

    def resolve(self, column: exp.Column) -> Col:
        """The column ``column`` names; one found only outside raises :class:`Correlated`."""
        hit = self.find(column)
        if hit is not None:
            return hit
        s = self.outer
        while s is not None:
            found = s.find(column)
            if found is not None:
                if self.reach_out:
                    return found
                raise Correlated(column)
            s = s.outer
        raise PipelineError(self.where.at(column, f"no column {column.sql()!r} here"))

    def holds(self, e: exp.Expression) -> bool:
        """Whether ``e`` names columns, all of them columns here."""
        cols = list(e.find_all(exp.Column))
        return bool(cols) and all(self.find(c) is not None for c in cols)



def fresh_name(taken, base: str) -> str:
    """``base``, or ``base_2``, ``base_3``... : a column name not in ``taken``."""
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name
