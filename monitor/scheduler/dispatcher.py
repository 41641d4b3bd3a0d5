"""The dispatcher: claims due targets into free slots, runs their checks, plans its next wake.

The parts it composes: ``timing`` (when to wake, when a target is next due), ``claims`` (the
database: claim, keep and give back leases), ``runs`` (the slots) and ``report`` (the check's
log line and metrics).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from sqlalchemy import Engine

from monitor import config
from monitor.core.errors import LeaseLost, MonitorError
from monitor.core.model import CheckResult, utcnow
from monitor.observe.metrics import Metrics
from monitor.scheduler import report
from monitor.scheduler.claims import Claims
from monitor.scheduler.runs import Runs
from monitor.scheduler.timing import GATHER, Clock, Wakes, after
from monitor.store import targetrows

__all__ = ["CheckFn", "Scheduler"]

# A check of one target under a lease: a result with a snapshot id was stored, and the lease
# given back with the target's next due time in the same transaction (targetrows.give_back).
CheckFn = Callable[[config.Target, targetrows.Lease], Awaitable[CheckResult]]
log = structlog.get_logger("monitor.scheduler")
# Targets applied between two passes of the event loop in ``update`` (about 0.1 s of work).
_SLICE = 50
_DISPATCH = "dispatch"


class Scheduler:
    """Runs the targets' checks when due, claimed in batches through the database."""

    def __init__(
        self,
        *,
        engine: Engine,
        check: CheckFn,
        metrics: Metrics,
        owner: str,
        settings: config.Scheduler,
        clock: Clock = utcnow,
    ) -> None:
        self._check = check
        self._metrics = metrics
        self._clock = clock
        self._claims = Claims(engine, owner, settings.lease, clock)
        self._runs = Runs(settings.concurrency)
        self._wakes = Wakes()
        self._lateness = report.Lateness(settings.concurrency)
        self._aps = AsyncIOScheduler(timezone=UTC)
        self._targets: dict[str, config.Target] = {}
        self._removed: set[str] = set()  # by the last reload
        self._due: dict[str, datetime] = {}  # the next due times this replica's checks set
        self._dispatching = False
        self._stopping = False
        self._started = False

    @property
    def running(self) -> bool:
        """Whether checks are being scheduled (False once stopping)."""
        return self._aps.running and not self._stopping

    @property
    def alive(self) -> bool:
        """What /healthz says: starting or running, not stopping (nor stopped under us)."""
        return not self._stopping and (self._aps.running or not self._started)

    @property
    def in_flight(self) -> int:
        """How many claimed checks are running now."""
        return self._runs.checking

    def target_names(self) -> list[str]:
        """The names of the scheduled targets."""
        return list(self._targets)

    async def start(self, targets: Iterable[config.Target]) -> None:
        """Register the targets in the database and start claiming the due ones."""
        self._started = True
        self._aps.start()
        self._lateness.restart(asyncio.get_running_loop().time())
        await self.update(targets)
        self._wake_at(self._clock())

    async def update(self, targets: Iterable[config.Target]) -> None:
        """Apply a (re)loaded target list: the targets this replica claims from now on.

        A new target is due now; a known one keeps the due time in the database. The metric
        series are made in slices of ``_SLICE`` targets with a pass of the event loop between
        them: a reload to 10,000 targets costs seconds of CPU and must not
        hold the loop, which also answers /healthz, that long.
        """
        new = {t.name: t for t in targets}
        now = self._clock()
        # due now: whoever starts the daemon sees its first checks at once (a replica still
        # claims each); the jitter spreads the checks after the first
        rows = [(t.name, t.url, now) for t in new.values()]
        configured = await asyncio.to_thread(targetrows.configured, new)
        await self._claims.register(rows, now)
        self._removed = set(self._targets) - set(new)
        for count, name in enumerate(self._removed, 1):
            self._due.pop(name, None)
            log.info("target removed", target=name)
            if count % _SLICE == 0:
                await asyncio.sleep(0)
        self._targets = new
        self._claims.configure(configured)
        for _ in self._metrics.set_targets_in_steps(new, _SLICE):
            await asyncio.sleep(0)
        self._metrics.set_intervals({n: t.settings.interval for n, t in new.items()})
        if self._started:
            self._wake_at(self._clock())

    def next_run_time(self, name: str) -> datetime | None:
        """When a target is next due, as far as this replica knows (its own checks set it)."""
        return self._due.get(name) if name in self._targets else None

    async def stop(self, grace: float) -> int:
        """Start no new check; wait ``grace`` seconds for running ones, cancel the rest.

        Returns how many checks were cancelled.
        """
        self._stopping = True
        self._claims.close()
        if self._aps.running:
            with suppress(LookupError):
                self._aps.remove_job(_DISPATCH)
        if self._runs.checking:
            log.info("waiting for running checks", checks=self._runs.checking,
                     grace_seconds=grace)
        cancelled = await self._runs.finish_checks(grace)
        self._claims.abandon_retries()
        # Runs that have not begun their check yet see the stop, give the lease back and end.
        await self._runs.wait(10)
        if self._aps.running:
            self._aps.shutdown(wait=False)
        return cancelled

    # ---- the dispatcher ------------------------------------------------------------------

    def _wake_at(self, due: datetime) -> None:
        """Have the dispatcher run for work due at ``due`` (as ``Wakes.wake_for`` says)."""
        if self._stopping or not self._aps.running:
            return
        self._wakes.add(due)
        if self._dispatching:
            return  # it plans its next run when it ends, from the wakes
        job = self._aps.get_job(_DISPATCH)
        if job is None:
            self._plan(None)
            return
        at = self._wakes.wake_for(due)
        if job.next_run_time is None or job.next_run_time > at:
            job.modify(next_run_time=at)

    def _plan(self, served: datetime | None, upcoming: datetime | None = None) -> None:
        """Set the dispatcher's next run (as ``Wakes.next_run`` says)."""
        if self._stopping or not self._aps.running:
            return
        at = self._wakes.next_run(self._clock(), served, upcoming)
        # Two instances: a wake may fire while the dispatch that planned it is ending; the
        # second returns at once (APScheduler would log each such overlap as a warning).
        self._aps.add_job(
            self._dispatch, DateTrigger(run_date=at, timezone=UTC), id=_DISPATCH,
            name=_DISPATCH, misfire_grace_time=None, max_instances=2, replace_existing=True)

    async def _dispatch(self) -> None:
        """Claim as many due targets as there are free slots and start their checks."""
        if self._stopping or self._dispatching:
            return
        self._dispatching = True
        began = self._wakes.dispatched = self._clock()
        upcoming: datetime | None = None
        short = False
        try:
            while not self._stopping and self._targets:
                free = self._runs.free
                if free <= 0:
                    break
                now = self._clock()
                try:
                    got = await self._claims.claim(now, free)
                except MonitorError as exc:
                    log.warning("claim failed", error=str(exc))
                    break
                self._metrics.claimed(len(got))
                for name, due in got:
                    self._begin(name, now, due)
                self._wakes.claimed(now, free, (due for _, due in got))
                if len(got) < free:
                    short = True
                    break  # nothing more is due now
            # When nothing more is due now, when is the next free target due? Not when the
            # slots are full: then due work is waiting, and a freed slot claims it.
            if short and not self._stopping:
                try:
                    upcoming = await self._claims.next_due(self._clock())
                except MonitorError as exc:
                    log.warning("reading the next due time failed", error=str(exc))
        finally:
            self._dispatching = False
            self._plan(began, upcoming)

    def _begin(self, name: str, claimed_at: datetime, due: datetime | None) -> None:
        """Start the check of a target just claimed."""
        target = self._targets.get(name)
        if name in self._runs:
            # Its lease ran out under a check of it here (paused past it) and no other replica
            # holds it now. That check gives this lease back when it stores, unless another
            # replica stored a check of the target meanwhile: then it stores nothing
            # (store.checkplan) and the target is released when it ends.
            return
        if target is None and name in self._removed:
            # Removed by a reload while the claim was in the database: parked, as it would be.
            self._runs.spawn(self._claims.release(name, targetrows.PARKED))
            return
        if target is None:
            # Another replica's configuration names it and this one's does not: leave it to
            # them, as due as it was, and claim only this configuration's targets from now on.
            self._claims.unknown(name)
            self._runs.spawn(self._claims.release(name, None))
            return
        if self._stopping:
            self._runs.spawn(self._claims.release(name, None))
            return
        if due is not None:
            self._lateness.count((claimed_at - due).total_seconds(),
                                 asyncio.get_running_loop().time())
        self._runs.start(name, self._run(target, claimed_at))

    # ---- one run: from its claim to its lease given back ------------------------------------

    async def _run(self, target: config.Target, claimed_at: datetime) -> None:
        task = asyncio.current_task()
        assert task is not None
        name = target.name
        try:
            await self._claims.settle(name)
            if not self._stopping:
                await self._claimed(target, claimed_at, task)
            else:
                await asyncio.shield(self._claims.release(name, claimed_at))
        except asyncio.CancelledError:
            # Only stop() cancels, and the task ends here; nothing was half-written.
            log.warning("check cancelled at shutdown", target=name)
        finally:
            self._runs.ended(name)
            # A slot is free: if due targets were left for want of one, claim again (with the
            # slots freed meanwhile). Else nothing is due before a known due time or a poll.
            if self._wakes.behind:
                self._wake_at(self._clock() + GATHER)

    async def _claimed(
        self, target: config.Target, claimed_at: datetime, task: asyncio.Task[Any]
    ) -> None:
        """Check a claimed target and give its lease back with its next due time."""
        name = target.name
        self._runs.check_began(task)
        heartbeat = asyncio.create_task(self._claims.keep(name))
        # Anchored at the claim: a 10-minute target is checked every 10 minutes (plus jitter)
        # however long its checks take.
        next_due = after(claimed_at, target)
        handed_back = False
        try:
            with structlog.contextvars.bound_contextvars(target=name):
                pushed, handed_back = await self._checked(
                    target, self._claims.lease(name, next_due))
            next_due = pushed or next_due
        except asyncio.CancelledError:
            # The check did not happen (or committed whole): due again now, for any replica.
            # If it did commit, the lease is back already and this release changes nothing.
            next_due = claimed_at
            raise
        finally:
            self._runs.check_ended(task)
            heartbeat.cancel()
            if name not in self._targets:
                next_due = targetrows.PARKED  # removed by a reload while it ran
            if not handed_back:
                await asyncio.shield(self._claims.release(name, next_due))
            if name in self._targets and not self._stopping:
                self._due[name] = next_due
                self._wake_at(next_due)

    async def _checked(
        self, target: config.Target, lease: targetrows.Lease
    ) -> tuple[datetime | None, bool]:
        """Run one check and report it.

        Returns a due time (only when the check raised) and whether the check stored its
        snapshot, which gave the lease back in the same transaction.
        """
        started = self._clock()
        try:
            result = await self._check(target, lease)
        except LeaseLost:
            # Paused past the lease (SIGSTOP, a frozen VM): another replica has the target and
            # checks it; this check wrote nothing and is no check at all, not a failed one.
            log.warning("lease lost: the check is rolled back",
                        seconds=round((self._clock() - started).total_seconds(), 3))
            self._metrics.lease_lost()
            return None, False
        except Exception as exc:
            # One bad target never stops the others: push this target one interval on and carry on
            # with the others.
            log.exception("check raised", error=f"{exc.__class__.__name__}: {exc}")
            finished = self._clock()
            if target.name in self._targets:  # see below
                self._metrics.observe(report.failed(target, exc, started, finished),
                                      target.name, finished_at=finished)
            return after(finished, target, jittered=False), False
        # A reload that removed the target while it ran has removed its series: observing
        # now would bring them back, for a target no longer configured, until the restart.
        report.report(result, target.name, self._metrics, finished_at=self._clock(),
                      observe=target.name in self._targets)
        return None, result.snapshot_id is not None
