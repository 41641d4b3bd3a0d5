"""The delivery loop: claim due outbox rows with a lease, send each, record the outcome.

Delivery is at-least-once towards the receiver and once as an alert: a row is marked only
after its channel accepted it, so a crash between the two repeats the send, with the same
``Idempotency-Key``. Several replicas may run a Deliverer on one database; the store's
conditional UPDATE gives each row to one of them at a time.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Generic, Protocol, TypeVar

import httpx
import structlog

from monitor.alerts.channels import make_client, make_notifier
from monitor.alerts.notifier import Notifier
from monitor.config import Channel, Delivery
from monitor.core.errors import DeliveryError
from monitor.core.model import Notification
from monitor.net import deliveryloop

__all__ = ["Deliverer", "OutboxRepository", "backoff"]

log = structlog.get_logger("monitor.alerts")

Outcome = str  # sent | retry | failed | expired


class ClaimedRow(Protocol):
    """What the delivery loop reads of a claimed row (``store.outbox.OutboxRow``)."""

    @property
    def id(self) -> int: ...
    @property
    def notification(self) -> Notification: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def attempts(self) -> int: ...


RowT = TypeVar("RowT", bound=ClaimedRow)


class OutboxRepository(Protocol[RowT]):
    """The store side the loop needs (``store.outbox.SqlOutbox``); alerts never import store.

    Generic in the row type: the repository gets back exactly the rows it handed out.
    """

    def claim(self, owner: str, now: datetime, lease: float,
              limit: int = 50) -> Sequence[RowT]: ...
    def mark_delivered(self, row: RowT, now: datetime) -> bool: ...
    def mark_failed(self, row: RowT, error: str) -> bool: ...
    def mark_retry(self, row: RowT, next_attempt_at: datetime, error: str) -> bool: ...


def backoff(attempt: int, delivery: Delivery, retry_after: float | None = None,
            rng: random.Random | None = None) -> float:
    """Seconds before attempt ``attempt + 1``: exponential with equal jitter, or Retry-After.

    A receiver's Retry-After wins (never earlier than ``initial_backoff``, so ``0`` cannot
    make a hot loop); otherwise the delay doubles from ``initial_backoff`` up to
    ``max_backoff`` and is drawn from its upper half so replicas do not retry in step.
    """
    if retry_after is not None:
        return max(retry_after, delivery.initial_backoff)
    return deliveryloop.backoff(attempt, delivery.initial_backoff, delivery.max_backoff,
                                rng or random)


class Deliverer(Generic[RowT]):
    """Delivers pending notifications until stopped; one HTTP client for every channel."""

    def __init__(
        self,
        channels: Sequence[Channel],
        repo: OutboxRepository[RowT],
        *,
        owner: str,
        delivery: Delivery,
        on_result: Callable[[str, str], None] | None = None,
        poll_interval: float = 1.0,
        concurrency: int = 8,
        clock: Callable[[], datetime] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        lease: float | None = None,
    ) -> None:
        self.channels = {c.name: c for c in channels}
        self.repo = repo
        self.delivery = delivery
        self.on_result = on_result
        self.clock = clock or (lambda: datetime.now(UTC))
        self._transport = transport
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._client: httpx.AsyncClient | None = None
        self._notifiers: dict[str, Notifier] = {}
        # A lease must outlive one send (a batch is one wave of ``concurrency`` sends); SMTP
        # may use its timeout per step, hence the margin.
        slowest = max((c.timeout for c in channels), default=10.0)
        self.leasing = deliveryloop.Leasing(
            owner, lease if lease is not None else 4 * slowest + 30.0, concurrency, poll_interval)

    def _notifier(self, channel: Channel) -> Notifier:
        if self._client is None:
            self._client = make_client(self._transport)
        notifier = self._notifiers.get(channel.name)
        if notifier is None:
            notifier = self._notifiers[channel.name] = make_notifier(channel, self._client)
        return notifier

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
            self._notifiers.clear()

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop`` is set; store errors are logged and retried, never raised."""
        try:
            await deliveryloop.run(self.deliver_due, stop, self.leasing, log=log,
                                   failed="outbox pass failed")
        finally:
            await self.aclose()

    async def deliver_due(self) -> int:
        """One pass: claim what is due, send it, mark it; return how many rows were claimed."""
        return await deliveryloop.deliver_due(
            self.repo, self._deliver, self.leasing, self.clock(), log=log,
            unsettled="outbox row not settled", row_key="notification")

    async def _deliver(self, row: RowT) -> None:
        n = row.notification
        bound = log.bind(notification=row.id, channel=n.channel, target=n.target_name,
                         rule=n.rule, state=n.state, attempt=row.attempts + 1)
        channel = self.channels.get(n.channel)
        if channel is None:
            await self._fail(row, f"channel {n.channel} is not configured", "failed", bound)
            return
        expires = row.created_at + timedelta(seconds=self.delivery.max_age)
        if self.clock() >= expires:
            await self._fail(row, "expired before delivery", "expired", bound)
            return
        try:
            await self._notifier(channel).send(n)
        except DeliveryError as exc:
            if exc.permanent:
                await self._fail(row, exc.message, "failed", bound)
                return
            delay = backoff(row.attempts + 1, self.delivery, exc.retry_after, self._rng)
            await self._retry(row, delay, expires, exc.message, bound)
            return
        except Exception as exc:  # noqa: BLE001 - a channel bug must not stop the loop
            bound.exception("channel raised unexpectedly")
            delay = backoff(row.attempts + 1, self.delivery, None, self._rng)
            await self._retry(row, delay, expires, exc.__class__.__name__, bound)
            return
        kept = await asyncio.to_thread(self.repo.mark_delivered, row, self.clock())
        if not kept:
            bound.warning("lease lost before the delivery was recorded; it may repeat")
        bound.info("notification delivered")
        self._report(n.channel, "sent")

    async def _retry(self, row: RowT, delay: float, expires: datetime, error: str,
                     bound: structlog.typing.FilteringBoundLogger) -> None:
        next_at = self.clock() + timedelta(seconds=delay)
        if next_at >= expires:
            await self._fail(row, f"gave up at max_age: {error}", "expired", bound)
            return
        await asyncio.to_thread(self.repo.mark_retry, row, next_at, error)
        bound.warning("notification delivery failed; will retry", error=error,
                      retry_in=round(delay, 3))
        self._report(row.notification.channel, "retry")

    async def _fail(self, row: RowT, error: str, outcome: Outcome,
                    bound: structlog.typing.FilteringBoundLogger) -> None:
        await asyncio.to_thread(self.repo.mark_failed, row, error)
        bound.error("notification not delivered", error=error, outcome=outcome)
        self._report(row.notification.channel, outcome)

    def _report(self, channel: str, outcome: Outcome) -> None:
        if self.on_result is not None:
            deliveryloop.report(log, functools.partial(self.on_result, channel, outcome))
