"""WHEN checks run: due times in the database, claimed in batches by each replica, graceful stop.

The due times live in the database (``targets.next_due_at``), not in every replica: replicas do
not all schedule all targets. Each replica has one dispatcher, an APScheduler job that wakes at
the earliest due time of all free targets (read from the database after a claim that left
slots free, so every replica sees due work at the same time, not only the one whose check set
that due time), when a concurrency slot frees, and at least every ``POLL`` seconds (a dead
replica's targets). A wake for a due time comes a random share of ``_SPREAD`` late and at least
``_BATCH`` after the last claim, on every replica alike: which replica claims first is a draw,
so each gets a fair share of the work, and the targets that come due in between are claimed
together. It claims, in one statement (``store.daemon.claim_due``), as many due, free targets
as it has free slots, the longest-due first: a busy replica leaves the work to the others, and
replicas claiming at once take different targets instead of racing for the same ones (on
PostgreSQL ``FOR UPDATE SKIP LOCKED``). Each due check runs once across replicas. A check gives
the lease back in its own transaction, with the target's next due time (its claim plus the
interval plus jitter); a check that raises or is cancelled gives it back on its own. A check
that raises is logged with its exception and pushed one interval on; it never stops the other
targets. ``stop`` lets in-flight checks finish within a grace period and cancels the rest; a
cancelled check writes nothing because the pipeline commits atomically, and its target is due
again at once, for any replica.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections.abc import Awaitable, Callable, Iterable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from sqlalchemy import Engine

from monitor import config
from monitor.errors import LeaseLost, MonitorError
from monitor.metrics import Metrics
from monitor.model import CheckResult, utcnow
from monitor.store import targets as store

__all__ = ["POLL", "CheckFn", "Clock", "Scheduler", "utcnow"]

# A check of one target under a lease: a result with a snapshot id was stored, and the lease
# given back with the target's next due time in the same transaction (store.targets.give_back).
CheckFn = Callable[[config.Target, store.Lease], Awaitable[CheckResult]]
Clock = Callable[[], datetime]
log = structlog.get_logger("monitor.scheduler")
# Targets applied between two passes of the event loop in ``update`` (about 0.1 s of work).
_SLICE = 50
# The longest a replica waits before it asks the database for due targets: how soon it sees
# what another replica released or left behind (a dead one's, once its lease has run out).
POLL = 1.0
# How long a wake-up waits for others before its claim: the targets due together, and the slots
# of checks ending together, are claimed by one statement.
_GATHER = timedelta(seconds=0.005)
# A due wake comes a random share of this late, on every replica alike: replicas waking for the
# same due time claim in a random order, so each gets a fair share of the due work over time.
_SPREAD = 0.1
# The least time between two claims of a replica that is not behind: the targets that come due
# meanwhile are claimed by one statement, and replicas do not race for every single target.
_BATCH = timedelta(seconds=0.2)
# A target claimed this long after its due time waited for a slot (here or on other replicas):
# the replicas are behind, and a freed slot should not wait for the next poll.
_WAITED = timedelta(seconds=0.25)
# Checks that start this late are counted, and summed up in one log line every _LATE_EVERY.
_LATE = 2.0
_LATE_EVERY = 60.0
_DISPATCH = "dispatch"


def _jitter(target: config.Target) -> float:
    return target.settings.interval * target.settings.jitter


def _after(moment: datetime, target: config.Target, *, jittered: bool = True) -> datetime:
    """One interval after ``moment`` plus a random share of the target's jitter."""
    extra = random.uniform(0, _jitter(target)) if jittered else 0.0  # noqa: S311
    return moment + timedelta(seconds=target.settings.interval + extra)


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
        self._engine = engine
        self._check = check
        self._metrics = metrics
        self._owner = owner
        self._lease = settings.lease
        self._concurrency = settings.concurrency
        self._clock = clock
        self._aps = AsyncIOScheduler(timezone=UTC)
        self._targets: dict[str, config.Target] = {}
        self._removed: set[str] = set()  # by the last reload
        # Claims name the configured targets only once a claim got one this replica does not
        # know (another replica's configuration is newer: a rollout); else any unparked target
        # is one of this replica's, and the claim reads only the due ones, by their index.
        self._configured = store.configured(())
        self._listed = False
        # The claimed targets' runs, by name: one at a time per target, at most concurrency.
        self._runs: dict[str, asyncio.Task[None]] = {}
        # Targets claimed again while a check of them still ran here: that check's lease ran
        # out (a pause), another replica may have checked the target since, so it must not
        # commit under the new lease.
        self._checking: set[asyncio.Task[Any]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        # Due times this replica set (its own checks'), earliest first: when to wake next.
        self._wakes: list[datetime] = []
        self._due: dict[str, datetime] = {}
        self._dispatching = False
        self._dispatched = datetime.min.replace(tzinfo=UTC)  # when the last dispatch began
        # The last claim filled every free slot with targets that had waited: more may be due,
        # so a freed slot claims again at once.
        self._behind = False
        self._late = (0, 0.0)  # checks that started late since the last summary, most seconds
        self._late_since = 0.0
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
        """Register the targets in the database and start claiming the due ones."""
        self._started = True
        self._aps.start()
        self._late_since = asyncio.get_running_loop().time()
        await self.update(targets)
        self._wake_at(self._clock())

    async def update(self, targets: Iterable[config.Target]) -> None:
        """Apply a (re)loaded target list: the targets this replica claims from now on.

        A new target is due within its jitter from now; a known one keeps the due time in the
        database. The metric series are made in slices of ``_SLICE`` targets with a pass of the
        event loop between them: a reload to 10,000 targets costs seconds of CPU and must not
        hold the loop, which also answers /healthz, that long.
        """
        new = {t.name: t for t in targets}
        now = self._clock()
        rows = [
            (t.name, t.url, now + timedelta(seconds=random.uniform(0, _jitter(t))))  # noqa: S311
            for t in new.values()
        ]
        configured = await asyncio.to_thread(store.configured, new)
        await asyncio.to_thread(store.upsert_targets, self._engine, rows, now)
        self._removed = set(self._targets) - set(new)
        for count, name in enumerate(self._removed, 1):
            self._due.pop(name, None)
            log.info("target removed", target=name)
            if count % _SLICE == 0:
                await asyncio.sleep(0)
        self._targets = new
        self._configured = configured
        self._listed = False
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
        if self._aps.running:
            with suppress(LookupError):
                self._aps.remove_job(_DISPATCH)
        checking = set(self._checking)
        pending: set[asyncio.Task[Any]] = set()
        if checking:
            log.info("waiting for running checks", checks=len(checking), grace_seconds=grace)
            _done, pending = await asyncio.wait(checking, timeout=grace)
            for task in pending:
                task.cancel()
        for _retry, stop in list(self._retries.values()):
            stop.set()
        # Runs that have not begun their check yet see the stop, give the lease back and end.
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)
        if self._aps.running:
            self._aps.shutdown(wait=False)
        return len(pending)

    # ---- the dispatcher ------------------------------------------------------------------

    def _due_wake(self, due: datetime) -> datetime:
        """When to wake for work due at ``due``: at least ``_BATCH`` after the last claim, plus
        a random share of ``_SPREAD``, the same rule on every replica; at once when behind
        (a freed slot of a saturated replica)."""
        if self._behind:
            return due
        due = max(due, self._dispatched + _BATCH)
        return due + timedelta(seconds=random.uniform(0, _SPREAD))  # noqa: S311

    def _wake_at(self, due: datetime) -> None:
        """Have the dispatcher run for work due at ``due`` (as ``_due_wake`` says)."""
        if self._stopping or not self._aps.running:
            return
        heapq.heappush(self._wakes, due)
        if self._dispatching:
            return  # it plans its next run when it ends, from _wakes
        job = self._aps.get_job(_DISPATCH)
        if job is None:
            self._plan(None)
            return
        at = self._due_wake(due)
        if job.next_run_time is None or job.next_run_time > at:
            job.modify(next_run_time=at)

    def _plan(self, served: datetime | None, upcoming: datetime | None = None) -> None:
        """Set the dispatcher's next run: for the earliest due time not ``served`` yet (by a
        dispatch that began at that time), its own checks' or the ``upcoming`` one of any free
        target, or one ``POLL`` on."""
        if self._stopping or not self._aps.running:
            return
        while self._wakes and served is not None and self._wakes[0] <= served:
            heapq.heappop(self._wakes)
        # Replicas' polls drift apart instead of asking the database in step.
        at = self._clock() + timedelta(seconds=POLL * random.uniform(0.75, 1.0))  # noqa: S311
        # One draw for the earliest due time, whoever set it: a replica that also knows it
        # from its own check must not get two draws, and so an earlier wake than the others.
        dues = [d for d in (self._wakes[0] if self._wakes else None, upcoming) if d is not None]
        if dues:
            at = min(at, self._due_wake(min(dues)))
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
        began = self._dispatched = self._clock()
        upcoming: datetime | None = None
        short = False
        try:
            while not self._stopping and self._targets:
                free = self._concurrency - len(self._runs)
                if free <= 0:
                    break
                now = self._clock()
                try:
                    got = await asyncio.to_thread(
                        store.claim_due, self._engine, self._configured if self._listed else None,
                        self._owner, now, lease=self._lease, limit=free)
                except MonitorError as exc:
                    log.warning("claim failed", error=str(exc))
                    break
                self._metrics.claimed(len(got))
                for name, due in got:
                    self._begin(name, now, due)
                waited = min((d for _, d in got if d is not None), default=now)
                self._behind = len(got) == free and now - waited > _WAITED
                if len(got) < free:
                    short = True
                    break  # nothing more is due now
            # When nothing more is due now, when is the next free target due? Not when the
            # slots are full: then due work is waiting, and a freed slot claims it.
            if short and not self._stopping:
                try:
                    upcoming = await asyncio.to_thread(
                        store.next_due, self._engine, self._clock())
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
            self._spawn(self._release(name, store.PARKED))
            return
        if target is None:
            # Another replica's configuration names it and this one's does not: leave it to
            # them, as due as it was, and claim only this configuration's targets from now on.
            if not self._listed:
                log.warning("a due target is not in this replica's configuration: another "
                            "replica's is newer; claiming only the configured targets",
                            target=name)
                self._listed = True
            self._spawn(self._release(name, None))
            return
        if self._stopping:
            self._spawn(self._release(name, None))
            return
        if due is not None:
            self._count_late((claimed_at - due).total_seconds())
        self._runs[name] = self._spawn(self._run(target, claimed_at))

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _count_late(self, seconds: float) -> None:
        """Count a check that starts late; one summary line every ``_LATE_EVERY`` seconds
        while some do (a replica behind its schedule), not one line per check."""
        count, most = self._late
        if seconds >= _LATE:
            count, most = count + 1, max(most, seconds)
        self._late = (count, most)
        clock = asyncio.get_running_loop().time()
        if clock - self._late_since < _LATE_EVERY:
            return
        if count:
            log.warning("checks started late: due targets wait for a free slot",
                        checks=count, most_seconds=round(most, 1),
                        over_seconds=round(clock - self._late_since), concurrency=self._concurrency)
        self._late, self._late_since = (0, 0.0), clock

    async def _run(self, target: config.Target, claimed_at: datetime) -> None:
        task = asyncio.current_task()
        assert task is not None
        name = target.name
        try:
            await self._no_release_pending(name)
            if not self._stopping:
                await self._claimed(target, claimed_at, task)
            else:
                await asyncio.shield(self._release(name, claimed_at))
        except asyncio.CancelledError:
            # Only stop() cancels, and the task ends here; nothing was half-written.
            log.warning("check cancelled at shutdown", target=name)
        finally:
            self._runs.pop(name, None)
            # A slot is free: if due targets were left for want of one, claim again (with the
            # slots freed meanwhile). Else nothing is due before a known due time or a poll.
            if self._behind:
                self._wake_at(self._clock() + _GATHER)

    async def _claimed(
        self, target: config.Target, claimed_at: datetime, task: asyncio.Task[Any]
    ) -> None:
        """Check a claimed target and give its lease back with its next due time."""
        name = target.name
        self._checking.add(task)
        heartbeat = asyncio.create_task(self._heartbeat(name))
        # Anchored at the claim: a 10-minute target is checked every 10 minutes (plus jitter)
        # however long its checks take.
        next_due = _after(claimed_at, target)
        handed_back = False
        try:
            with structlog.contextvars.bound_contextvars(target=name):
                pushed, handed_back = await self._checked(
                    target, store.Lease(name, self._owner, next_due))
            next_due = pushed or next_due
        except asyncio.CancelledError:
            # The check did not happen (or committed whole): due again now, for any replica.
            # If it did commit, the lease is back already and this release changes nothing.
            next_due = claimed_at
            raise
        finally:
            self._checking.discard(task)
            heartbeat.cancel()
            if name not in self._targets:
                next_due = store.PARKED  # removed by a reload while it ran
            if not handed_back:
                await asyncio.shield(self._release(name, next_due))
            if name in self._targets and not self._stopping:
                self._due[name] = next_due
                self._wake_at(next_due)

    async def _checked(
        self, target: config.Target, lease: store.Lease
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
            # Counted apart from a failed check of the site: this one could not be recorded.
            failed = CheckResult(
                target=target.name, url=target.url, outcome="error",
                error_kind="internal", error_message=str(exc),
                duration_seconds=(finished - started).total_seconds(),
            )
            if target.name in self._targets:  # see _report
                self._metrics.observe(failed, target.name, finished_at=finished)
            return _after(finished, target, jittered=False), False
        self._report(result, target.name)
        return None, result.snapshot_id is not None

    def _report(self, result: CheckResult, name: str) -> None:
        # The snapshot's counts are the target's current issues by rule (what it stored).
        counts = result.issue_counts if result.snapshot_id is not None else None
        # A reload that removed the target while it ran has removed its series: observing
        # now would bring them back, for a target no longer configured, until the restart.
        if name in self._targets:
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
        elif result.outcome == "partial":  # a warning: part of the URL set went unread
            log.warning("check", **fields, failed_documents=[
                f"{d.url}: {d.error}" for d in result.failed_documents[:5]])
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
