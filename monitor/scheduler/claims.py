"""The scheduler's edge at the database: register the targets, claim the due ones, keep each
lease while its check runs, give it back after.

A lease is given back in the check's own transaction when the check stores (the pipeline does
that); ``release`` is for every other end of a run. A release the database refused is retried
until the lease would have ended by itself, so that a target is free again early.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import suppress
from datetime import datetime

import structlog
from sqlalchemy import Engine

from monitor.core.errors import MonitorError
from monitor.scheduler.timing import Clock
from monitor.store import targetrows

__all__ = ["Claims"]

log = structlog.get_logger("monitor.scheduler")


class Claims:
    """One replica's claims on targets in the database, under its ``owner`` name."""

    def __init__(self, engine: Engine, owner: str, lease: float, clock: Clock) -> None:
        self._engine = engine
        self._owner = owner
        self._lease = lease
        self._clock = clock
        # Claims name the configured targets only once a claim got one this replica does not
        # know (another replica's configuration is newer: a rollout); else any unparked target
        # is one of this replica's, and the claim reads only the due ones, by their index.
        self._configured = targetrows.configured(())
        self._listed = False
        # Releases that failed and are retried (see release), by target.
        self._retries: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}
        self._closing = False

    def lease(self, name: str, next_due: datetime) -> targetrows.Lease:
        """The lease a check of ``name`` gives back when it stores, with its next due time."""
        return targetrows.Lease(name, self._owner, next_due)

    async def register(self, rows: Sequence[tuple[str, str, datetime]], now: datetime) -> None:
        """Make the stored targets these (name, url, first due time): the rest are parked."""
        await asyncio.to_thread(targetrows.upsert_targets, self._engine, rows, now)

    def configure(self, configured: str) -> None:
        """The targets of this replica's configuration now (``targetrows.configured``)."""
        self._configured = configured
        self._listed = False

    def unknown(self, name: str) -> None:
        """A claim got a target this replica's configuration does not name: claim only the
        configured targets from now on."""
        if not self._listed:
            log.warning("a due target is not in this replica's configuration: another "
                        "replica's is newer; claiming only the configured targets", target=name)
            self._listed = True

    async def claim(self, now: datetime, limit: int) -> list[tuple[str, datetime | None]]:
        """Claim up to ``limit`` due, free targets, longest-due first: each claimed name with
        the time it was due."""
        return await asyncio.to_thread(
            targetrows.claim_due, self._engine, self._configured if self._listed else None,
            self._owner, now, lease=self._lease, limit=limit)

    async def next_due(self, now: datetime) -> datetime | None:
        """When the next free target comes due after ``now``, or None."""
        return await asyncio.to_thread(targetrows.next_due, self._engine, now)

    async def keep(self, name: str) -> None:
        """Renew the lease on ``name`` until cancelled (its check ends) or lost."""
        # Renew well before expiry so a long check is never taken over by another replica.
        while True:
            await asyncio.sleep(self._lease / 3)
            try:
                kept = await asyncio.to_thread(
                    targetrows.renew, self._engine, name, self._owner, self._clock(),
                    lease=self._lease)
            except MonitorError as exc:
                log.warning("lease renewal failed", target=name, error=str(exc))
                continue
            if not kept:
                log.warning("lease lost during a check", target=name)
                return

    async def release(self, name: str, next_due: datetime | None) -> None:
        """Give the lease on ``name`` back, due again at ``next_due`` (None: as due as it was)."""
        try:
            await asyncio.to_thread(
                targetrows.release, self._engine, name, self._owner, next_due_at=next_due
            )
        except MonitorError as exc:
            # The lease would expire by itself; a database that cannot be written now (a full
            # disk) may be soon, so try again meanwhile and free the target early.
            log.warning("lease release failed; retrying until the lease ends", target=name,
                        error=str(exc))
            stop = asyncio.Event()
            retry = asyncio.create_task(self._release_later(name, next_due, stop))
            self._retries[name] = (retry, stop)
            retry.add_done_callback(lambda _: self._retries.pop(name, None))

    async def _release_later(self, name: str, next_due: datetime | None,
                             stop: asyncio.Event) -> None:
        """Retry a failed release until it succeeds, the lease ends or ``stop`` is set (the
        target runs again here: a late release must never give back a newer lease)."""
        give_up = asyncio.get_running_loop().time() + self._lease
        delay = 0.5
        while asyncio.get_running_loop().time() + delay < give_up and not self._closing:
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                return
            with suppress(MonitorError):
                await asyncio.to_thread(
                    targetrows.release, self._engine, name, self._owner, next_due_at=next_due)
                log.info("lease released on retry", target=name)
                return
            delay = min(delay * 2, self._lease / 6)

    async def settle(self, name: str) -> None:
        """Stop a pending retry of this target's release and wait for its last attempt."""
        pending = self._retries.get(name)
        if pending is not None:
            retry, stop = pending
            stop.set()
            await asyncio.wait([retry])

    def close(self) -> None:
        """The daemon is stopping: a release being retried tries at most once more."""
        self._closing = True

    def abandon_retries(self) -> None:
        """Stop every release being retried (their leases end by themselves)."""
        for _retry, stop in list(self._retries.values()):
            stop.set()
