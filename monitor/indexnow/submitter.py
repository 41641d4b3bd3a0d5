"""The IndexNow delivery loop: claim due submissions, keep them to the target's scope, verify
the host's key file, POST them.

Delivery is at-least-once and, for a change set, once: a row is marked only after the endpoint
answered, so a crash between the two repeats that one request; a check that ran again writes
no new row for changes already written (their idempotency key). A row's URLs outside the
target's scope (``monitor.indexnow.keys``) are cut from it and counted ``out_of_scope`` once,
at its first claim; a row of an origin outside it is settled without a request, its host never
asked for the key. While a
host's key file does not answer 200 with the key, nothing is sent for that host and its rows
wait. The endpoint is posted to through the shared ``Fetcher`` (the address rules, an answer
read to a bound). A 429 holds every row for its endpoint until its ``Retry-After``; 400, 403
and 422 are permanent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

import structlog

from monitor.config import Target
from monitor.core.errors import FetchError
from monitor.indexnow import keys
from monitor.indexnow import protocol as indexnow
from monitor.net import deliveryloop
from monitor.read.fetch import Fetcher, retry_after_seconds
from monitor.store import indexnowrows

__all__ = ["Submitter"]

log = structlog.get_logger("monitor.indexnow.submitter")

MAX_AGE = indexnow.MAX_AGE
PRUNE_EVERY = 3600.0
SWEEP_EVERY = 60.0  # how often the key files of every submitting target are looked at
_INITIAL_BACKOFF = 10.0
_MAX_BACKOFF = 1800.0

# (target, outcome, URLs): sitemap_monitor_indexnow_urls_total
OnResult = Callable[[str, str, int], None]


class Submitter:
    """Delivers pending IndexNow submissions until stopped; one HTTP client for every
    endpoint. ``target_of`` gives a configured target by name at each delivery (a reload
    takes effect on the next row); ``targets`` gives every configured target, whose key
    files are verified before anything is due."""

    def __init__(
        self,
        target_of: Callable[[str], Target | None],
        repo: indexnowrows.SqlSubmissions,
        fetcher: Fetcher,
        *,
        owner: str,
        on_result: OnResult | None = None,
        targets: Callable[[], Iterable[Target]] | None = None,
        poll_interval: float = 1.0,
        concurrency: int = 4,
        clock: Callable[[], datetime] | None = None,
        rng: random.Random | None = None,
        lease: float = 300.0,
    ) -> None:
        self.target_of = target_of
        self.repo = repo
        self.fetcher = fetcher
        self.on_result = on_result
        self.clock = clock or (lambda: datetime.now(UTC))
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._held: dict[str, datetime] = {}  # endpoint -> no request before (its 429)
        self.targets = targets
        self.keys = keys.Keys(repo, fetcher, self.clock)
        # The lease is past one key file fetch and one POST, each within a target's timeout.
        self.leasing = deliveryloop.Leasing(owner, lease, concurrency, poll_interval)

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop`` is set; store errors are logged and retried, never raised."""
        pruned_at = swept_at = -PRUNE_EVERY
        sweeping: asyncio.Task[None] | None = None

        async def one_pass() -> int:
            nonlocal pruned_at, swept_at, sweeping
            if time.monotonic() - pruned_at >= PRUNE_EVERY:
                pruned_at = time.monotonic()
                await self.prune()
            # Key files are fetched beside the deliveries, so a slow host delays neither.
            if time.monotonic() - swept_at >= SWEEP_EVERY and (
                    sweeping is None or sweeping.done()):
                swept_at = time.monotonic()
                sweeping = asyncio.create_task(self.sweep())
            return await self.deliver_due()

        try:
            await deliveryloop.run(one_pass, stop, self.leasing, log=log,
                                   failed="indexnow pass failed")
        finally:
            if sweeping is not None:
                sweeping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeping

    async def sweep(self) -> None:
        """Verify the key file of every host of every submitting target that is due for it;
        a failure (the database, say) is logged, and the next sweep tries again."""
        if self.targets is None:
            return
        try:
            await self.keys.sweep(self.targets())
        except Exception:  # the loop outlives any one sweep
            log.exception("indexnow key files not swept")

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

    async def _deliver(self, row: indexnowrows.Claimed) -> None:
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
        urls = await self._in_scope(row, target, location, bound)
        if not urls:
            return
        problem = await self.keys.problem(target, row.origin, settings.key, location)
        if problem is not None:
            message = indexnow.key_message(row.origin, location, problem, settings.key)
            await asyncio.to_thread(
                self.repo.mark_retry, row, now, now + timedelta(seconds=indexnow.KEY_RETRY),
                f"{indexnow.KEY_RULE}: {message}", attempted=False)
            self._report(row.target_name, "key_missing", len(urls))
            return
        await self._post(row, urls, target, settings.key, location, bound)

    async def _in_scope(self, row: indexnowrows.Claimed, target: Target, location: str,
                        bound: structlog.typing.FilteringBoundLogger) -> tuple[str, ...]:
        """The row's URLs the target may submit; the rest are counted ``out_of_scope`` once:
        the row is cut to the URLs it may submit (a retry neither sends nor counts the rest
        again), and a row with none is settled here, without a request (its host never asked
        for the key). Either write is made under the row's lease, so of two replicas one
        counts."""
        scope = await self.keys.scope(target, row.origin)
        inside, outside = scope.split(row.origin, row.urls, location)
        if not outside:
            return inside
        if inside:
            if not await asyncio.to_thread(self.repo.narrow, row, inside):
                bound.warning("lease lost before the submission was cut to its scope")
                return ()
            self._report(row.target_name, "out_of_scope", len(outside))
            return inside
        why = (f"out of scope: {row.origin} is not the origin of one of the target's sitemaps"
               if not scope.covers(row.origin) else
               f"out of scope: no URL under the folder of the key file "
               f"{indexnow.folder(location)}")
        if await asyncio.to_thread(self.repo.mark_failed, row, self.clock(), why):
            self._report(row.target_name, "out_of_scope", len(outside))
        bound.warning("indexnow submission not sent", error=why)
        return ()

    async def _post(self, row: indexnowrows.Claimed, urls: tuple[str, ...], target: Target,
                    key: str, location: str,
                    bound: structlog.typing.FilteringBoundLogger) -> None:
        settings = target.settings
        endpoint = settings.indexnow.endpoint
        body = indexnow.payload(indexnow.Batch(row.origin, urls), key, location)
        # The endpoint is fetched as the target's sitemaps are: under the address rules, its
        # answer read to a bound.
        try:
            answer = await self.fetcher.post(
                endpoint, settings, content=json.dumps(body).encode(),
                headers={"Content-Type": "application/json; charset=utf-8"},
                allow_private=await keys.allow_private(target))
        except FetchError as exc:
            error = f"no answer from {endpoint}: {exc.message}"
            if exc.kind == "address-blocked":
                await asyncio.to_thread(self.repo.mark_failed, row, self.clock(), error)
                bound.error("indexnow submission refused", endpoint=endpoint, error=error)
                self._report(row.target_name, "rejected", len(urls))
                return
            await self._retry(row, urls, None, None, error, bound)
            return
        retry_after = retry_after_seconds(answer.headers.get("retry-after"))
        said = answer.text(260) + (" ... (the answer was cut at its bound)" if answer.cut else "")
        verdict = indexnow.answer(answer.status, said, retry_after)
        now = self.clock()
        if verdict.outcome == "delivered":
            kept = await asyncio.to_thread(self.repo.mark_delivered, row, now,
                                           answer.status, verdict.message)
            if not kept:
                bound.warning("lease lost before the submission was recorded; it may repeat")
            bound.info("indexnow submission delivered", status=answer.status)
            self._report(row.target_name, "submitted", len(urls))
        elif verdict.outcome == "failed":
            await asyncio.to_thread(self.repo.mark_failed, row, now, verdict.message,
                                    answer.status)
            bound.error("indexnow submission refused", endpoint=endpoint,
                        status=answer.status, answer=verdict.message)
            self._report(row.target_name, "rejected", len(urls))
        else:
            if answer.status == 429:
                wait = verdict.retry_after or self._backoff(row.attempts + 1)
                self._held[endpoint] = now + timedelta(seconds=wait)
            await self._retry(row, urls, answer.status, verdict.retry_after,
                              verdict.message, bound)

    async def _retry(self, row: indexnowrows.Claimed, urls: tuple[str, ...], status: int | None,
                     retry_after: float | None, error: str,
                     bound: structlog.typing.FilteringBoundLogger) -> None:
        now = self.clock()
        delay = retry_after if retry_after is not None else self._backoff(row.attempts + 1)
        await asyncio.to_thread(self.repo.mark_retry, row, now,
                                now + timedelta(seconds=delay), error, status)
        bound.warning("indexnow submission not delivered; will retry", error=error,
                      retry_in=round(delay, 3))
        self._report(row.target_name, "retry", len(urls))

    def _backoff(self, attempt: int) -> float:
        return deliveryloop.backoff(attempt, _INITIAL_BACKOFF, _MAX_BACKOFF, self._rng)

    def _report(self, target: str, outcome: str, urls: int) -> None:
        if self.on_result is not None:
            deliveryloop.report(log, functools.partial(self.on_result, target, outcome, urls))
