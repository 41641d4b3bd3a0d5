"""The writes of one check, held while it reads and then stored in one short transaction.

A check waits on the network for most of its time: holding a transaction open meanwhile would
keep SQLite's single write lock from every other check, and a PostgreSQL connection idle in a
transaction. So a check records what it will write here, entry sets spooled to a temporary
file, and ``commit`` writes it all at the end in one transaction: the snapshot, its entry sets,
change rows, robots.txt versions, the outbox rows of its alerts and the lease given back, or
nothing at all. The writes are kept, so a transient database error is retried whole.

A check that read the target's state at its start writes only if no other snapshot of the
target was written meanwhile (another process checking the same target): it would diff against
a state that is no longer current.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import IO, Any

from sqlalchemy import Connection, Engine, bindparam, func, select, update

from monitor.codec import changepacks, changerows
from monitor.codec.states import StoredSet
from monitor.core.errors import LeaseLost
from monitor.core.model import Change
from monitor.store import checkwriter as writer
from monitor.store import movepacks
from monitor.store import robotsversions as robots_versions
from monitor.store.checkwriter import EntrySetWrite, SnapshotWrite
from monitor.store.retry import transaction
from monitor.store.schema import snapshots, targets

__all__ = ["Blob", "CheckWrites", "Then", "Written", "commit"]

_IN_MEMORY = 8 * 1024 * 1024  # spooled entry sets kept in memory before a temporary file

# The statements of the conflict guard: take the target's row (PostgreSQL) or the database's
# write lock (SQLite) first, then read the newest snapshot with a fresh view.
_LOCK_TARGET = (update(targets).where(targets.c.id == bindparam("target"))
                .values(url=targets.c.url))
_LAST_SNAPSHOT = select(func.max(snapshots.c.id)).where(
    snapshots.c.target_id == bindparam("target"))


def _last_snapshot(conn: Connection, target_id: int) -> int | None:
    """The id of the target's newest snapshot (what a check's state was read after)."""
    found: int | None = conn.execute(_LAST_SNAPSHOT, {"target": target_id}).scalar_one()
    return found


@dataclass(frozen=True, slots=True)
class Blob:
    """Bytes held in a ``CheckWrites`` spool: where they start and how many."""

    offset: int
    size: int


@dataclass(slots=True)
class _PendingSet:
    """A document's new entry set, its value spooled: whole (``data``) or a delta against the
    version ``base_id`` (``made``)."""

    url: str
    previous_id: int | None
    urls: int
    invalid: int
    data: Blob | None
    delta: bool = False
    made: tuple[int, Blob] | None = None


@dataclass(slots=True)
class _Ids:
    """What the transaction has made so far: the snapshot and the new entry sets' ids."""

    snapshot_id: int | None = None
    sets: dict[str, int] = field(default_factory=dict)
    changes_written: int = 0


_Step = Callable[[Connection, "CheckWrites", _Ids], None]


@dataclass(frozen=True, slots=True)
class Written:
    """What a check's transaction wrote, for the steps that run after it (``Then``)."""

    snapshot_id: int
    changes: int  # change rows


Then = Callable[[Connection, Written], Any]


class CheckWrites:
    """What one check will write, in the order it found it; nothing touches the database
    until ``commit``."""

    def __init__(self, target_id: int, started: datetime, last_snapshot_id: int | None) -> None:
        self.target_id = target_id
        self.started = started
        self.last_snapshot_id = last_snapshot_id
        self._steps: list[_Step] = []
        self._sets: dict[str, _PendingSet] = {}
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 (see close)
            max_size=_IN_MEMORY, prefix="sitemap-monitor-", suffix=".check")
        self._end = 0

    def close(self) -> None:
        self._file.close()

    # -- the spool ------------------------------------------------------------------------

    def put(self, data: bytes) -> Blob:
        self._file.seek(self._end)
        self._file.write(data)
        blob = Blob(self._end, len(data))
        self._end += len(data)
        return blob

    def get(self, blob: Blob) -> bytes:
        self._file.seek(blob.offset)
        return self._file.read(blob.size)

    # -- what a check records -------------------------------------------------------------

    def entry_set(self, url: str, previous_id: int | None, urls: int, invalid: int,
                  data: bytes | None, made: tuple[int, bytes] | None = None, *,
                  delta: bool = False) -> None:
        """A document's new entry set, replacing its version ``previous_id`` (if any)."""
        pending = _PendingSet(
            url, previous_id, urls, invalid, None if data is None else self.put(data),
            delta=delta, made=None if made is None else (made[0], self.put(made[1])))
        self._sets[url] = pending
        self._steps.append(lambda conn, plan, ids: plan._write_set(conn, ids, pending))

    def replace_set(self, url: str, data: bytes) -> None:
        """New verdicts for the entry set this check records for ``url`` (the same entries):
        it is stored whole."""
        pending = self._sets[url]
        pending.data, pending.made, pending.delta = self.put(data), None, False

    def change_rows(self, url: str, rows: bytes, previous_id: int | None,
                    packs: Sequence[changepacks.Packed], data: bytes | None) -> None:
        """A document's changes as change rows (``monitor.codec.changerows``) and packs, with
        the value of its new entry set, which the packs point into."""
        kept_rows, kept_data = self.put(rows), None if data is None else self.put(data)

        def step(conn: Connection, plan: CheckWrites, ids: _Ids) -> None:
            ids.changes_written += writer.write_change_rows(
                conn, plan.target_id, _snapshot(conn, plan, ids),
                changerows.decode(plan.get(kept_rows)),
                (ids.sets[url], b"" if kept_data is None else plan.get(kept_data),
                 previous_id), packs)

        self._steps.append(step)

    def changes(self, found: list[Change]) -> None:
        """Changes found across documents (true removals and additions, moves)."""
        def step(conn: Connection, plan: CheckWrites, ids: _Ids) -> None:
            ids.changes_written += movepacks.write_moves(
                conn, plan.target_id, _snapshot(conn, plan, ids), found)

        self._steps.append(step)

    def close_sets(self, set_ids: list[int]) -> None:
        """End these entry sets (of documents no longer listed) at this snapshot."""
        self._steps.append(lambda conn, plan, ids: writer.close_entry_sets(
            conn, set_ids, _snapshot(conn, plan, ids)))

    def robots(self, versions: list[robots_versions.Version]) -> None:
        """This check's robots.txt versions; a changed one is a change of the snapshot."""
        changed = any(v.changed for v in versions)

        def step(conn: Connection, plan: CheckWrites, ids: _Ids) -> None:
            snapshot_id = _snapshot(conn, plan, ids) if changed else ids.snapshot_id
            ids.changes_written += robots_versions.save(conn, plan.target_id, snapshot_id,
                                                    plan.started, versions)

        self._steps.append(step)

    # -- what a check reads back ----------------------------------------------------------

    def recorded(self, url: str) -> bool:
        """Whether this check records a new entry set for ``url``."""
        return url in self._sets

    def pending(self, url: str, base: Callable[[int], bytes]) -> StoredSet | None:
        """The entry set this check records for ``url``, as the store would give it back
        (``base`` reads a stored version's value, for one recorded as a delta)."""
        pending = self._sets.get(url)
        if pending is None:
            return None
        if pending.data is not None:
            return StoredSet(0, url, self.get(pending.data))
        assert pending.made is not None
        base_id, delta = pending.made
        return StoredSet(0, url, self.get(delta), base(base_id))

    # -- the transaction ------------------------------------------------------------------

    def _write_set(self, conn: Connection, ids: _Ids, pending: _PendingSet) -> None:
        made = None if pending.made is None else (pending.made[0], self.get(pending.made[1]))
        ids.sets[pending.url] = writer.write_entry_set(conn, EntrySetWrite(
            target_id=self.target_id, snapshot_id=_snapshot(conn, self, ids),
            document_url=pending.url, previous_id=pending.previous_id, urls=pending.urls,
            invalid=pending.invalid,
            data=None if pending.data is None else self.get(pending.data),
            delta=pending.delta, made=made))

    def write(self, conn: Connection, end: SnapshotWrite, after: Sequence[Then]) -> int:
        """Everything, in the caller's transaction; return the snapshot's id. ``after`` runs,
        in order, with the snapshot's id once it is complete (the IndexNow submissions, the
        alerts' outbox rows, the lease given back)."""
        conn.execute(_LOCK_TARGET, {"target": self.target_id})
        if _last_snapshot(conn, self.target_id) != self.last_snapshot_id:
            raise LeaseLost(f"{end.result.target}: another process stored a check of this "
                            "target while this one ran; this check is not stored")
        ids = _Ids()
        for step in self._steps:
            step(conn, self, ids)
        changes = end.changes_written + ids.changes_written
        snapshot_id = writer.close_snapshot(conn, replace(
            end, snapshot_id=ids.snapshot_id, changes_written=changes))
        for then in after:
            then(conn, Written(snapshot_id, changes))
        return snapshot_id


def _snapshot(conn: Connection, plan: CheckWrites, ids: _Ids) -> int:
    """The snapshot's id, inserting its row with the first write that needs it."""
    if ids.snapshot_id is None:
        ids.snapshot_id = writer.open_snapshot(conn, plan.target_id, plan.started)
    return ids.snapshot_id


def commit(engine: Engine, plan: CheckWrites, end: SnapshotWrite,
           after: Sequence[Then] = ()) -> int:
    """Write a check in one transaction, retried whole on a transient error; return the
    snapshot's id."""
    return transaction(engine, lambda conn: plan.write(conn, end, after))
