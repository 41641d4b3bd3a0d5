"""The IndexNow delivery loop: claim due submissions, verify the host's key file, POST them.

Delivery is at-least-once and, for a change set, once: a row is marked only after the endpoint
answered, so a crash between the two repeats that one request; a check that ran again writes
no new row for changes already written (their idempotency key). Before a host's first
submission, and daily, its key file is fetched (through the shared ``Fetcher``: the address
rules and the per-host politeness of the checks); while it does not answer 200 with the key,
nothing is sent for that host and its rows wait. A 429 holds every row for its endpoint until
its ``Retry-After``; 400, 403 and 422 are permanent.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import structlog

from monitor import deliveryloop
from monitor.config import Target
from monitor.errors import FetchError
from monitor.indexnow import protocol as indexnow
from monitor.net.addresses import is_private_target
from monitor.read.fetch import Fetcher, retry_after_seconds
from monitor.store import indexnow as store

__all__ = ["Submitter"]

log = structlog.get_logger("monitor.indexnow.submitter")

MAX_AGE = indexnow.MAX_AGE
PRUNE_EVERY = 3600.0
_INITIAL_BACKOFF = 10.0
_MAX_BACKOFF = 1800.0

# (target, outcome, URLs): sitemap_monitor_indexnow_urls_total
OnResult = Callable[[str, str, int], None]


class Submitter:
    """Delivers pending IndexNow submissions until stopped; one HTTP client for every
    endpoint. ``target_of`` gives a configured target by name at each delivery (a reload
    takes effect on the next row)."""

    def __init__(
        self,
        target_of: Callable[[str], Target | None],
        repo: store.SqlSubmissions,
        fetcher: Fetcher,
        *,
        owner: str,
        on_result: OnResult | None = None,
        poll_interval: float = 1.0,
        concurrency: int = 4,
        clock: Callable[[], datetime] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        lease: float = 300.0,
    ) -> None:
        self.target_of = target_of
        self.repo = repo
        self.fetcher = fetcher
        self.on_result = on_result
        self.clock = clock or (lambda: datetime.now(UTC))
        self._transport = transport
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._client: httpx.AsyncClient | None = None
        self._held: dict[str, datetime] = {}  # endpoint -> no request before (its 429)
        self._key_locks: dict[tuple[str, str], asyncio.Lock] = {}
        # The lease is past one key file fetch and one POST, each within a target's timeout.
        self.leasing = deliveryloop.Leasing(owner, lease, concurrency, poll_interval)

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop`` is set; store errors are logged and retried, never raised."""
        pruned_at = 0.0

        async def one_pass() -> int:
            nonlocal pruned_at
            if time.monotonic() - pruned_at >= PRUNE_EVERY:
                pruned_at = time.monotonic()
                await self.prune()
            return await self.deliver_due()

        try:
            await deliveryloop.run(one_pass, stop, self.leasing, log=log,
                                   failed="indexnow pass failed")
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client (the fetcher is the caller's)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def prune(self) -> int:
        """Delete settled submissions older than ``indexnow.KEEP``, a batch at a time."""
        before = self.clock() - timedelta(seconds=indexnow.KEEP)
        deleted = 0
        while found := await asyncio.to_thread(self.repo.prune, before):
            deleted += found
        if deleted:
            log.info("indexnow submissions pruned", deleted=deleted)
        return deleted

    async def deliver_due(self) -> int:
        """One pass: claim what is due, send it, mark it; return how many rows were claimed."""
        return await deliveryloop.deliver_due(
            self.repo, self._deliver, self.leasing, self.clock(), log=log,
            unsettled="indexnow submission not settled", row_key="submission")

    async def _deliver(self, row: store.Claimed) -> None:
        now = self.clock()
        bound = log.bind(target=row.target_name, submission=row.id, host=row.origin,
                         urls=len(row.urls))
        target = self.target_of(row.target_name)
        settings = None if target is None else target.settings.indexnow
        if target is None or settings is None or not settings.enabled or settings.key is None:
            await asyncio.to_thread(self.repo.mark_failed, row, now,
                                    "the target no longer submits to IndexNow")
            bound.warning("indexnow submission dropped: the target no longer submits")
            self._report(row.target_name, "expired", len(row.urls))
            return
        if now >= row.created_at + timedelta(seconds=MAX_AGE):
            await asyncio.to_thread(self.repo.mark_failed, row, now,
                                    f"expired: not delivered within {MAX_AGE / 86400:g} days")
            bound.error("indexnow submission expired before delivery")
            self._report(row.target_name, "expired", len(row.urls))
            return
        held = self._held.get(settings.endpoint)
        if held is not None and held > now:  # the endpoint asked us to wait (429)
            await asyncio.to_thread(self.repo.mark_retry, row, now, held,
                                    f"waiting for {settings.endpoint} (429 Retry-After)",
                                    attempted=False)
            return
        location = indexnow.key_location(row.origin, settings.key, settings.key_location)
        problem = await self._key_problem(target, row.origin, settings.key, location)
        if problem is not None:
            message = indexnow.key_message(row.origin, location, problem)
            await asyncio.to_thread(
                self.repo.mark_retry, row, now, now + timedelta(seconds=indexnow.KEY_RETRY),
                f"{indexnow.KEY_RULE}: {message}", attempted=False)
            self._report(row.target_name, "key_missing", len(row.urls))
            return
        await self._post(row, target, settings.key, location, bound)

    async def _post(self, row: store.Claimed, target: Target, key: str, location: str,
                    bound: structlog.typing.FilteringBoundLogger) -> None:
        settings = target.settings
        endpoint = settings.indexnow.endpoint
        body = indexnow.payload(indexnow.Batch(row.origin, row.urls), key, location)
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self._transport, trust_env=False,
                                             follow_redirects=False)
        try:
            answer = await self._client.post(
                endpoint, json=body, timeout=httpx.Timeout(
                    settings.timeout, connect=settings.connect_timeout),
                headers={"User-Agent": settings.user_agent,
                         "Content-Type": "application/json; charset=utf-8"})
        except httpx.HTTPError as exc:
            error = f"no answer from {endpoint}: {exc.__class__.__name__} {exc}".strip()
            await self._retry(row, None, None, error, bound)
            return
        retry_after = retry_after_seconds(answer.headers.get("retry-after"))
        verdict = indexnow.answer(answer.status_code, answer.text, retry_after)
        now = self.clock()
        if verdict.outcome == "delivered":
            kept = await asyncio.to_thread(self.repo.mark_delivered, row, now,
                                           answer.status_code, verdict.message)
            if not kept:
                bound.warning("lease lost before the submission was recorded; it may repeat")
            bound.info("indexnow submission delivered", status=answer.status_code)
            self._report(row.target_name, "submitted", len(row.urls))
        elif verdict.outcome == "failed":
            await asyncio.to_thread(self.repo.mark_failed, row, now, verdict.message,
                                    answer.status_code)
            bound.error("indexnow submission refused", endpoint=endpoint,
                        status=answer.status_code, answer=verdict.message)
            self._report(row.target_name, "rejected", len(row.urls))
        else:
            if answer.status_code == 429:
                wait = verdict.retry_after or self._backoff(row.attempts + 1)
                self._held[endpoint] = now + timedelta(seconds=wait)
            await self._retry(row, answer.status_code, verdict.retry_after, verdict.message,
                              bound)

    async def _retry(self, row: store.Claimed, status: int | None, retry_after: float | None,
                     error: str, bound: structlog.typing.FilteringBoundLogger) -> None:
        now = self.clock()
        delay = retry_after if retry_after is not None else self._backoff(row.attempts + 1)
        await asyncio.to_thread(self.repo.mark_retry, row, now,
                                now + timedelta(seconds=delay), error, status)
        bound.warning("indexnow submission not delivered; will retry", error=error,
                      retry_in=round(delay, 3))
        self._report(row.target_name, "retry", len(row.urls))

    def _backoff(self, attempt: int) -> float:
        return deliveryloop.backoff(attempt, _INITIAL_BACKOFF, _MAX_BACKOFF, self._rng)

    async def _key_problem(self, target: Target, origin: str, key: str,
                           location: str) -> str | None:
        """Why the origin's key file does not prove the key (None: it does), fetched when
        the last fetch is older than a day (or 15 minutes, when it failed) or was of
        another key or location."""
        lock = self._key_locks.setdefault((target.name, origin), asyncio.Lock())
        async with lock:  # one fetch for the rows of one host claimed together
            digest = store.key_digest(key)
            now = self.clock()
            last = await asyncio.to_thread(self.repo.key, target.name, origin)
            if last is not None and last.key_digest == digest and last.location == location:
                ttl = indexnow.KEY_TTL if last.ok else indexnow.KEY_RETRY
                if now < last.checked_at + timedelta(seconds=ttl):
                    return None if last.ok else (last.detail or "failed")
            problem = await self._fetch_key(target, key, location)
            await asyncio.to_thread(self.repo.save_key, target.name, store.KeyState(
                origin, location, digest, self.clock(), problem is None, problem))
        if problem is None:
            log.info("indexnow key file verified", target=target.name, host=origin,
                     location=location)
        else:
            log.error("indexnow key file not verified", target=target.name, host=origin,
                      rule=indexnow.KEY_RULE,
                      error=indexnow.key_message(origin, location, problem))
        return problem

    async def _fetch_key(self, target: Target, key: str, location: str) -> str | None:
        allow_private = (target.settings.allow_private
                         or await is_private_target(target.url))
        try:
            got = await self.fetcher.probe(location, target.settings, body_limit=1024,
                                           allow_private=allow_private)
        except FetchError as exc:
            return f"no answer: {exc.message}"
        return indexnow.key_file_problem(got.status, got.head, key)

    def _report(self, target: str, outcome: str, urls: int) -> None:
        if self.on_result is not None:
            deliveryloop.report(log, functools.partial(self.on_result, target, outcome, urls))
