"""WHEN the daemon checks listed URLs: rounds of a few URLs per target, leased.

For each target whose ``url_checks.enabled`` is set, the daemon runs one round at a time: it
takes the target's URL-check lease in the database (``urlstates.claim``: one replica at a
time, so no URL is checked twice in a period and a host's ``rate`` holds across replicas),
checks the next due URLs (``urlcheck.run_round``: new URLs first, then the rest in a random
order until each was checked once, then the oldest), gives the lease back and reports to the
metrics (the counts, and the estimate of each state's share) and the alert rules. A round is
sized to last about a quarter of a lease at the target's rate. A target with nothing due is
looked at again after ``IDLE`` seconds (``FIRST`` before its first snapshot); a round that
raises is logged and tried again after ``IDLE``; it never stops the others.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable
from contextlib import suppress
from datetime import datetime
from functools import partial

import structlog
from sqlalchemy import Engine

from monitor import config
from monitor.core.errors import MonitorError
from monitor.core.model import utcnow
from monitor.observe.metrics import Metrics
from monitor.read.fetch import Fetcher
from monitor.robots import reader as robotsread
from monitor.store import urlsample, urlstates
from monitor.urlhealth import checker as urlcheck

__all__ = ["UrlChecks"]

log = structlog.get_logger("monitor.urlhealth.rounds")
TICK = 1.0  # how often the loop looks for a target to start a round of
IDLE = 10.0  # a target with nothing due, or whose round failed, waits this long
FIRST = 2.0  # a target not checked yet is looked at again this soon
MAX_BATCH = 1000


def batch_size(target: config.Target, lease: float) -> int:
    """URLs in one round: about a quarter of a lease's worth at the target's rate."""
    return max(1, min(MAX_BATCH, math.floor(target.settings.url_checks.rate * lease / 4)))


class UrlChecks:
    """The URL checks of the targets that enable them, a round at a time per target."""

    def __init__(self, *, engine: Engine, fetcher: Fetcher, metrics: Metrics, owner: str,
                 lease: float, concurrency: int = 4, alerts: config.Alerts | None = None,
                 robots: robotsread.RobotsCache | None = None) -> None:
        self._engine = engine
        self._fetcher = fetcher
        self._metrics = metrics
        self._owner = owner
        self._lease = lease
        self._slots = asyncio.Semaphore(concurrency)
        self.alerts = alerts
        self._targets: dict[str, config.Target] = {}
        # one for every target: two targets on one host share its rate (the slower one's
        # turns are the longer ones)
        self._budget = urlcheck.Budget()
        # robots.txt read once a day per host, not once a round, unless a check reads a newer
        # one (the daemon's checks share this cache)
        self._robots = robotsread.RobotsCache() if robots is None else robots
        # per target, the robots.txt versions its URL states were last judged against
        self._judged: dict[str, dict[str, str]] = {}
        self._next: dict[str, float] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False

    def update(self, targets: Iterable[config.Target]) -> None:
        """Apply a (re)loaded target list: the enabled targets are checked from now on."""
        self._targets = {t.name: t for t in targets if t.settings.url_checks.enabled}
        self._metrics.set_url_targets(self._targets)

    def start(self, targets: Iterable[config.Target]) -> None:
        self.update(targets)
        self._loop = asyncio.create_task(self._run())

    async def stop(self, grace: float) -> None:
        """Start no round; let running ones finish within ``grace`` seconds, cancel the rest."""
        self._stopping = True
        if self._loop is not None:
            self._loop.cancel()
            with suppress(asyncio.CancelledError):
                await self._loop
        running = set(self._running.values())
        if running:
            _done, pending = await asyncio.wait(running, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.wait(running, timeout=5)

    async def _run(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            for name, target in list(self._targets.items()):
                if name in self._running or self._next.get(name, 0.0) > now:
                    continue
                task = asyncio.create_task(self._round(target))
                self._running[name] = task
                task.add_done_callback(partial(self._done, name))
            self._budget.forget(time.monotonic() - 3600)
            self._robots.forget(utcnow())
            await asyncio.sleep(TICK)

    def _done(self, name: str, _task: asyncio.Task[None]) -> None:
        self._running.pop(name, None)

    async def _round(self, target: config.Target) -> None:
        name = target.name
        wait = 0.0
        async with self._slots:
            if self._stopping:
                return
            try:
                wait = await self._claimed_round(target)
            except (MonitorError, OSError) as exc:
                log.warning("url check round failed", target=name, error=str(exc))
                wait = IDLE
            except Exception:
                log.exception("url check round failed", target=name)
                wait = IDLE
            finally:
                self._next[name] = time.monotonic() + wait

    async def _claimed_round(self, target: config.Target) -> float:
        """One round under the lease; return how long the target waits before the next."""
        name = target.name
        target_id = await asyncio.to_thread(urlstates.target_id, self._engine, name)
        if target_id is None:
            return FIRST  # not registered yet
        now: datetime = utcnow()
        if not await asyncio.to_thread(urlstates.claim, self._engine, target_id, self._owner, now,
                                       self._lease):
            # Another replica's round: this one's gauges follow the database all the same, so
            # every replica's /metrics says the same.
            counted = await asyncio.to_thread(urlsample.counts, self._engine, target_id, now,
                                              target.settings.url_checks.recheck)
            self._metrics.observe_urls(name, {}, counted.states, counted.listed,
                                       counted.covered, counted.strata)
            return IDLE / 3
        try:
            with structlog.contextvars.bound_contextvars(target=name):
                found = await urlcheck.run_round(
                    target, engine=self._engine, fetcher=self._fetcher,
                    budget=self._budget, now=utcnow, robots=self._robots,
                    limit=batch_size(target, self._lease), alerts=self.alerts,
                    judged=self._judged.setdefault(name, {}))
        finally:
            await asyncio.shield(asyncio.to_thread(urlstates.release, self._engine, target_id,
                                                   self._owner))
        if found is None:
            return FIRST  # no snapshot yet: no URL set
        self._metrics.observe_urls(name, found.outcomes, found.states, found.listed,
                                   found.covered, found.strata)
        if found.checked:
            log.info("url checks", checked=found.checked, transitions=found.transitions,
                     seconds=round(found.seconds, 2))
            return 0.0
        return IDLE
