"""The scheduler with a stand-in check on a real SQLite file: timing, claims, errors, stop."""

from __future__ import annotations

import asyncio
import itertools
import logging
import sqlite3
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, event, select
from structlog.testing import capture_logs
from waiting import until_async

from monitor import config
from monitor.core.model import CheckResult
from monitor.observe.metrics import Metrics
from monitor.scheduler import Scheduler
from monitor.scheduler import report as scheduler_report
from monitor.store import db
from monitor.store import targetrows as store
from monitor.store.schema import targets

pytestmark = pytest.mark.anyio


def target(name: str, interval: float, jitter: float = 0.0) -> config.Target:
    """A target on 127.0.0.1 with this interval and jitter (below the 1 s a configuration
    allows, so that these tests take a few seconds, not minutes)."""
    settings = config.Defaults().model_copy(update={"interval": interval, "jitter": jitter})
    return config.Target(name=name, url=f"http://127.0.0.1:9/{name}.xml", settings=settings)


class Recorder:
    """A stand-in for pipeline.run_check: records when each target was checked."""

    def __init__(
        self,
        engine: Engine,
        work: Callable[[config.Target], Awaitable[None]] | None = None,
        *,
        run_hook: bool = True,
    ) -> None:
        self.engine = engine
        self.run_hook = run_hook
        self.calls: dict[str, list[float]] = defaultdict(list)
        self.running = 0
        self.most_at_once = 0
        self.work = work

    async def __call__(self, t: config.Target, lease: store.Lease) -> CheckResult:
        self.calls[t.name].append(time.monotonic())
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if self.work is not None:
                await self.work(t)
        finally:
            self.running -= 1
        if not self.run_hook:  # stored nothing: the scheduler gives the lease back itself
            return CheckResult(target=t.name, url=t.url, outcome="ok", urls=1,
                               duration_seconds=0.01)
        await asyncio.to_thread(self.store, lease)
        return CheckResult(target=t.name, url=t.url, outcome="ok", urls=1, duration_seconds=0.01,
                           snapshot_id=1)

    def store(self, lease: store.Lease) -> None:
        """Like the pipeline: the lease goes back in the transaction that stores the check."""
        with self.engine.begin() as conn:
            store.give_back(conn, lease)


def make(engine: Engine, check: Recorder, *, owner: str = "r1", concurrency: int = 8,
         lease: float = 30) -> tuple[Scheduler, CollectorRegistry]:
    """A scheduler and its registry."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, [], [])
    settings = config.Scheduler(concurrency=concurrency, lease=lease)
    return Scheduler(engine=engine, check=check, metrics=metrics, owner=owner,
                     settings=settings), registry


def gaps(times: list[float]) -> list[float]:
    """Seconds between consecutive calls."""
    return [b - a for a, b in itertools.pairwise(times)]


async def test_checks_run_on_their_interval(sqlite_engine: Engine) -> None:
    check = Recorder(sqlite_engine)
    scheduler, registry = make(sqlite_engine, check)
    await scheduler.start([target("fast", 0.3), target("slow", 1.0)])
    await until_async(lambda: len(check.calls["fast"]) >= 5 and len(check.calls["slow"]) >= 2,
                      what="five checks of fast, two of slow")
    assert await scheduler.stop(1) == 0
    # Never before its interval has passed since the last claim (a check starts a little
    # after its claim, and a busy machine moves that moment).
    assert min(gaps(check.calls["fast"])) >= 0.2
    assert min(gaps(check.calls["slow"])) >= 0.8
    assert registry.get_sample_value(
        "sitemap_monitor_checks_total", {"target": "fast", "outcome": "ok"}
    ) == len(check.calls["fast"])


async def test_a_raising_target_is_pushed_forward_and_others_go_on(sqlite_engine: Engine) -> None:
    async def explode(t: config.Target) -> None:
        if t.name == "bad":
            raise RuntimeError("parser bug")

    check = Recorder(sqlite_engine, explode)
    scheduler, registry = make(sqlite_engine, check)
    with capture_logs() as logs:
        await scheduler.start([target("bad", 0.3), target("good", 0.3)])
        await until_async(lambda: len(check.calls["good"]) >= 3 and len(check.calls["bad"]) >= 2,
                          what="three checks of good, two of bad")
        await scheduler.stop(1)
    assert len(check.calls["good"]) >= 3
    assert len(check.calls["bad"]) >= 2  # pushed one interval on, not dropped
    raised = [e for e in logs if e["event"] == "check raised"]
    assert raised
    assert raised[0]["log_level"] == "error"
    assert "parser bug" in raised[0]["error"]
    # It raised, so nothing of it was stored: an error, not a failed check of the site.
    assert registry.get_sample_value(
        "sitemap_monitor_checks_total", {"target": "bad", "outcome": "error"}
    ) == len(check.calls["bad"])
    assert registry.get_sample_value(
        "sitemap_monitor_checks_total", {"target": "bad", "outcome": "failed"}) == 0
    summaries = [e for e in logs if e["event"] == "check" and e["target"] == "good"]
    assert summaries
    assert summaries[0]["outcome"] == "ok"
    assert summaries[0]["urls"] == 1
    assert "duration_seconds" in summaries[0]


async def test_global_concurrency_is_bounded(sqlite_engine: Engine) -> None:
    async def slow(_t: config.Target) -> None:
        await asyncio.sleep(0.3)

    check = Recorder(sqlite_engine, slow)
    scheduler, _ = make(sqlite_engine, check, concurrency=2)
    await scheduler.start([target(f"t{i}", 0.2) for i in range(6)])
    await until_async(lambda: sum(len(v) for v in check.calls.values()) >= 6, what="6 checks")
    await scheduler.stop(2)
    assert check.most_at_once == 2
    assert sum(len(v) for v in check.calls.values()) >= 4


async def test_two_schedulers_check_each_due_target_once(sqlite_engine: Engine) -> None:
    check = Recorder(sqlite_engine)
    first, _ = make(sqlite_engine, check, owner="r1")
    second, _ = make(sqlite_engine, check, owner="r2")
    names = [f"t{i}" for i in range(5)]
    await first.start([target(n, 0.5, 0.1) for n in names])
    await second.start([target(n, 0.5, 0.1) for n in names])
    await until_async(lambda: all(len(check.calls[n]) >= 5 for n in names),
                      what="five checks of each target")
    await first.stop(1)
    await second.stop(1)
    for name in names:
        calls = check.calls[name]
        # Never doubled: a due check run by both would be two calls a moment apart; one
        # interval (0.5 s) apart, less what a busy machine moves a check's start by.
        assert min(gaps(calls)) >= 0.3, (name, gaps(calls))


async def test_stop_lets_short_checks_finish(sqlite_engine: Engine) -> None:
    finished: list[str] = []
    started = asyncio.Event()

    async def short(t: config.Target) -> None:
        started.set()
        await asyncio.sleep(0.4)
        finished.append(t.name)

    check = Recorder(sqlite_engine, short)
    scheduler, _ = make(sqlite_engine, check)
    await scheduler.start([target("a", 60)])
    # Not a fixed wait: the claim goes to the database first, 0.1 s alone on a slow machine.
    await asyncio.wait_for(started.wait(), 60)
    assert scheduler.in_flight == 1
    assert await scheduler.stop(grace=3) == 0
    assert finished == ["a"]
    assert not scheduler.running


async def test_stop_cancels_long_checks_and_frees_them(sqlite_engine: Engine) -> None:
    async def endless(_t: config.Target) -> None:
        await asyncio.sleep(60)

    check = Recorder(sqlite_engine, endless)
    scheduler, _ = make(sqlite_engine, check)
    await scheduler.start([target("a", 60)])
    await until_async(lambda: check.running == 1, what="the check running")
    started = time.monotonic()
    assert await scheduler.stop(grace=0.3) == 1
    assert time.monotonic() - started < 10  # the grace, not the check's 60 s
    with sqlite_engine.connect() as conn:
        row = conn.execute(select(targets).where(targets.c.name == "a")).one()
    # The lease is given back and the target is due again: the cancelled check did not count.
    assert row.lease_owner is None
    assert row.next_due_at.replace(tzinfo=UTC) <= datetime.now(UTC)


async def test_update_adds_and_removes_targets(sqlite_engine: Engine) -> None:
    check = Recorder(sqlite_engine)
    scheduler, registry = make(sqlite_engine, check)
    await scheduler.start([target("old", 0.3)])
    await until_async(lambda: check.calls["old"], what="a check of old")
    await scheduler.update([target("new", 0.3)])
    await until_async(lambda: check.calls["new"], what="a check of new")
    seen_old = len(check.calls["old"])
    # Long enough for old to have come due a few times, had it stayed.
    await until_async(lambda: len(check.calls["new"]) >= 4, what="four checks of new")
    await scheduler.stop(1)
    assert len(check.calls["old"]) == seen_old
    assert scheduler.target_names() == ["new"]
    assert registry.get_sample_value("sitemap_monitor_urls", {"target": "old"}) is None


def lease_row(engine: Engine, name: str) -> tuple[str | None, datetime]:
    """A target's lease owner and due time."""
    with engine.connect() as conn:
        row = conn.execute(select(targets).where(targets.c.name == name)).one()
    return row.lease_owner, row.next_due_at.replace(tzinfo=UTC)


async def test_the_lease_goes_back_in_the_checks_own_transaction(sqlite_engine: Engine) -> None:
    seen_inside: list[str | None] = []

    async def check(t: config.Target, lease: store.Lease) -> CheckResult:
        def keep() -> None:
            with sqlite_engine.begin() as conn:
                owner = select(targets.c.lease_owner).where(targets.c.name == t.name)
                seen_inside.append(conn.execute(owner).scalar_one())
                store.give_back(conn, lease)
                seen_inside.append(conn.execute(owner).scalar_one())

        await asyncio.to_thread(keep)
        return CheckResult(target=t.name, url=t.url, outcome="ok", duration_seconds=0.01)

    scheduler = Scheduler(
        engine=sqlite_engine, check=check, metrics=Metrics(CollectorRegistry(), [], []),
        owner="r1", settings=config.Scheduler(lease=30))
    before = datetime.now(UTC)
    await scheduler.start([target("a", 60)])
    await until_async(lambda: len(seen_inside) == 2, what="the check's transaction")
    await until_async(lambda: lease_row(sqlite_engine, "a")[0] is None, what="the release")
    await scheduler.stop(1)
    # Held while the check ran, given back by the check's own statement: nothing left to do.
    assert seen_inside == ["r1", None]
    owner, due = lease_row(sqlite_engine, "a")
    assert owner is None
    assert due >= before + timedelta(seconds=59)  # the claim's due time: one interval on


async def test_a_check_that_rolls_back_after_the_hook_still_gives_the_lease_back(
    sqlite_engine: Engine,
) -> None:
    async def check(t: config.Target, lease: store.Lease) -> CheckResult:
        def keep() -> None:
            with sqlite_engine.begin() as conn:
                store.give_back(conn, lease)
                raise RuntimeError("commit failed")

        await asyncio.to_thread(keep)
        raise AssertionError("unreachable")

    scheduler = Scheduler(
        engine=sqlite_engine, check=check, metrics=Metrics(CollectorRegistry(), [], []),
        owner="r1", settings=config.Scheduler(lease=30))
    before = datetime.now(UTC)
    with capture_logs() as logs:
        await scheduler.start([target("a", 60)])
        await until_async(lambda: any(e["event"] == "check raised" for e in logs),
                          what="the check raising")
        await until_async(lambda: lease_row(sqlite_engine, "a")[0] is None, what="the release")
        await scheduler.stop(1)
    owner, due = lease_row(sqlite_engine, "a")
    assert owner is None  # not held until the lease runs out
    assert due >= before + timedelta(seconds=59)


async def test_a_release_that_failed_is_retried_before_the_lease_ends(tmp_path: Path) -> None:
    """The database cannot be written when the check ends (another writer holds SQLite's
    lock, as a full disk would refuse it): the commit and the release fail; once the
    database takes writes again the release is retried, and the target is free long before
    its 30 s lease would have run out."""
    url = f"sqlite:///{tmp_path}/m.db"
    db.upgrade(db.make_engine(url))
    engine = db.make_engine(url, connect_args={"timeout": 0.2, "check_same_thread": False})
    holder = sqlite3.connect(tmp_path / "m.db", isolation_level=None, check_same_thread=False)

    async def check(t: config.Target, lease: store.Lease) -> CheckResult:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, until the test lets go of it

        def keep() -> None:
            with engine.begin() as conn:
                store.give_back(conn, lease)

        await asyncio.to_thread(keep)
        raise AssertionError("unreachable: the lock is held")

    scheduler = Scheduler(
        engine=engine, check=check, metrics=Metrics(CollectorRegistry(), [], []),
        owner="r1", settings=config.Scheduler(lease=30))
    with capture_logs() as logs:
        await scheduler.start([target("a", 60)])
        # Past the store's own retries of a locked database (2 s).
        await until_async(lambda: any(e["event"].startswith("lease release failed")
                                      for e in logs), what="the release failing")
        assert lease_row(engine, "a")[0] == "r1"  # the release failed: still held
        holder.execute("ROLLBACK")
        released = time.monotonic()
        # Well within the 30 s lease: the retries free it, not its end.
        await until_async(lambda: lease_row(engine, "a")[0] is None, within=20,
                          every=0.1, what="the lease given back")
        waited = time.monotonic() - released
        await scheduler.stop(1)
    holder.close()
    engine.dispose()
    print(f"\nlease given back {waited:.1f} s after the database took writes again "
          "(lease 30 s)")
    assert any(e["event"].startswith("lease release failed") for e in logs)
    assert lease_row(engine, "a")[0] is None
    assert any(e["event"] == "lease released on retry" for e in logs)


async def test_a_check_that_skips_the_hook_still_gives_the_lease_back(
    sqlite_engine: Engine,
) -> None:
    check = Recorder(sqlite_engine, run_hook=False)
    scheduler, _ = make(sqlite_engine, check)
    await scheduler.start([target("a", 60)])
    await until_async(lambda: check.calls["a"], what="a check")
    await until_async(lambda: lease_row(sqlite_engine, "a")[0] is None, what="the release")
    await scheduler.stop(1)
    assert len(check.calls["a"]) == 1
    assert lease_row(sqlite_engine, "a")[0] is None


async def test_a_replica_behind_takes_the_targets_in_turn_and_sums_the_lateness_up(
    sqlite_engine: Engine, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_report, "_LATE", 0.1)
    monkeypatch.setattr(scheduler_report, "_LATE_EVERY", 0.5)

    async def slow(_t: config.Target) -> None:
        await asyncio.sleep(0.2)

    check = Recorder(sqlite_engine, slow)
    scheduler, _ = make(sqlite_engine, check, concurrency=1)
    with caplog.at_level(logging.DEBUG, logger="apscheduler"), capture_logs() as logs:
        began = time.monotonic()
        await scheduler.start([target(f"t{i}", 0.1) for i in range(3)])
        await until_async(lambda: sum(len(c) for c in check.calls.values()) >= 9
                          and any(e["event"].startswith("checks started late") for e in logs),
                          what="nine checks and a summary of the late ones")
        await scheduler.stop(1)
        elapsed = time.monotonic() - began
    # Behind by design (3 checks of 0.2 s every 0.1 s through one slot): the longest-due target
    # goes first, so the targets take turns, and nothing is skipped.
    counts = sorted(len(check.calls[f"t{i}"]) for i in range(3))
    assert counts[0] >= 2
    assert counts[-1] - counts[0] <= 1
    assert not [r for r in caplog.records if "maximum number of running instances" in r.message]
    # One summary line a period (0.5 s here, a minute in the daemon), not one a late check.
    late = [e for e in logs if e["event"].startswith("checks started late")]
    assert 1 <= len(late) <= elapsed / 0.5 + 1, (late, elapsed)
    assert sum(e["checks"] for e in late) >= len(late)
    assert sum(counts) > 2 * len(late)


async def test_claims_that_wait_together_go_in_one_statement(sqlite_engine: Engine) -> None:
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.startswith("UPDATE targets") and "RETURNING" in statement:  # claims
            statements.append(statement)

    event.listen(sqlite_engine, "before_cursor_execute", count)
    check = Recorder(sqlite_engine)
    scheduler, _ = make(sqlite_engine, check, concurrency=8)
    await scheduler.start([target(f"t{i}", 60) for i in range(8)])
    await until_async(lambda: len(check.calls) == 8, what="eight checks")
    await scheduler.stop(1)
    assert sorted(check.calls) == [f"t{i}" for i in range(8)]
    assert all(len(calls) == 1 for calls in check.calls.values())
    # Eight targets due at once: they are claimed by a statement or two, not one each.
    assert 1 <= len(statements) <= 2


async def test_a_target_of_a_newer_configuration_is_left_to_the_replicas_that_know_it(
    sqlite_engine: Engine,
) -> None:
    """A rollout: another replica's configuration adds "c", this one's does not name it. This
    replica claims it once (any due target is, as a rule, one of its own), gives it back as
    due as it was, and from then on claims only its configured targets."""
    check = Recorder(sqlite_engine)
    scheduler, _ = make(sqlite_engine, check)
    with capture_logs() as logs:
        await scheduler.start([target("a", 0.3)])
        await until_async(lambda: check.calls["a"], what="a check of a")
        due = datetime.now(UTC) - timedelta(seconds=1)
        # What the other replica's start does: its targets' rows, "c" new and due.
        store.upsert_targets(sqlite_engine, [("a", "http://127.0.0.1:9/a.xml", due),
                                             ("c", "http://127.0.0.1:9/c.xml", due)], due)
        await until_async(lambda: len(check.calls["a"]) >= 4 and any(
            e["event"].startswith("a due target is not in this") for e in logs),
            what="the warning about c and four checks of a")
        await until_async(lambda: lease_row(sqlite_engine, "c")[0] is None, what="c given back")
        await scheduler.stop(1)
    assert "c" not in check.calls
    assert len(check.calls["a"]) >= 4
    owner, stored = lease_row(sqlite_engine, "c")
    assert owner is None
    assert stored == due.replace(tzinfo=UTC)
    warned = [e for e in logs if e["event"].startswith("a due target is not in this")]
    assert [e["target"] for e in warned] == ["c"]


async def test_a_target_removed_by_a_reload_is_parked(sqlite_engine: Engine) -> None:
    check = Recorder(sqlite_engine)
    scheduler, _ = make(sqlite_engine, check)
    await scheduler.start([target("a", 0.3), target("b", 0.3)])
    await until_async(lambda: check.calls["b"], what="a check of b")
    await scheduler.update([target("a", 0.3)])
    seen_a = len(check.calls["a"])
    await until_async(lambda: len(check.calls["a"]) > seen_a, what="a check of a after it")
    seen = len(check.calls["b"])
    # Long enough for b to have come due a few times, had it stayed.
    await until_async(lambda: len(check.calls["a"]) >= seen_a + 4, what="four checks of a")
    await until_async(lambda: lease_row(sqlite_engine, "b")[0] is None, what="b given back")
    await scheduler.stop(1)
    assert len(check.calls["b"]) == seen
    assert lease_row(sqlite_engine, "b") == (None, store.PARKED)
    assert scheduler.next_run_time("b") is None


async def test_a_check_the_full_database_cannot_record_counts_as_an_error(
    sqlite_engine: Engine,
) -> None:
    """SQLite's own "database or disk is full", raised while the check stores its result."""

    def fill() -> None:
        with sqlite_engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS filler (b BLOB)")
        with sqlite_engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA max_page_count = 1")  # no page beyond those in use
            conn.exec_driver_sql("INSERT INTO filler VALUES (zeroblob(1000000))")

    async def full(t: config.Target) -> None:
        await asyncio.to_thread(fill)

    check = Recorder(sqlite_engine, full)
    scheduler, registry = make(sqlite_engine, check)
    with capture_logs() as logs:
        await scheduler.start([target("shop", 60)])
        deadline = time.monotonic() + 30
        while not any(e["event"] == "check raised" for e in logs):
            assert time.monotonic() < deadline, "the check never ran"
            await asyncio.sleep(0.05)
        await scheduler.stop(1)
    raised = next(e for e in logs if e["event"] == "check raised")
    assert "full" in raised["error"]
    assert registry.get_sample_value(
        "sitemap_monitor_checks_total", {"target": "shop", "outcome": "error"}) == 1
    assert registry.get_sample_value(
        "sitemap_monitor_checks_total", {"target": "shop", "outcome": "failed"}) == 0



async def test_a_check_whose_lease_ran_out_and_was_claimed_again_here_stores_once(
    sqlite_engine: Engine,
) -> None:
    """Paused past its lease (SIGSTOP), a replica wakes and claims the target again while its
    old check still runs: no second check starts, and the old one stores and gives the lease
    back once. Had another replica stored a check of the target in between, the old check
    would store nothing (tests/pipeline/test_check_conflict.py)."""
    calls: list[str] = []
    reclaimed = asyncio.Event()

    def lease_until() -> datetime | None:
        with sqlite_engine.connect() as conn:
            found = conn.execute(select(targets.c.lease_until)).scalar_one()
        return None if found is None else found.replace(tzinfo=UTC)

    async def check(t: config.Target, lease: store.Lease) -> CheckResult:
        calls.append(t.name)
        # What a pause does: the lease runs out and the target is due.
        past = datetime.now(UTC) - timedelta(seconds=5)
        with sqlite_engine.begin() as conn:
            conn.execute(targets.update().values(lease_until=past, lease_owner=None,
                                                 next_due_at=past))
        # This replica claims it again (its heartbeat renews only after 10 s).
        await until_async(lambda: (lease_until() or past) > datetime.now(UTC),
                          what="the claim again")
        reclaimed.set()

        def store_it() -> None:
            with sqlite_engine.begin() as conn:
                store.give_back(conn, lease)

        await asyncio.to_thread(store_it)
        return CheckResult(target=t.name, url=t.url, outcome="ok", duration_seconds=0.01,
                           snapshot_id=1)

    scheduler = Scheduler(
        engine=sqlite_engine, check=check, metrics=Metrics(CollectorRegistry(), [], []),
        owner="r1", settings=config.Scheduler(lease=30))
    with capture_logs() as logs:
        await scheduler.start([target("a", 60)])
        await until_async(lambda: any(e["event"].startswith("lease lost") or e["event"] == "check"
                                      for e in logs), what="the check's end")
        await scheduler.stop(1)
    assert reclaimed.is_set()
    assert [e["event"] for e in logs if e["event"].startswith("lease lost")
            or e["event"] == "check"] == ["check"]
    assert calls == ["a"]
    owner, due = lease_row(sqlite_engine, "a")
    assert owner is None  # given back by the check, with its next due time
    assert due > datetime.now(UTC)
