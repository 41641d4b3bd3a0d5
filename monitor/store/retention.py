"""Pruning a target's history (SPEC 13): the snapshots retention no longer keeps, and what only
they needed, deleted in small transactions.

Kept: every snapshot younger than the retention's age or among the target's last ``keep_last``,
and every snapshot after the last one its URL states have followed (monitor.store.health reads
the ``added`` and ``removed`` changes of those). A target's snapshots are ids in the order of
their checks, so what goes is every snapshot below a boundary B, the oldest kept one.

With each snapshot go its changes, its documents' fingerprints and the counts of the target;
an alert it raised stays in the outbox, no longer pointing at it. An entry-set version goes
once no kept snapshot has it current: one removed at B or before (every kept snapshot is B or
later, and one removed after B was current at B). Unless it is still read: as the base of a
kept delta (monitor.entrydelta), or as the version a kept pack's states before are in
(``changes.before_set_id``: the version its check replaced, which may have been current only
before B). So the URL set, the issues and the changes of every kept snapshot read as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, select, update

from monitor.store.schema import (
    changes,
    documents,
    entry_sets,
    notifications,
    snapshots,
    targets,
    url_checks,
)
from monitor.store.sql import transaction

__all__ = ["Pruned", "boundary", "database_bytes", "prune_target", "target_ids"]

# A transaction's work, each one short (a check waits for SQLite's write lock meanwhile): change
# rows, then snapshots with their documents, then entry-set versions.
CHANGE_BATCH = 5000
BATCH = 50


@dataclass(slots=True)
class Pruned:
    """What a prune deleted (or, dry, would delete) of one target's history."""

    snapshots: int = 0
    changes: int = 0  # changes, a pack counted as its members
    documents: int = 0
    entry_sets: int = 0
    boundary: int | None = None  # the oldest snapshot kept; None: none to delete


def database_bytes(engine: Engine) -> int:
    """The database's size (``sitemap_monitor_database_bytes``): SQLite's file, pages freed by
    a prune included (they are reused); PostgreSQL's ``pg_database_size``."""
    def size(conn: Connection) -> int:
        if conn.dialect.name == "postgresql":
            return int(conn.exec_driver_sql("SELECT pg_database_size(current_database())")
                       .scalar() or 0)
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar() or 0
        return int(pages) * int(conn.exec_driver_sql("PRAGMA page_size").scalar() or 0)

    return transaction(engine, size)


def target_ids(engine: Engine) -> list[tuple[str, int]]:
    """Every target in the database, configured or not: (name, id), by name."""
    t = targets.c
    return [(row.name, row.id) for row in transaction(engine, lambda conn: conn.execute(
        select(t.name, t.id).order_by(t.name)).all())]


def boundary(conn: Connection, target_id: int, *, max_age: float, keep_last: int,
             now: datetime) -> int | None:
    """The oldest snapshot of the target that retention keeps, when older ones exist."""
    s = snapshots.c
    last = conn.execute(select(s.id).where(s.target_id == target_id).order_by(s.id.desc())
                        .offset(keep_last - 1).limit(1)).scalar()
    if last is None:  # keep_last or fewer snapshots: all kept
        return None
    young = conn.execute(select(func.min(s.id)).where(
        s.target_id == target_id, s.started_at >= now - timedelta(seconds=max_age))).scalar()
    keep = last if young is None else min(last, young)
    synced = conn.execute(select(url_checks.c.synced_snapshot_id).where(
        url_checks.c.target_id == target_id)).scalar()
    if synced is not None:  # the URL states have not yet followed what comes after
        after = conn.execute(select(func.min(s.id)).where(
            s.target_id == target_id, s.id > synced)).scalar()
        if after is not None:
            keep = min(keep, after)
    older = conn.execute(select(func.count()).where(
        s.target_id == target_id, s.id < keep)).scalar()
    return keep if older else None


def _unneeded_sets(target_id: int, keep: int) -> Any:
    """The entry-set versions of the target that no snapshot from ``keep`` on reads."""
    v, c = entry_sets.c, changes.c
    kept = entry_sets.alias("kept")
    return select(v.id).where(
        v.target_id == target_id, v.removed_snapshot_id.is_not(None),
        v.removed_snapshot_id <= keep,
        v.id.not_in(select(kept.c.base_id).where(
            kept.c.target_id == target_id, kept.c.base_id.is_not(None),
            kept.c.removed_snapshot_id.is_(None) | (kept.c.removed_snapshot_id > keep))),
        v.id.not_in(select(c.before_set_id).where(
            c.target_id == target_id, c.before_set_id.is_not(None), c.snapshot_id >= keep)),
    )


def prune_target(engine: Engine, target_id: int, *, max_age: float, keep_last: int,
                 now: datetime, dry_run: bool = False) -> Pruned:
    """Delete the target's history that retention no longer keeps, ``BATCH`` snapshots (then
    ``BATCH`` entry-set versions) a transaction, their change rows first, ``CHANGE_BATCH`` a
    transaction; with ``dry_run``, count it only."""
    keep = transaction(engine, lambda conn: boundary(
        conn, target_id, max_age=max_age, keep_last=keep_last, now=now))
    found = Pruned(boundary=keep)
    if keep is None:
        return found
    s, c, d, v = snapshots.c, changes.c, documents.c, entry_sets.c
    if dry_run:
        def tally(conn: Connection) -> None:
            older = (s.target_id == target_id) & (s.id < keep)
            found.snapshots = conn.execute(select(func.count()).where(older)).scalar() or 0
            found.changes = conn.execute(
                select(func.coalesce(func.sum(func.coalesce(c.members, 1)), 0))
                .where(c.target_id == target_id, c.snapshot_id < keep)).scalar() or 0
            found.documents = conn.execute(select(func.count()).select_from(documents).where(
                d.snapshot_id.in_(select(s.id).where(older)))).scalar() or 0
            found.entry_sets = conn.execute(select(func.count()).select_from(
                _unneeded_sets(target_id, keep).subquery())).scalar() or 0

        transaction(engine, tally)
        return found

    def change_batch(conn: Connection) -> tuple[int, int]:
        """(rows, changes) deleted: counted once the transaction is in."""
        ids = list(conn.execute(select(c.id).where(c.target_id == target_id,
                                                   c.snapshot_id < keep)
                                .order_by(c.id).limit(CHANGE_BATCH)).scalars())
        if not ids:
            return 0, 0
        # What this transaction itself deleted, so that two replicas pruning at once do not
        # both take the same rows off the counts.
        members = conn.execute(delete(changes).where(c.id.in_(ids)).returning(c.members)).all()
        count = sum(1 if m is None else m for (m,) in members)
        conn.execute(update(targets).where(targets.c.id == target_id).values(
            change_count=targets.c.change_count - count))
        return len(ids), count

    while True:
        rows, count = transaction(engine, change_batch)
        found.changes += count
        if rows < CHANGE_BATCH:
            break

    def snapshot_batch(conn: Connection) -> tuple[int, int]:
        """(snapshots, documents) deleted."""
        ids = list(conn.execute(select(s.id).where(s.target_id == target_id, s.id < keep)
                                .order_by(s.id).limit(BATCH)).scalars())
        if not ids:
            return 0, 0
        docs = conn.execute(delete(documents).where(d.snapshot_id.in_(ids))).rowcount
        conn.execute(update(notifications).where(notifications.c.snapshot_id.in_(ids))
                     .values(snapshot_id=None))
        gone = conn.execute(delete(snapshots).where(s.id.in_(ids))).rowcount
        conn.execute(update(targets).where(targets.c.id == target_id).values(
            snapshot_count=targets.c.snapshot_count - gone))
        return gone, docs

    while True:
        gone, docs = transaction(engine, snapshot_batch)
        found.snapshots, found.documents = found.snapshots + gone, found.documents + docs
        if gone < BATCH:
            break

    def set_batch(conn: Connection) -> int:
        ids = list(conn.execute(_unneeded_sets(target_id, keep).order_by(v.id).limit(BATCH))
                   .scalars())
        if ids:
            conn.execute(delete(entry_sets).where(v.id.in_(ids)))
        return len(ids)

    while True:
        gone = transaction(engine, set_batch)
        found.entry_sets += gone
        if gone < BATCH:
            break
    return found
