"""The SQL of the alert outbox and of alert states.

Writing happens inside the snapshot's transaction (``rule_context`` and ``write`` take the
pipeline's Connection), so a notification exists exactly when its snapshot does. Delivery goes
through ``SqlOutbox``: several replicas may poll the same table; a row is sent only by the
replica whose conditional ``UPDATE`` took its lease (healthchecks' ``sendalerts.py`` pattern).
Times are stored as UTC; SQLite hands them back naive, so every time read is made aware here.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, and_, exists, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from monitor.core.model import Notification, RuleContext
from monitor.store.retry import transaction
from monitor.store.schema import alert_states, notifications, snapshots, targets

__all__ = ["OutboxRow", "SqlOutbox", "firing_rules", "rule_context", "write"]


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def firing_rules(conn: Connection, target_name: str) -> dict[str, datetime]:
    """The alert rules firing for a target now, and since when."""
    a = alert_states.c
    found = {row.rule: _aware(row.since) for row in conn.execute(
        select(a.rule, a.since).where(a.target_name == target_name, a.firing.is_(True)))}
    return {rule: since for rule, since in found.items() if since is not None}


def rule_context(
    conn: Connection,
    target_name: str,
    now: datetime,
    *,
    current_snapshot_id: int | None = None,
) -> RuleContext:
    """The target's history as alert rules see it, excluding the current check's snapshot.

    With ``current_snapshot_id`` only older snapshots count. Without it the target's newest
    snapshot is taken to be the current check's (the pipeline calls this after inserting it).
    ``now`` is accepted for symmetry with ``write``; the history does not depend on it.
    """
    del now
    s = snapshots
    target_id = conn.execute(
        select(targets.c.id).where(targets.c.name == target_name)
    ).scalar_one_or_none()
    firing = firing_rules(conn, target_name)
    if target_id is None:
        return RuleContext(firing=firing)
    if current_snapshot_id is None:
        current_snapshot_id = conn.execute(
            select(func.max(s.c.id)).where(s.c.target_id == target_id)
        ).scalar_one_or_none()
    older = [s.c.target_id == target_id]
    if current_snapshot_id is not None:
        older.append(s.c.id < current_snapshot_id)
    last_ok = conn.execute(
        select(s.c.id, s.c.urls, s.c.issue_counts).where(*older, s.c.outcome != "failed")
        .order_by(s.c.id.desc()).limit(1)
    ).first()
    failures_since = [*older] if last_ok is None else [*older, s.c.id > last_ok.id]
    failures = conn.execute(
        select(func.count()).select_from(s).where(*failures_since, s.c.outcome == "failed")
    ).scalar_one()
    last_change = conn.execute(
        select(func.max(s.c.finished_at)).where(*older, or_(s.c.added > 0, s.c.changed > 0))
    ).scalar_one_or_none()
    first_check = conn.execute(select(func.min(s.c.finished_at)).where(*older)).scalar_one_or_none()
    return RuleContext(
        previous_urls=None if last_ok is None else int(last_ok.urls),
        consecutive_failures=int(failures),
        last_content_change_at=_aware(last_change),
        first_check_at=_aware(first_check),
        firing=firing,
        previous_issue_counts=(
            {} if last_ok is None else json.loads(last_ok.issue_counts or "{}")),
    )


def _insert_ignoring_duplicates(conn: Connection) -> Any:
    """An INSERT that skips a row whose idempotency key exists (a retried transaction)."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(notifications).on_conflict_do_nothing(
            index_elements=["idempotency_key"]
        )
    if dialect == "sqlite":
        return sqlite.insert(notifications).on_conflict_do_nothing(
            index_elements=["idempotency_key"]
        )
    return insert(notifications)


def write(
    conn: Connection, snapshot_id: int | None, items: Sequence[Notification], now: datetime
) -> None:
    """Store notifications as pending outbox rows and move the alert states they imply.

    A ``firing`` notification marks its rule firing (keeping the original start when it was
    already firing); ``resolved`` clears it. Events (``payload["event"]``, e.g. ``recovered``)
    and ``test`` notifications leave the states alone.
    """
    states: dict[tuple[str, str], tuple[bool, int | None]] = {}
    for n in items:
        if not n.send:  # the state moves; the channel is not told
            states.setdefault((n.target_name, n.rule), (n.state == "firing", None))
            continue
        row_id = conn.execute(
            _insert_ignoring_duplicates(conn).values(
                snapshot_id=snapshot_id,
                target_name=n.target_name,
                rule=n.rule,
                channel=n.channel,
                state=n.state,
                idempotency_key=n.idempotency_key,
                payload=json.dumps(n.payload, sort_keys=True, default=str),
                created_at=now,
                status="pending",
                attempts=0,
                next_attempt_at=now,
            ).returning(notifications.c.id)
        ).scalar_one_or_none()
        if n.state == "test" or n.payload.get("event"):
            continue
        states[(n.target_name, n.rule)] = (n.state == "firing", row_id)
    for (target_name, rule), (firing, row_id) in states.items():
        _set_state(conn, target_name, rule, firing=firing, notification_id=row_id, now=now)


def _set_state(
    conn: Connection, target_name: str, rule: str, *, firing: bool,
    notification_id: int | None, now: datetime,
) -> None:
    a = alert_states
    key = and_(a.c.target_name == target_name, a.c.rule == rule)
    current = conn.execute(select(a.c.firing).where(key)).first()
    if current is None:
        conn.execute(insert(a).values(
            target_name=target_name, rule=rule, firing=firing, since=now,
            last_notification_id=notification_id,
        ))
        return
    values: dict[str, Any] = {"firing": firing, "last_notification_id": notification_id}
    if bool(current.firing) != firing:  # a re-send while firing keeps the start time
        values["since"] = now
    conn.execute(update(a).where(key).values(**values))


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A claimed notification, with what the delivery loop needs to decide its fate."""

    id: int
    notification: Notification
    created_at: datetime
    attempts: int
    lease: str = field(repr=False)  # the claim's token: only its holder may mark the row


class SqlOutbox:
    """The delivery side of the outbox: claim due rows with a lease, then mark them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def pending_count(self) -> int:
        """How many notifications wait for delivery (the alerts_pending gauge)."""
        with self.engine.connect() as conn:
            return int(conn.execute(
                select(func.count()).select_from(notifications)
                .where(notifications.c.status == "pending")
            ).scalar_one())

    def claim(self, owner: str, now: datetime, lease: float, limit: int = 50) -> list[OutboxRow]:
        """Lease up to ``limit`` due rows for ``owner``; rows another replica holds are skipped.

        Only the oldest pending row of each (target, rule, channel) is due, so a ``resolved``
        never overtakes the ``firing`` it ends.
        """
        n = notifications
        older = n.alias("older")
        token = f"{owner[:180]}:{secrets.token_hex(6)}"
        free = or_(n.c.lease_until.is_(None), n.c.lease_until < now)

        def work(conn: Connection) -> list[OutboxRow]:
            blocked = exists().where(
                older.c.status == "pending",
                older.c.target_name == n.c.target_name,
                older.c.rule == n.c.rule,
                older.c.channel == n.c.channel,
                older.c.id < n.c.id,
            )
            ids = list(conn.execute(
                select(n.c.id).where(n.c.status == "pending", n.c.next_attempt_at <= now, free,
                                     ~blocked)
                .order_by(n.c.next_attempt_at, n.c.id).limit(limit)
            ).scalars())
            if not ids:
                return []
            # The WHERE is re-checked under the row lock: of two replicas, one gets rowcount.
            conn.execute(
                update(n).where(n.c.id.in_(ids), n.c.status == "pending", free)
                .values(lease_owner=token, lease_until=now + timedelta(seconds=lease))
            )
            rows = conn.execute(
                select(n).where(n.c.id.in_(ids), n.c.lease_owner == token).order_by(n.c.id)
            ).all()
            return [_row(r, token) for r in rows]

        return transaction(self.engine, work)

    def mark_delivered(self, row: OutboxRow, now: datetime) -> bool:
        """Record a successful delivery; False when the lease had been lost meanwhile."""
        # last_error stays: "delivered after HTTP 503" is worth knowing.
        return self._finish(row, status="delivered", delivered_at=now)

    def mark_failed(self, row: OutboxRow, error: str) -> bool:
        """Give up on a row: permanent refusal, expiry or an unknown channel."""
        return self._finish(row, status="failed", last_error=error[:2000])

    def mark_retry(self, row: OutboxRow, next_attempt_at: datetime, error: str) -> bool:
        """Put a row back for another attempt at ``next_attempt_at``."""
        return self._finish(row, status="pending", next_attempt_at=next_attempt_at,
                            last_error=error[:2000])

    def _finish(self, row: OutboxRow, **values: Any) -> bool:
        n = notifications

        def work(conn: Connection) -> bool:
            result = conn.execute(
                update(n).where(n.c.id == row.id, n.c.lease_owner == row.lease)
                .values(attempts=n.c.attempts + 1, lease_owner=None, lease_until=None, **values)
            )
            return result.rowcount == 1

        return transaction(self.engine, work)

    def status(self, idempotency_key: str) -> dict[str, Any] | None:
        """A row's delivery state by key (for the CLI, the API and tests)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(notifications)
                .where(notifications.c.idempotency_key == idempotency_key)
            ).first()
        return None if row is None else dict(row._mapping)


def _row(r: Any, token: str) -> OutboxRow:
    created = _aware(r.created_at)
    assert created is not None
    payload = json.loads(r.payload)
    return OutboxRow(
        id=r.id,
        notification=Notification(
            target_name=r.target_name,
            rule=r.rule,
            channel=r.channel,
            state=r.state,
            severity=str(payload.get("severity", "warning")),
            idempotency_key=r.idempotency_key,
            payload=payload,
        ),
        created_at=created,
        attempts=int(r.attempts),
        lease=token,
    )
