"""Pruning a target's history: the snapshots retention no longer keeps, and what only
they needed, deleted in small transactions.

Kept: every snapshot younger than the retention's age or among the target's last ``keep_last``,
less the oldest of those while the target's history counts more than ``max_bytes``
(monitor.store.historysize; never the last two), and every snapshot after the last one its URL
states have followed (monitor.store.urlstates reads the ``added`` and ``removed`` changes of
those). A target's snapshots are ids in the order of their checks, so what goes is every
snapshot below a boundary B, the oldest kept one.

With each snapshot go its changes, its documents' fingerprints and the counts of the target;
an alert it raised stays in the outbox, no longer pointing at it. A robots.txt version goes once
a newer one of its URL was found at B or before (only the version in force is read, and the
changes of ``robots-changed`` hold both texts). An entry-set version goes
once no kept snapshot has it current: one removed at B or before (every kept snapshot is B or
later, and one removed after B was current at B). Unless it is still read: as the base of a
kept delta (monitor.codec.entrydelta), or as the version a kept pack's states before are in
(``changes.before_set_id``: the version its check replaced, which may have been current only
before B), or as the version a kept pack points into (``changes.entry_set_id``: a pack of
removals at B points into the version B replaced, monitor.store.movepacks). So the URL set,
the issues and the changes of every kept snapshot read as before.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    Table,
    delete,
    exists,
    func,
    select,
    update,
)

from monitor.core.errors import StoreError
from monitor.store import changelocs, historysize
from monitor.store.retry import transaction
from monitor.store.schema import (
    change_locs,
    changes,
    documents,
    entry_sets,
    notifications,
    robots_files,
    snapshots,
    targets,
    url_checks,
)

__all__ = ["NO_VACUUM", "Pruned", "boundary", "database_bytes", "give_back", "prune_target",
           "target_ids", "vacuum"]

# A transaction's work, each one short (a check waits for SQLite's write lock meanwhile): change
# rows, then snapshots with their documents, then entry-set versions.
CHANGE_BATCH = 5000
BATCH = 50
# SQLite's free pages given back to the file system a transaction (8 MiB of 4 KiB pages: tens
# of milliseconds of the write lock).
VACUUM_PAGES = 2000
VACUUM_WAIT = 5  # seconds ``db vacuum`` waits for another writer before it gives up
_INCREMENTAL = 2  # PRAGMA auto_vacuum: NONE 0, FULL 1, INCREMENTAL 2


@dataclass(slots=True)
class Pruned:
    """What a prune deleted (or, dry, would delete) of one target's history."""

    snapshots: int = 0
    changes: int = 0  # changes, a pack counted as its members
    documents: int = 0
    entry_sets: int = 0
    robots_files: int = 0  # robots.txt versions superseded before the boundary
    boundary: int | None = None  # the oldest snapshot kept; None: none to delete

    @property
    def deleted(self) -> bool:
        """Whether any row went (changes and documents go only with their snapshots)."""
        return bool(self.snapshots or self.entry_sets or self.robots_files)


# What the daemon's pruner and ``db prune`` say of a SQLite file ``give_back`` cannot shrink.
NO_VACUUM = ("the SQLite file keeps its free pages for reuse (it was made before incremental "
             "vacuum): run 'sitemap-monitor db vacuum' once, with the daemon stopped, for it to "
             "shrink")


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
             now: datetime, max_bytes: int | None = None) -> int | None:
    """The oldest snapshot of the target that retention keeps, when older ones exist."""
    s = snapshots.c
    last = conn.execute(select(s.id).where(s.target_id == target_id).order_by(s.id.desc())
                        .offset(keep_last - 1).limit(1)).scalar()
    young = conn.execute(select(func.min(s.id)).where(
        s.target_id == target_id, s.started_at >= now - timedelta(seconds=max_age))).scalar()
    if last is None:  # keep_last or fewer snapshots: all kept by the count
        keep = conn.execute(select(func.min(s.id)).where(s.target_id == target_id)).scalar()
        if keep is None:
            return None
    else:
        keep = last if young is None else min(last, young)
    if max_bytes is not None:
        keep = max(keep, _within_bytes(conn, target_id, keep, max_bytes))
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


def _within_bytes(conn: Connection, target_id: int, keep: int, max_bytes: int) -> int:
    """The oldest snapshot from ``keep`` on from which the target's history counts at most
    ``max_bytes`` (``historysize``): its snapshots' own counts, and its entry-set versions
    that a snapshot kept reads (current then, or ended by it: its removals point into them);
    the last but one when none does (the last two are always kept). Reads the target's
    snapshot rows and its versions' lengths, never its change rows."""
    s = snapshots.c
    counted = conn.execute(select(s.id, s.history_bytes).where(
        s.target_id == target_id, s.id >= keep).order_by(s.id)).all()
    if len(counted) <= 2:
        return keep
    sizes = historysize.set_sizes(conn, target_id)
    # From the newest candidate down: the snapshots' counts grow as the boundary goes back, and
    # so do the versions kept, those ended at or after it.
    ended = sorted((removed, size) for _first, removed, size in sizes if removed is not None)
    current = sum(size for _first, removed, size in sizes if removed is None)
    ids = [row[0] for row in counted]
    own = [int(row[1]) for row in counted]
    suffix, chosen = 0, int(ids[-2])
    later = len(ended)  # ended[later:] are the versions ended at or after the candidate
    for index in range(len(ids) - 1, -1, -1):
        suffix += own[index]
        while later and ended[later - 1][0] >= ids[index]:
            later -= 1
            current += ended[later][1]
        if index <= len(ids) - 2:
            if suffix + current > max_bytes:
                break
            chosen = int(ids[index])
    return chosen


def _unneeded_sets(target_id: int, keep: int) -> Any:
    """The entry-set versions of the target that no snapshot from ``keep`` on reads."""
    v, c = entry_sets.c, changes.c
    kept = entry_sets.alias("kept")
    return select(v.id).where(
        v.target_id == target_id, v.removed_snapshot_id.is_not(None),
        v.removed_snapshot_id <= keep,
        # A version ended at ``keep`` may stay too, as one the packs of ``keep`` point into
        # (its removals, the states before of its changes): its base stays with it.
        v.id.not_in(select(kept.c.base_id).where(
            kept.c.target_id == target_id, kept.c.base_id.is_not(None),
            kept.c.removed_snapshot_id.is_(None) | (kept.c.removed_snapshot_id >= keep))),
        v.id.not_in(select(c.before_set_id).where(
            c.target_id == target_id, c.before_set_id.is_not(None), c.snapshot_id >= keep)),
        v.id.not_in(select(c.entry_set_id).where(
            c.target_id == target_id, c.entry_set_id.is_not(None), c.snapshot_id >= keep)),
    )


def _superseded_robots(target_id: int, keep: int) -> Any:
    """The target's robots.txt versions that a newer one of their URL, found by ``keep`` or
    before, replaced before any kept snapshot."""
    r = robots_files.c
    newer = robots_files.alias("newer")
    return select(r.id).where(
        r.target_id == target_id,
        exists().where(newer.c.target_id == target_id, newer.c.url == r.url,
                       newer.c.id > r.id, newer.c.snapshot_id <= keep))


def prune_target(engine: Engine, target_id: int, *, max_age: float, keep_last: int,
                 now: datetime, max_bytes: int | None = None, dry_run: bool = False) -> Pruned:
    """Delete the target's history that retention no longer keeps, ``BATCH`` snapshots (then
    ``BATCH`` entry-set versions) a transaction, their change rows first, ``CHANGE_BATCH`` a
    transaction; with ``dry_run``, count it only."""
    keep = transaction(engine, lambda conn: boundary(
        conn, target_id, max_age=max_age, keep_last=keep_last, now=now, max_bytes=max_bytes))
    found = Pruned(boundary=keep)
    if keep is None:
        return found
    s, c, d = snapshots.c, changes.c, documents.c
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
            found.robots_files = conn.execute(select(func.count()).select_from(
                _superseded_robots(target_id, keep).subquery())).scalar() or 0

        transaction(engine, tally)
        return found

    def change_batch(conn: Connection) -> tuple[int, int, list[str]]:
        """(rows, changes) deleted, counted once the transaction is in, and the locs of the
        plain rows deleted."""
        ids = list(conn.execute(select(c.id).where(c.target_id == target_id,
                                                   c.snapshot_id < keep)
                                .order_by(c.id).limit(CHANGE_BATCH)).scalars())
        if not ids:
            return 0, 0, []
        # What this transaction itself deleted, so that two replicas pruning at once do not
        # both take the same rows off the counts.
        members = conn.execute(delete(changes).where(c.id.in_(ids))
                               .returning(c.members, c.loc)).all()
        count = sum(1 if m is None else m for m, _loc in members)
        conn.execute(update(targets).where(targets.c.id == target_id).values(
            change_count=targets.c.change_count - count))
        return len(ids), count, [loc for m, loc in members if m is None]

    while True:
        rows, count, locs = transaction(engine, change_batch)
        # In a transaction of its own, which waits for the writers of change rows
        # (changelocs) and holds no row that they may wait for.
        transaction(engine, functools.partial(changelocs.forget_unused, target_id=target_id,
                                              locs=locs))
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

    found.entry_sets = _delete_all(engine, entry_sets, _unneeded_sets(target_id, keep))
    found.robots_files = _delete_all(engine, robots_files, _superseded_robots(target_id, keep))
    return found


def _delete_all(engine: Engine, table: Table, ids: Select[Any]) -> int:
    """Delete the rows of ``table`` whose ids ``ids`` selects, ``BATCH`` a transaction."""
    deleted = 0

    def batch(conn: Connection) -> int:
        found = list(conn.execute(ids.order_by(table.c.id).limit(BATCH)).scalars())
        if found:
            conn.execute(delete(table).where(table.c.id.in_(found)))
        return len(found)

    while True:
        gone = transaction(engine, batch)
        deleted += gone
        if gone < BATCH:
            return deleted


def give_back(engine: Engine) -> int | None:
    """Return SQLite's free pages to the file system, ``VACUUM_PAGES`` a transaction, so that
    the file shrinks after a prune; the bytes given back. None when the file cannot: it was
    made before incremental vacuum (``auto_vacuum`` NONE: its free pages are reused, and
    ``sitemap-monitor db vacuum`` converts it once). PostgreSQL: a plain ``VACUUM`` of the
    tables a prune deletes from (reads and writes go on meanwhile), so that their freed space
    is reused at once, where autovacuum is off or waits for a fifth of a table to be dead."""
    if engine.dialect.name != "sqlite":
        before = database_bytes(engine)
        _vacuum_postgres(engine, ", ".join(table.name for table in _PRUNED))
        return max(0, before - database_bytes(engine))  # the tables' empty ends cut off
    with _driver(engine) as sqlite:
        def pragma(name: str) -> int:
            return int(sqlite.execute(f"PRAGMA {name}").fetchone()[0])

        if pragma("auto_vacuum") != _INCREMENTAL:
            return None
        page, given = pragma("page_size"), 0
        while free := pragma("freelist_count"):
            # executescript, not execute: the sqlite3 module steps a pragma once, which frees
            # a single page.
            sqlite.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES});")
            left = pragma("freelist_count")
            if left >= free:
                break
            given += (free - left) * page
        return given


# The tables a prune deletes from (notifications: their snapshot_id set to NULL).
_PRUNED = (changes, change_locs, documents, snapshots, entry_sets, robots_files, notifications)


def vacuum(engine: Engine) -> None:
    """``db vacuum``: rewrite a SQLite file whole, as one that gives its free pages back (the
    write lock is held throughout: run it with the daemon stopped); PostgreSQL's VACUUM."""
    if engine.dialect.name != "sqlite":
        _vacuum_postgres(engine)
        return
    with _driver(engine) as sqlite:
        try:
            sqlite.executescript(f"PRAGMA busy_timeout = {VACUUM_WAIT * 1000}; "
                                 f"PRAGMA auto_vacuum = {_INCREMENTAL}; VACUUM;")
        except sqlite3.Error as exc:  # "database is locked": a daemon writes to it
            raise StoreError(f"vacuum failed on {engine.url.database}: {exc}") from None


def _vacuum_postgres(engine: Engine, tables: str = "") -> None:
    """PostgreSQL's plain VACUUM (of these tables, or of the whole database), outside a
    transaction and without the statement timeout: a big table's takes long."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("SET statement_timeout = 0")
        try:
            conn.exec_driver_sql(f"VACUUM {tables}".strip())
        finally:
            conn.exec_driver_sql("RESET statement_timeout")


@contextlib.contextmanager
def _driver(engine: Engine) -> Iterator[sqlite3.Connection]:
    """The sqlite3 connection of a pooled connection, for what the driver does itself."""
    raw = engine.raw_connection()
    try:
        sqlite = raw.driver_connection
        assert isinstance(sqlite, sqlite3.Connection)
        yield sqlite
    finally:
        raw.close()
