"""Keyset pages of a table sorted by one of its columns: ``ORDER BY`` the column (empty
values last either way) then a unique tie-break, each page after the last row's key.

A key is (1 when the value is empty, the value as text, the tie-break): what a cursor holds
(``monitor.listing.sorting``), read back to the column's type to compare in SQL.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from monitor.core.errors import BadParameter

__all__ = ["after", "key", "order"]


def order(column: Any, tie: Any, descending: bool) -> list[Any]:
    """The ORDER BY of the sort: empty values last, then the value, then the tie-break up.
    A column that is never empty, or is the tie-break, is read in the order of its index."""
    value = column.desc() if descending else column
    if column is tie:
        return [value]
    return [column.is_(None), value, tie] if column.nullable else [value, tie]


def key(value: Any, tie: Any) -> tuple[int, str, Any]:
    """A row's key, its value as text (a time in ISO 8601, to the microsecond)."""
    if value is None:
        return (1, "", tie)
    return (0, value.isoformat() if isinstance(value, datetime) else str(value), tie)


def after(column: Any, tie: Any, descending: bool, last: tuple[Any, ...]) -> Any:
    """The rows after the key ``last`` in the sort, as SQL."""
    empty, text, tied = last
    if empty:
        return column.is_(None) & (tie > tied)
    value = _typed(column, text)
    beyond = column < value if descending else column > value
    if column is tie:
        return beyond
    if not column.nullable:
        return beyond | ((column == value) & (tie > tied))
    return column.is_(None) | beyond | ((column == value) & (tie > tied))


def _typed(column: Any, text: str) -> Any:
    """A key's value as the column holds it."""
    kind = column.type.python_type
    try:
        if kind is datetime:
            return datetime.fromisoformat(text)
        return kind(text)
    except ValueError:
        raise BadParameter(f"cursor: not a cursor of this listing: {text[:40]!r}") from None
