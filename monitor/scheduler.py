"""WHEN checks run: one APScheduler job per target, claims in the database, graceful stop.

Every replica schedules every target locally (interval plus jitter, never two at once); before
a check it claims the target in the database (``store.daemon.claim``), so across replicas each
due check runs once. A target's job is paused from the moment it fires until its run is over
(waiting for a concurrency slot included), then resumes on its interval: a daemon that is behind
does not re-fire the jobs that are already waiting. A replica that loses a claim moves its local
job to the time the target is next claimable, so replicas converge on the due time instead of
polling. Claims that wait at the same time are taken together, in one statement (the database's
write lock and round trips are the cost of a check that finds nothing new). The check gives the
lease back in its own transaction; a check that raises or is cancelled gives it back on its own.
A check that raises is logged with its exception and pushed one interval on; it never stops the
other targets (STYLE 10). ``stop`` lets in-flight checks finish within a grace period and cancels
the rest; a cancelled check writes nothing because the pipeline commits atomically.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy import Connection, Engine

from monitor import config
from monitor.errors import LeaseLost, MonitorError
from monitor.metrics import Metrics
from monitor.model import CheckResult
from monitor.store import daemon as store

__all__ = ["CheckFn", "Clock", "InTransaction", "Scheduler", "utcnow"]

InTransaction = Callable[[Connection], None]
# A check of one target; it runs the hook in the transaction that stores its snapshot, just
# before that transaction commits (pipeline.run_check's ``in_transaction``).
CheckFn = Callable[[config.Target, InTransaction], Awaitable[CheckResult]]
Clock = Callable[[], datetime]
log = structlog.get_logger("monitor.scheduler")
# Targets applied between two passes of the event loop in ``update`` (about 0.1 s of work).
_SLICE = 50


def utcnow() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)


def _jitter(target: config.Target) -> float:
    return target.settings.interval * target.settings.jitter


def _timing(target: config.Target) -> tuple[float, float]:
    return target.settings.interval, _jitter(target)


class _Claims:
    """Claims in batches: whatever waits while one batch is in the database goes in the next."""

    def __init__(self, engine: Engine, owner: str, lease: float, clock: Clock) -> None:
        self._engine = engine
        self._owner = owner
        self._lease = lease
        self._clock = clock
        self._waiting: list[tuple[str, float, asyncio.Future[datetime | None]]] = []
        self._drainer: asyncio.Task[None] | None = None

    async def claim(self, name: str, interval: float) -> datetime | None:
        """Claim one target; the time of the claim if this replica got it, else None."""
        future: asyncio.Future[datetime | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((name, interval, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            now = self._clock()
            try:
                got = await asyncio.to_thread(
                    store.claim_many, self._engine, [(n, i) for n, i, _ in batch], self._owner,
                    now, lease=self._lease,
                )
            except Exception as exc:  # noqa: BLE001 - each waiter handles it as its own
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for name, _, future in batch:
                if not future.done():
                    # A name twice in a batch (a job replaced while it ran) is claimed once.
                    future.set_result(now if name in got else None)
                    got.discard(name)


class Scheduler:
    """Runs each target's checks on its schedule, claimed through the database."""

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
        self._engine = engine
        self._check = check
        self._metrics = metrics
        self._owner = owner
        self._lease = settings.lease
        self._clock = clock
        self._semaphore = asyncio.Semaphore(settings.concurrency)
        self._claims = _Claims(engine, owner, settings.lease, clock)
        self._aps = AsyncIOScheduler(timezone=UTC)
        self._aps.add_listener(self._skipped, EVENT_JOB_MAX_INSTANCES)
        self._targets: dict[str, config.Target] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._checking: set[asyncio.Task[Any]] = set()
        # Releases that failed and are retried (see _release), by target.
        self._retries: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}
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
        return len(self._checking)

    def target_names(self) -> list[str]:
        """The names of the scheduled targets."""
        return list(self._targets)

    async def start(self, targets: Iterable[config.Target]) -> None:
        """Register the targets in the database and schedule their first checks."""
        self._started = True
        self._aps.start()
        await self.update(targets)

    async def update(self, targets: Iterable[config.Target]) -> None:
        """Apply a (re)loaded target list: add, reschedule and remove jobs.

        In slices of ``_SLICE`` targets with a pass of the event loop between them: a reload to
        10,000 targets costs tens of seconds of CPU (metric label sets, jobs) and must not hold
        the loop, which also answers /healthz, that long (SPEC 10).
        """
        new = {t.name: t for t in targets}
        now = self._clock()
        await asyncio.to_thread(
            store.upsert_targets, self._engine, [(t.name, t.url) for t in new.values()], now
        )
        for count, name in enumerate(set(self._targets) - set(new), 1):
            with suppress(LookupError):
                self._aps.remove_job(name)
            log.info("target removed", target=name)
            if count % _SLICE == 0:
                await asyncio.sleep(0)
        added = [t for name, t in new.items() if name not in self._targets]
        changed = [
            t for name, t in new.items()
            if name in self._targets and _timing(t) != _timing(self._targets[name])
        ]
        self._targets = new
        for _ in self._metrics.set_targets_in_steps(new, _SLICE):
            await asyncio.sleep(0)
        self._metrics.set_intervals({n: t.settings.interval for n, t in new.items()})
        if not added and not changed:
            return
        times = await asyncio.to_thread(
            store.schedule_times, self._engine, [t.name for t in (*added, *changed)]
        )
        for count, target in enumerate((*added, *changed), 1):
            due = times.get(target.name)
            first = max(now, due) if due is not None else now
            first += timedelta(seconds=random.uniform(0, _jitter(target)))  # noqa: S311
            interval, jitter = _timing(target)
            self._aps.add_job(
                self._run,
                IntervalTrigger(seconds=interval, jitter=jitter or None, start_date=first,
                                timezone=UTC),
                args=[target.name],
                id=target.name,
                name=target.name,
                coalesce=True,
                max_instances=1,
                misfire_grace_time=None,
                replace_existing=True,
                next_run_time=first,
            )
            if count % _SLICE == 0:
                await asyncio.sleep(0)

    def next_run_time(self, name: str) -> datetime | None:
        """When the local job of a target fires next (for tests and the API)."""
        job = self._aps.get_job(name)
        return None if job is None else job.next_run_time

    async def stop(self, grace: float) -> int:
        """Start no new check; wait ``grace`` seconds for running ones, cancel the rest.

        Returns how many checks were cancelled.
        """
        self._stopping = True
        if self._aps.running:
            self._aps.pause()
        checking = set(self._checking)
        pending: set[asyncio.Task[Any]] = set()
        if checking:
            log.info("waiting for running checks", checks=len(checking), grace_seconds=grace)
            _done, pending = await asyncio.wait(checking, timeout=grace)
            for task in pending:
                task.cancel()
        for _retry, stop in list(self._retries.values()):
            stop.set()
        # Jobs still queued for a concurrency slot see the stop and return at once.
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)
        if self._aps.running:
            self._aps.shutdown(wait=False)
        return len(pending)

    def _skipped(self, event: JobSubmissionEvent) -> None:
        # A check longer than its interval: the next one is coalesced away, which is the point.
        log.debug("check skipped: the previous one is still running", target=event.job_id)

    async def _run(self, name: str) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._hold(name)
        resume_at: datetime | None = None
        try:
            async with self._semaphore:
                target = self._targets.get(name)
                if self._stopping or target is None:
                    return
                resume_at = await self._claim_and_check(target, task)
        except asyncio.CancelledError:
            # Only stop() cancels, and the task ends here; nothing was half-written.
            log.warning("check cancelled at shutdown", target=name)
        finally:
            self._tasks.discard(task)
            self._resume(name, resume_at)

    def _hold(self, name: str) -> None:
        """Pause a target's job while its run waits and checks (see the module docstring)."""
        with suppress(LookupError):
            self._aps.pause_job(name)

    def _resume(self, name: str, at: datetime | None) -> None:
        """Fire a held job next at ``at``, or else at its next interval from now."""
        if self._stopping:
            return
        job = self._aps.get_job(name)
        if job is None or job.next_run_time is not None:
            return  # removed, or replaced by update() meanwhile: its new schedule stands
        with suppress(LookupError):
            if at is None:
                self._aps.resume_job(name)
            else:
                self._aps.modify_job(name, next_run_time=at)

    async def _claim_and_check(
        self, target: config.Target, task: asyncio.Task[Any]
    ) -> datetime | None:
        """Claim and check a target; return when its local job should fire next if not on
        its interval (another replica has it)."""
        name = target.name
        await self._no_release_pending(name)
        try:
            claimed_at = await self._claims.claim(name, target.settings.interval)
        except MonitorError as exc:
            log.warning("claim failed", target=name, error=str(exc))
            return None
        if claimed_at is None:
            return await self._follow(target)
        self._checking.add(task)
        heartbeat = asyncio.create_task(self._heartbeat(name))
        handed_back = False

        def give_back(conn: Connection) -> None:
            # In the snapshot's transaction: the lease goes back when the snapshot commits, and
            # only if this replica still holds it; else the whole check rolls back (SPEC 10).
            nonlocal handed_back
            if not store.release_in(conn, name, self._owner):
                raise LeaseLost(f"{name}: the lease was taken over while this check ran")
            handed_back = True

        committed = False
        next_due: datetime | None = None
        try:
            with structlog.contextvars.bound_contextvars(target=name):
                next_due, committed = await self._checked(target, give_back)
        except asyncio.CancelledError:
            # The check did not happen (or committed whole): due again now, for any replica.
            # If it did commit, the lease is back already and this release changes nothing.
            next_due = claimed_at
            raise
        finally:
            self._checking.discard(task)
            heartbeat.cancel()
            if not (committed and handed_back):
                await asyncio.shield(self._release(name, next_due))
        return None

    async def _checked(
        self, target: config.Target, in_transaction: InTransaction
    ) -> tuple[datetime | None, bool]:
        """Run one check and report it.

        Returns a due time (only when the check raised) and whether the check returned, which
        means its transaction committed.
        """
        started = self._clock()
        try:
            result = await self._check(target, in_transaction)
        except LeaseLost:
            # Paused past the lease (SIGSTOP, a frozen VM): another replica has the target and
            # checks it; this check wrote nothing and is no check at all, not a failed one.
            log.warning("lease lost: the check is rolled back",
                        seconds=round((self._clock() - started).total_seconds(), 3))
            self._metrics.lease_lost()
            return None, False
        except Exception as exc:
            # STYLE 10: push this target one interval on and carry on with the others.
            log.exception("check raised", error=f"{exc.__class__.__name__}: {exc}")
            finished = self._clock()
            failed = CheckResult(
                target=target.name, url=target.url, outcome="failed",
                error_kind="internal", error_message=str(exc),
                duration_seconds=(finished - started).total_seconds(),
            )
            self._metrics.observe(failed, target.name, finished_at=finished)
            return finished + timedelta(seconds=target.settings.interval), False
        self._report(result, target.name)
        return None, True

    def _report(self, result: CheckResult, name: str) -> None:
        # The snapshot's counts are the target's current issues by rule (what it stored).
        counts = result.issue_counts if result.snapshot_id is not None else None
        self._metrics.observe(result, name, issue_counts=counts, finished_at=self._clock())
        fields = {
            "target": name,
            "outcome": result.outcome,
            "snapshot_id": result.snapshot_id,
            "urls": result.urls,
            "invalid": result.invalid,
            "added": result.added,
            "removed": result.removed,
            "changed": result.changed,
            "invalid_new": result.invalid_new,
            "documents": len(result.documents),
            "documents_failed": sum(d.outcome == "failed" for d in result.documents),
            "issues": len(result.issues),
            "fetched_bytes": result.fetched_bytes,
            "duration_seconds": round(result.duration_seconds, 3),
        }
        if result.outcome == "failed":
            log.warning("check", **fields, error_kind=result.error_kind,
                        error=result.error_message)
        else:
            log.info("check", **fields)

    async def _heartbeat(self, name: str) -> None:
        # Renew well before expiry so a long check is never taken over by another replica.
        while True:
            await asyncio.sleep(self._lease / 3)
            try:
                kept = await asyncio.to_thread(
                    store.renew, self._engine, name, self._owner, self._clock(), lease=self._lease
                )
            except MonitorError as exc:
                log.warning("lease renewal failed", target=name, error=str(exc))
                continue
            if not kept:
                log.warning("lease lost during a check", target=name)
                return

    async def _release(self, name: str, next_due: datetime | None) -> None:
        try:
            await asyncio.to_thread(
                store.release, self._engine, name, self._owner, next_due_at=next_due
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
        while asyncio.get_running_loop().time() + delay < give_up and not self._stopping:
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                return
            with suppress(MonitorError):
                await asyncio.to_thread(
                    store.release, self._engine, name, self._owner, next_due_at=next_due)
                log.info("lease released on retry", target=name)
                return
            delay = min(delay * 2, self._lease / 6)

    async def _no_release_pending(self, name: str) -> None:
        """Stop a pending retry of this target's release and wait for its last attempt."""
        pending = self._retries.get(name)
        if pending is not None:
            retry, stop = pending
            stop.set()
            await asyncio.wait([retry])

    async def _follow(self, target: config.Target) -> datetime | None:
        """Another replica has the target: when it becomes claimable (None: unknown)."""
        try:
            times = await asyncio.to_thread(store.schedule_times, self._engine, [target.name])
        except MonitorError:
            return None
        due = times.get(target.name)
        if due is None:
            return None
        return max(due, self._clock()) + timedelta(
            seconds=random.uniform(0, _jitter(target)) + 0.01)  # noqa: S311
