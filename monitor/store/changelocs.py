"""The locs a target's change rows are about, once each (``schema.change_locs``): what a
search of the changes by a part of the loc reads first.

Kept in the transactions that write change rows: a check's at the end of its snapshot (one
statement over the snapshot's rows, by the ``(target_id, snapshot_id)`` index), the URL
checks' with their health transitions; retention deletes a loc once its last change row is
gone. A pack's members are not here: the listings search them through their entry sets.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, and_, exists, func, select, text
from sqlalchemy.dialects import postgresql, sqlite

from monitor.store.schema import change_locs, changes

__all__ = ["forget_unused", "matching", "note_locs", "note_snapshot"]


def _insert_new(conn: Connection) -> Any:
    """An INSERT that skips the locs already held (both databases say it their own way)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(change_locs).on_conflict_do_nothing()


# PostgreSQL: the writers of change rows hold this lock of their target shared until they
# commit, and retention's forgetting alone, so that it never deletes a loc whose new row a
# writer has not committed yet (the writer found the loc held and wrote nothing). Retention
# takes it in a transaction that holds nothing else: no writer waits for it while holding the
# lock. SQLite writes one transaction at a time.
_LOCKS = 0x534D_434C  # "SMCL": the locks' own space, beside the migrations' one


def _lock(conn: Connection, target_id: int, *, shared: bool) -> None:
    if conn.dialect.name == "postgresql":
        call = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        conn.execute(text(f"SELECT {call}(:space, :target)"),
                     {"space": _LOCKS, "target": target_id % 2**31})


def note_snapshot(conn: Connection, target_id: int, snapshot_id: int) -> None:
    """Hold the locs of the change rows the snapshot's check wrote (in its transaction)."""
    _lock(conn, target_id, shared=True)
    c = changes.c
    # In the order of the index they go to: 10-20% faster than as they come (500,000 locs).
    rows = (select(c.target_id, c.loc)
            .where(c.target_id == target_id, c.snapshot_id == snapshot_id,
                   c.members.is_(None))
            .distinct().order_by(c.loc))
    conn.execute(_insert_new(conn).from_select(["target_id", "loc"], rows))


def note_locs(conn: Connection, target_id: int, locs: Collection[str]) -> None:
    """Hold these locs, whose change rows this transaction writes."""
    if locs:
        _lock(conn, target_id, shared=True)
        conn.execute(_insert_new(conn), [{"target_id": target_id, "loc": loc}
                                         for loc in sorted(set(locs))])


def forget_unused(conn: Connection, target_id: int, locs: Collection[str]) -> None:
    """Let go of those of ``locs`` that no change row of the target is about any more (after
    retention deleted some)."""
    if not locs:
        return
    _lock(conn, target_id, shared=False)
    held, c = change_locs.c, changes.c
    conn.execute(change_locs.delete().where(
        held.target_id == target_id, held.loc.in_(sorted(set(locs))),
        ~exists().where(and_(c.target_id == target_id, c.loc == held.loc))))


def matching(conn: Connection, target_id: int, q: str, limit: int) -> list[str]:
    """Up to ``limit`` of the target's change locs that hold ``q`` (lower case), in no
    particular order."""
    held = change_locs.c
    # SQLite's LIKE is blind to the case of ASCII letters already (its lower() knows no
    # other): without lower() it reads the index's locs as they are, in half the time.
    loc = held.loc if conn.dialect.name == "sqlite" else func.lower(held.loc)
    return list(conn.execute(
        select(held.loc).where(held.target_id == target_id,
                               loc.contains(q, autoescape=True))
        .limit(limit)).scalars())
