"""Sorting a listing by one of its columns (pure): ``sort=COLUMN``, ``sort=-COLUMN`` for the
other way, across the whole listing and page after page.

Each listing offers the columns it can sort without reading all of its rows for each page
(``SORTS``):

- the changes and the snapshots, by their indexes: the changes by time, or grouped by kind,
  reason or rule (newest first in each group);
- the URLs in a health state, by SQL (``ORDER BY`` the column, a page at a time);
- the URLs and the issues of a snapshot, which live in the stored documents, by reading every
  document once a page and keeping the page's rows (``best``): the cost of a search that finds
  nothing, in the memory of one page;
- the diff, by loc (the order it composes in) or by kind (a pass per kind).

A row's place in a sort is its ``Key``: whether its value is empty (empty values come last
either way), the value, then a tie-break that is unique in the listing (its document and
position, its id): a cursor holds the last key listed, and the next page lists the keys that
``follows`` it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from monitor.core.errors import BadParameter

__all__ = ["SORTS", "Key", "Sort", "best", "follows", "key", "offered", "ordered", "parse"]

# The columns each listing sorts by; ``urls`` is the URL set, ``health`` the URLs in a health
# state (``urls?status=not-found``), ``targets`` the index of targets.
SORTS: dict[str, tuple[str, ...]] = {
    "changes": ("at", "kind", "reason", "rule"),
    "urls": ("loc", "status", "lastmod", "document"),
    "health": ("loc", "http_status", "since", "checked_at"),
    "issues": ("rule", "severity", "loc", "document"),
    "diff": ("kind", "loc"),
    "snapshots": ("id", "finished_at", "outcome", "urls", "added", "removed", "changed"),
    "targets": ("name", "state", "urls", "last_check", "changes", "issues"),
}

# (1 when the value is empty, the value, the tie-break...)
Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Sort:
    """A column and a direction; ``text`` as a query gives it (``-loc``)."""

    column: str
    descending: bool = False

    @property
    def text(self) -> str:
        return f"-{self.column}" if self.descending else self.column


def parse(raw: str | None, listing: str, param: str = "sort") -> Sort | None:
    """``COLUMN`` or ``-COLUMN`` of the listing's sortable columns; None when not given."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    column = text.removeprefix("-")
    if column not in SORTS[listing]:
        raise BadParameter(f"{param}: {text[:40]!r} is not one of "
                           f"{', '.join(SORTS[listing])} (or -COLUMN for the other way)")
    return Sort(column, text.startswith("-"))


def offered(sort: Sort | None, listing: str) -> Sort | None:
    """The sort, if the listing offers its column; a 400 (``BadParameter``) if not."""
    if sort is not None and sort.column not in SORTS[listing]:
        raise BadParameter(f"sort: {sort.text!r} is not one of {', '.join(SORTS[listing])} "
                           "(or -COLUMN for the other way)")
    return sort


def key(value: Any, *tie: Any) -> Key:
    """A row's key: empty values (None, "") after every other."""
    empty = value is None or value == ""
    return (1 if empty else 0, "" if empty else value, *tie)


def follows(found: Key, last: Key, descending: bool) -> bool:
    """Whether the row of key ``found`` comes after the one of ``last`` in the sort."""
    if found[0] != last[0]:
        return bool(found[0] > last[0])
    if found[0] == 0 and found[1] != last[1]:
        return bool(found[1] < last[1]) if descending else bool(found[1] > last[1])
    return found[2:] > last[2:]


def best(found: Iterable[tuple[Key, Any]], count: int, descending: bool,
         ) -> list[tuple[Key, Any]]:
    """The first ``count`` of (key, row) pairs in the sort, in order: a bounded heap, so the
    memory is a page's whatever the rows read. The tie-breaks are ints."""
    if descending:
        return heapq.nlargest(count, found, key=_descending)
    return heapq.nsmallest(count, found, key=_ascending)


def _ascending(pair: tuple[Key, Any]) -> Key:
    return pair[0]


def _descending(pair: tuple[Key, Any]) -> Key:
    """The key whose largest comes first: empty last, the value down, the tie-break up."""
    found = pair[0]
    return (-found[0], found[1], *(-tie for tie in found[2:]))


def ordered(rows: Iterable[dict[str, Any]], sort: Sort, tie: str) -> list[dict[str, Any]]:
    """Rows held whole (the targets of the index) in the sort, ties by ``tie`` up, each with
    its key for a cursor in ``row['_key']``."""
    found = [dict(row, _key=key(row.get(sort.column), row[tie])) for row in rows]
    present = sorted((row for row in found if not row["_key"][0]), key=_tie)
    present.sort(key=lambda row: row["_key"][1], reverse=sort.descending)  # stable: ties stay
    return present + sorted((row for row in found if row["_key"][0]), key=_tie)


def _tie(row: dict[str, Any]) -> Key:
    return tuple(row["_key"][2:])
