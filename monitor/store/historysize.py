"""How many bytes of the database a target's history takes, counted without reading it.

A target's history is its snapshots and what hangs from them (the documents' fingerprints,
the change rows, the robots.txt versions) plus its entry-set versions. Each row counts the
stored length of its variable-length values (text, JSON, compressed blobs) and ``ROW`` bytes
for its header, its fixed columns and its entries in the indexes; a plain change row counts
its loc four times (the row, the loc index, and the row and key of the table of locs a
search reads) and ``ROW`` three times (its entries in the other indexes).

A snapshot's count, ``snapshots.history_bytes``, is written in its own transaction (and
grows when the URL checks add a change row to it later), so that retention sums a target's
history from its snapshot rows and the lengths of its entry-set versions, never from its
change rows. Measured against the file's or the relations' growth, the count is within
about a fifth of SQLite's pages and under PostgreSQL's (whose rows and index entries carry
more overhead): the budget is a budget of this count (tests/benchmarks/history_bytes.py).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, case, func, select, update

from monitor.store.schema import changes, entry_sets, robots_files, snapshots

__all__ = ["ROW", "add", "change_bytes", "change_row_bytes", "row_bytes", "set_sizes"]

ROW = 48  # a row's header, fixed-size columns and index entries, about


def row_bytes(*values: str | bytes | None) -> int:
    """A row's count: ``ROW`` and the lengths of its variable-length values."""
    return ROW + sum(len(value) for value in values if value is not None)


def change_row_bytes(loc: str, before: str | None, after: str | None) -> int:
    """A plain change row's count (``PLAIN``)."""
    return 2 * ROW + row_bytes(loc, loc, loc, loc, before, after)


def _length(column: Any) -> Any:
    return func.coalesce(func.length(column), 0)


def change_bytes(conn: Connection, snapshot_id: int) -> int:
    """The count of a snapshot's change rows and robots.txt versions (by their snapshot
    indexes: the rows this snapshot's transaction wrote)."""
    c, r = changes.c, robots_files.c
    loc = _length(c.loc)
    found = conn.execute(select(func.count(), func.coalesce(func.sum(
        loc + case((c.members.is_(None), 3 * loc + 2 * ROW), else_=0)
        + _length(c.before) + _length(c.after) + _length(c.pack)), 0),
    ).where(c.snapshot_id == snapshot_id)).one()
    robots = conn.execute(select(func.count(), func.coalesce(
        func.sum(_length(r.text) + _length(r.url)), 0)).where(
        r.snapshot_id == snapshot_id)).one()
    return int(found[0] * ROW + found[1] + robots[0] * ROW + robots[1])


def add(conn: Connection, snapshot_id: int, size: int) -> None:
    """Add to a snapshot's count (rows written about it after its transaction)."""
    if size:
        conn.execute(update(snapshots).where(snapshots.c.id == snapshot_id).values(
            history_bytes=snapshots.c.history_bytes + size))


def set_sizes(conn: Connection, target_id: int,
              ) -> list[tuple[int, int | None, int]]:
    """(first snapshot, removed snapshot or None, count) of each of the target's entry-set
    versions: their stored lengths, not their values."""
    v = entry_sets.c
    return [(int(first), None if removed is None else int(removed), int(size))
            for first, removed, size in conn.execute(select(
                v.first_snapshot_id, v.removed_snapshot_id,
                ROW + _length(v.data) + _length(v.document_url)).where(
                v.target_id == target_id))]
