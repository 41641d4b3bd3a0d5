"""Helpers of the alert tests: a fixed clock, check results, the pipeline's alert steps."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from httpserver import Request
from sqlalchemy import Engine, insert, select

from monitor.alerts.delivery import Deliverer
from monitor.alerts.firing import evaluate
from monitor.config import Alerts, Channel, Delivery
from monitor.core.model import CheckResult, Notification
from monitor.store import outbox as store_outbox
from monitor.store.outbox import SqlOutbox
from monitor.store.schema import snapshots, targets

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
SECRET = "s3cr3t-hook-key"  # noqa: S105 - a test key, not a credential


def verify_signature(request: Request, secret: str = SECRET) -> bool:
    """What a receiver does: recompute the HMAC of the raw body and compare in constant time."""
    expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request.headers.get("x-sitemap-monitor-signature", ""))


def result(target: str = "shop", outcome: str = "ok", **counts: int) -> CheckResult:
    """A check result with the given counts (the pipeline's output)."""
    return CheckResult(target=target, url=f"https://{target}.example/sitemap.xml",
                       outcome=outcome, **counts)  # type: ignore[arg-type]


def store_check(engine: Engine, alerts: Alerts, check: CheckResult,
                now: datetime) -> list[Notification]:
    """What the pipeline does for one check: snapshot, context, rules, outbox, one transaction."""
    with engine.begin() as conn:
        target_id = conn.execute(
            select(targets.c.id).where(targets.c.name == check.target)
        ).scalar_one_or_none()
        if target_id is None:
            target_id = conn.execute(
                insert(targets).values(name=check.target, url=check.url, created_at=now)
                .returning(targets.c.id)
            ).scalar_one()
        started = now - timedelta(seconds=check.duration_seconds)
        snapshot_id = conn.execute(
            insert(snapshots).values(
                target_id=target_id, started_at=started, finished_at=now,
                outcome=check.outcome, urls=check.urls, invalid=check.invalid,
                added=check.added, removed=check.removed, changed=check.changed,
                invalid_new=check.invalid_new, error_kind=check.error_kind,
                error_message=check.error_message,
                issue_counts=json.dumps(check.issue_counts),
            ).returning(snapshots.c.id)
        ).scalar_one()
        context = store_outbox.rule_context(conn, check.target, now)
        notes = evaluate(alerts, check.target, replace(check, snapshot_id=snapshot_id), context,
                         now)
        store_outbox.write(conn, snapshot_id, notes, now)
    return notes


def deliver(engine: Engine, channel: Channel, owner: str = "test") -> list[str]:
    """One delivery pass over the outbox for one channel; the outcomes."""
    outcomes: list[str] = []
    deliverer = Deliverer([channel], SqlOutbox(engine), owner=owner, delivery=Delivery(),
                          on_result=lambda _c, o: outcomes.append(o))

    async def go() -> None:
        try:
            await deliverer.deliver_due()
        finally:
            await deliverer.aclose()

    asyncio.run(go())
    return outcomes
