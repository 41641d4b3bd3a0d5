"""The SQL of IndexNow submissions: written with their change set, delivered with a lease.

``recorded`` reads a check's ``added`` and ``changed`` changes back on the check's own
connection (a pack's members from the entry-set versions they point into), and ``enqueue``
writes the submissions made of them in the same transaction, so a submission exists exactly
when its snapshot does. ``SqlSubmissions`` is the delivery side: several replicas may poll the
table; a row is sent by the replica whose conditional ``UPDATE`` took its lease. Times are
stored as UTC; SQLite hands them back naive, so every time read is made aware here.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from monitor.codec import changepacks
from monitor.core.errors import StoreError
from monitor.store.checkreads import read_columns, read_sets
from monitor.store.retry import transaction
from monitor.store.schema import (
    changes,
    entry_sets,
    indexnow_keys,
    indexnow_submissions,
    snapshots,
    target_documents,
    targets,
)

__all__ = [
    "Claimed", "KeyState", "NewSubmission", "SqlSubmissions", "document_origins",
    "documents_version", "enqueue", "failing_keys", "recent", "recorded",
]

_LEVEL = 6


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class NewSubmission:
    """One request to write: its origin, its URLs and the count of each change kind."""

    origin: str
    urls: tuple[str, ...]
    kinds: dict[str, int]
    digest: str  # of the URL list: with the scope, the idempotency key


@dataclass(frozen=True, slots=True)
class Claimed:
    """A submission claimed for delivery."""

    id: int
    target_name: str
    origin: str
    urls: tuple[str, ...]
    created_at: datetime
    attempts: int
    lease: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class KeyState:
    """The last fetch of one host's key file for one target."""

    origin: str
    location: str
    key_digest: str
    checked_at: datetime
    ok: bool
    detail: str | None


def key_digest(key: str) -> str:
    """What is stored of a key: enough to see it changed, nothing to read it back."""
    return hashlib.sha256(key.encode()).hexdigest()


def recorded(conn: Connection, target_id: int, snapshot_id: int,
             ) -> Iterator[tuple[str, str, str | None, str | None]]:
    """(kind, loc, before, after) of each ``added`` and ``changed`` change of a snapshot, in
    the order they were recorded, packs unfolded (one document's versions held at a time)."""
    c = changes.c
    rows = conn.execute(
        select(c.id, c.kind, c.loc, c.before, c.after, c.entry_set_id, c.before_set_id,
               c.members)
        .where(c.target_id == target_id, c.snapshot_id == snapshot_id,
               c.kind.in_(("added", "changed")))
        .order_by(c.id)).all()
    versions: dict[int, changepacks.Version] = {}
    for change_id, kind, loc, before, after, set_id, before_id, members in rows:
        if members is None:
            yield kind, loc, before, after
            continue
        wanted = [set_id] if before_id is None else [set_id, before_id]
        versions = {i: v for i, v in versions.items() if i in wanted}
        for i in wanted:
            if i not in versions:
                found = read_columns(conn, select(entry_sets.c.id, entry_sets.c.data)
                                     .where(entry_sets.c.id == i))
                if not found:
                    raise StoreError(f"entry set {i}, which the changes of row {change_id} "
                                     "point into, is missing")
                versions[i] = changepacks.Version(found[0][1])
        pack = read_sets(conn, select(c.id, c.pack).where(c.id == change_id), whole=False)
        for member_loc, was, now in versions[set_id].changes(
                changepacks.unpack(pack[0][1]),
                None if before_id is None else versions[before_id], kind):
            yield kind, member_loc, was, now


def _insert_ignoring_duplicates(conn: Connection) -> Any:
    """An INSERT that skips a row whose idempotency key exists (a retried transaction)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(indexnow_submissions).on_conflict_do_nothing(
        index_elements=["idempotency_key"])


def enqueue(conn: Connection, target_name: str, snapshot_id: int | None, scope: str,
            items: Iterable[NewSubmission], now: datetime) -> int:
    """Write pending submissions of one change set (``scope`` names it: the same change set
    written twice is written once); return how many URLs they hold."""
    urls = 0
    for item in items:
        key = hashlib.sha256(
            f"{target_name}\n{scope}\n{item.origin}\n{item.digest}".encode()).hexdigest()
        conn.execute(_insert_ignoring_duplicates(conn).values(
            target_name=target_name, snapshot_id=snapshot_id,
            idempotency_key=f"indexnow:{key[:48]}", origin=item.origin,
            url_count=len(item.urls), kinds=json.dumps(item.kinds, sort_keys=True),
            urls=zlib.compress("\n".join(item.urls).encode(), _LEVEL),
            created_at=now, status="pending", attempts=0, next_attempt_at=now))
        urls += len(item.urls)
    return urls


def document_origins(conn: Connection, target_name: str,
                     origin: Callable[[str], str | None]) -> set[str]:
    """``origin`` of each current document of a target (its sitemaps), the URLs streamed."""
    found: set[str] = set()
    rows = conn.execute(
        select(target_documents.c.url).join(
            targets, targets.c.id == target_documents.c.target_id)
        .where(targets.c.name == target_name).execution_options(yield_per=1000))
    for url in rows.scalars():
        made = origin(url)
        if made is not None:
            found.add(made)
    return found


def documents_version(conn: Connection, target_name: str) -> int:
    """The id of the target's last snapshot (0: none yet): its documents are only written in
    a snapshot's transaction, so while this stays the same, so do they."""
    last = (select(func.max(snapshots.c.id)).join(targets, targets.c.id == snapshots.c.target_id)
            .where(targets.c.name == target_name))
    return int(conn.execute(last).scalar() or 0)


def failing_keys(conn: Connection, target_name: str, since: datetime) -> list[KeyState]:
    """The hosts whose key file did not verify at its last fetch, if that was ``since`` or
    later (a host nothing waits for any more is not fetched again), for the target's issues."""
    return [k for k in _keys(conn, target_name) if not k.ok and k.checked_at >= since]


def _keys(conn: Connection, target_name: str) -> list[KeyState]:
    k = indexnow_keys.c
    return [KeyState(r.origin, r.location, r.key_digest, _aware(r.checked_at) or r.checked_at,
                     bool(r.ok), r.detail)
            for r in conn.execute(select(indexnow_keys).where(k.target_name == target_name)
                                  .order_by(k.origin))]


class SqlSubmissions:
    """The delivery side of the submissions: claim due rows with a lease, then mark them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim(self, owner: str, now: datetime, lease: float, limit: int = 8) -> list[Claimed]:
        """Lease up to ``limit`` due rows for ``owner``; rows another replica holds are
        skipped."""
        s = indexnow_submissions
        token = f"{owner[:180]}:{secrets.token_hex(6)}"
        free = or_(s.c.lease_until.is_(None), s.c.lease_until < now)

        def work(conn: Connection) -> list[Claimed]:
            ids = list(conn.execute(
                select(s.c.id).where(s.c.status == "pending", s.c.next_attempt_at <= now, free)
                .order_by(s.c.next_attempt_at, s.c.id).limit(limit)).scalars())
            if not ids:
                return []
            # The WHERE is re-checked under the row lock: of two replicas, one gets the row.
            conn.execute(update(s).where(s.c.id.in_(ids), s.c.status == "pending", free)
                         .values(lease_owner=token,
                                 lease_until=now + timedelta(seconds=lease)))
            rows = read_sets(conn, select(
                s.c.id, s.c.target_name, s.c.origin, s.c.created_at, s.c.attempts, s.c.urls)
                .where(s.c.id.in_(ids), s.c.lease_owner == token).order_by(s.c.id),
                whole=False)
            return [Claimed(r[0], r[1], r[2],
                            tuple(zlib.decompress(r[5]).decode().split("\n")),
                            _aware(r[3]) or r[3], int(r[4]), token) for r in rows]

        return transaction(self.engine, work)

    def mark_delivered(self, row: Claimed, now: datetime, status: int, answer: str) -> bool:
        """Record that the endpoint took the URLs; False when the lease was lost meanwhile."""
        return self._finish(row, status="delivered", delivered_at=now, attempted_at=now,
                            http_status=status, last_error=answer[:2000])

    def mark_failed(self, row: Claimed, now: datetime, error: str,
                    status: int | None = None) -> bool:
        """Give up on a row: a permanent refusal, or expired."""
        return self._finish(row, status="failed", attempted_at=now, http_status=status,
                            last_error=error[:2000])

    def narrow(self, row: Claimed, urls: tuple[str, ...]) -> bool:
        """Keep only ``urls`` of a row (those it may submit), so that a retry sends, and
        counts, only them; False when the lease was lost meanwhile."""
        s = indexnow_submissions

        def work(conn: Connection) -> bool:
            result = conn.execute(
                update(s).where(s.c.id == row.id, s.c.lease_owner == row.lease)
                .values(urls=zlib.compress("\n".join(urls).encode(), _LEVEL),
                        url_count=len(urls)))
            return result.rowcount == 1

        return transaction(self.engine, work)

    def mark_retry(self, row: Claimed, now: datetime, next_attempt_at: datetime, error: str,
                   status: int | None = None, *, attempted: bool = True) -> bool:
        """Put a row back for ``next_attempt_at``; ``attempted`` False: it was not sent (a
        key file that did not verify, an endpoint asked to wait), which is not an attempt."""
        values: dict[str, Any] = {"status": "pending", "next_attempt_at": next_attempt_at,
                                  "last_error": error[:2000]}
        if attempted:
            values.update(attempted_at=now, http_status=status)
        return self._finish(row, count=attempted, **values)

    def _finish(self, row: Claimed, *, count: bool = True, **values: Any) -> bool:
        s = indexnow_submissions

        def work(conn: Connection) -> bool:
            more = {"attempts": s.c.attempts + 1} if count else {}
            result = conn.execute(
                update(s).where(s.c.id == row.id, s.c.lease_owner == row.lease)
                .values(lease_owner=None, lease_until=None, **more, **values))
            return result.rowcount == 1

        return transaction(self.engine, work)

    def key(self, target_name: str, origin: str) -> KeyState | None:
        """The last fetch of an origin's key file for a target, or None."""
        k = indexnow_keys.c
        with self.engine.connect() as conn:
            row = conn.execute(select(indexnow_keys).where(
                k.target_name == target_name, k.origin == origin)).first()
        if row is None:
            return None
        return KeyState(row.origin, row.location, row.key_digest,
                        _aware(row.checked_at) or row.checked_at, bool(row.ok), row.detail)

    def save_key(self, target_name: str, state: KeyState) -> None:
        """Store the outcome of a key file fetch, replacing the previous one."""
        k = indexnow_keys

        def work(conn: Connection) -> None:
            values = {"location": state.location, "key_digest": state.key_digest,
                      "checked_at": state.checked_at, "ok": state.ok, "detail": state.detail}
            done = conn.execute(update(k).where(
                k.c.target_name == target_name, k.c.origin == state.origin).values(**values))
            if done.rowcount == 0:
                dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
                conn.execute(dialect.insert(k).values(
                    target_name=target_name, origin=state.origin, **values,
                ).on_conflict_do_nothing())

        transaction(self.engine, work)

    def prune(self, before: datetime, limit: int = 1000) -> int:
        """Delete up to ``limit`` settled submissions written before ``before``; return how
        many (the history ``indexnow status`` shows stays bounded)."""
        s = indexnow_submissions

        def work(conn: Connection) -> int:
            ids = list(conn.execute(
                select(s.c.id).where(s.c.status.in_(("delivered", "failed")),
                                     s.c.created_at < before)
                .order_by(s.c.id).limit(limit)).scalars())
            if ids:
                conn.execute(delete(s).where(s.c.id.in_(ids)))
            return len(ids)

        return transaction(self.engine, work)

    def pending_count(self) -> int:
        """How many submissions wait for delivery."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(indexnow_submissions)
                                    .where(indexnow_submissions.c.status == "pending"))
                       .scalar_one())

    def history(self, target_name: str, limit: int = 50) -> list[dict[str, Any]]:
        """A target's newest submissions first: when, how many URLs, the answer."""
        s = indexnow_submissions.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(
                s.id, s.snapshot_id, s.origin, s.url_count, s.kinds, s.created_at, s.status,
                s.attempts, s.next_attempt_at, s.http_status, s.last_error, s.attempted_at,
                s.delivered_at).where(s.target_name == target_name)
                .order_by(s.id.desc()).limit(limit)).all()
        return [{
            "id": r.id, "snapshot_id": r.snapshot_id, "host": r.origin,
            "urls": r.url_count, "kinds": json.loads(r.kinds or "{}"),
            "created_at": _aware(r.created_at), "status": r.status, "attempts": r.attempts,
            "next_attempt_at": _aware(r.next_attempt_at) if r.status == "pending" else None,
            "http_status": r.http_status, "answer": r.last_error,
            "attempted_at": _aware(r.attempted_at), "delivered_at": _aware(r.delivered_at),
        } for r in rows]

    def document_origins(self, target_name: str, origin: Callable[[str], str | None],
                         known: int = -1) -> tuple[int, set[str] | None]:
        """The target's ``documents_version`` and, unless it is ``known``, ``origin`` of each
        of its current documents (its sitemaps)."""

        def work(conn: Connection) -> tuple[int, set[str] | None]:
            # The version first: a check written between the two reads is read again later.
            version = documents_version(conn, target_name)
            if version == known:
                return version, None
            return version, document_origins(conn, target_name, origin)

        return transaction(self.engine, work)

    def keys(self, target_name: str) -> list[KeyState]:
        """Every key file fetched for a target, by origin."""
        with self.engine.connect() as conn:
            return _keys(conn, target_name)

    def urls(self, submission_id: int) -> list[str]:
        """The URL list of one submission."""
        s = indexnow_submissions.c
        with self.engine.connect() as conn:
            found = read_sets(conn, select(s.id, s.urls).where(s.id == submission_id),
                              whole=False)
        return [] if not found else zlib.decompress(found[0][1]).decode().split("\n")


def recent(engine: Engine, target_name: str, limit: int = 10) -> list[dict[str, Any]]:
    """A target's last submissions, newest first (the target's web page)."""
    return SqlSubmissions(engine).history(target_name, limit)
