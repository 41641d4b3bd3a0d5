"""Three replicas on one PostgreSQL database share the targets (SPEC 10).

20 targets with 1-2 s intervals for about 20 s: no target is ever checked twice within its
interval (every due check runs once, not once per replica), none misses more than the slack of
scheduling, and after a SIGKILL of one replica its targets are taken over once its lease runs out.
"""

from __future__ import annotations

import itertools
import signal
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness import Daemon, sitemap
from httpserver import Reply, TestServer
from sqlalchemy import Engine, func, select

from monitor.store import db
from monitor.store.schema import snapshots, targets

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TARGETS = 20
LEASE = 3.0
BEFORE_KILL = 10.0
AFTER_KILL = 10.0
# Seconds a check may start late: the claim, the check's own start, the scheduler's wake-up.
SLACK = 0.6


def interval_of(i: int) -> float:
    """Half the targets every second, half every two seconds."""
    return 1.0 if i % 2 == 0 else 2.0


def test_three_replicas_check_each_due_target_once(
    http_server: TestServer, tmp_path: Path, postgres_url: str
) -> None:
    engine = db.make_engine(postgres_url)
    db.upgrade(engine)
    lines = [
        f"database_url: {postgres_url}",
        "listen: 127.0.0.1:0",
        "defaults: {jitter: 10%, timeout: 5s}",
        f"scheduler: {{lease: {LEASE}s, shutdown_grace: 2s}}",
        "targets:",
    ]
    for i in range(TARGETS):
        http_server.route(f"/t{i}.xml", Reply(body=sitemap({http_server.url(f"/t{i}/a"): None})))
        lines.append(
            f'  - {{name: t{i}, url: "{http_server.url(f"/t{i}.xml")}", '
            f"interval: {interval_of(i)}s}}")
    config = tmp_path / "c.yaml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    replicas = [Daemon(config) for _ in range(3)]
    try:
        replicas[0].started(timeout=30)
        begin = time.monotonic()  # checks may start from here on
        for replica in replicas[1:]:
            replica.started(timeout=30)
        time.sleep(BEFORE_KILL - (time.monotonic() - begin))
        victim = replicas[0]
        victim.proc.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = datetime.now(UTC)
        time.sleep(AFTER_KILL)
        for replica in replicas[1:]:
            replica.signal(signal.SIGTERM)
        for replica in replicas[1:]:
            assert replica.wait(20) == 0
        elapsed = time.monotonic() - begin
    finally:
        for replica in replicas:
            replica.stop()

    with engine.connect() as conn:
        rows = conn.execute(
            select(targets.c.name, snapshots.c.started_at)
            .join(snapshots, snapshots.c.target_id == targets.c.id)
            .order_by(snapshots.c.id)
        ).all()
    engine.dispose()
    starts: dict[str, list[datetime]] = defaultdict(list)
    for name, started_at in rows:
        starts[name].append(started_at)
    assert len(starts) == TARGETS

    by_replica = [len(r.checks()) for r in replicas]
    summary = []
    for i in range(TARGETS):
        name, interval = f"t{i}", interval_of(i)
        times = sorted(starts[name])
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        # Never twice within an interval: no due check ran on two replicas. (A snapshot's time
        # is when its check began, a little after the claim the schedule counts from.)
        assert min(gaps) >= interval - 0.35, (name, gaps)
        # Never much later than due, except once around the kill (the lease must run out).
        late = [g for g in gaps if g > interval * 1.1 + SLACK]
        assert len(late) <= 1, (name, gaps)
        assert all(g <= interval + LEASE + 2 * SLACK + 1 for g in gaps), (name, gaps)
        expected = elapsed / interval
        assert len(times) >= 0.7 * expected - LEASE, (name, len(times), expected)
        assert len(times) <= expected + 2, (name, len(times), expected)
        summary.append((name, interval, len(times), round(expected, 1)))
        # The survivors took over every target, the victim's included, once its lease ran out.
        taken_over = killed_at + timedelta(seconds=LEASE + 1)
        assert sum(t > taken_over for t in times) >= 2, (name, times, killed_at)
    assert all(n > 0 for n in by_replica), by_replica
    total = sum(n for _, _, n, _ in summary)
    print(f"\nreplicas: {elapsed:.1f}s, {total} snapshots, by replica (log lines) {by_replica}")
    for name, interval, n, expected in summary:
        print(f"  {name} every {interval:g}s: {n} snapshots (elapsed/interval {expected})")


PAUSED_TARGETS = 6
PAUSE_LEASE = 2.0


def test_a_replica_paused_past_its_lease_writes_nothing(
    http_server: TestServer, tmp_path: Path, postgres_url: str
) -> None:
    """Replica 0 claims every target and is SIGSTOPped mid-check; the others take the targets
    over once its leases run out and check them when they are next due; when replica 0 wakes,
    its checks must roll back: no two snapshots of a target overlap in time (SPEC 10)."""
    engine = db.make_engine(postgres_url)
    db.upgrade(engine)
    lines = [
        f"database_url: {postgres_url}",
        "listen: 127.0.0.1:0",
        "defaults: {jitter: 0%, timeout: 20s}",
        f"scheduler: {{lease: {PAUSE_LEASE}s, shutdown_grace: 2s, per_host: 16}}",
        "targets:",
    ]
    for i in range(PAUSED_TARGETS):
        # 2 s to answer: every check is in flight when replica 0 stops
        body = sitemap({http_server.url(f"/p{i}/a"): None})
        http_server.route(f"/p{i}.xml", Reply(body=body, delay=2.0))
        lines.append(f'  - {{name: p{i}, url: "{http_server.url(f"/p{i}.xml")}", '
                     "interval: 3s}")
    config = tmp_path / "c.yaml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    paused = Daemon(config)
    others: list[Daemon] = []
    try:
        paused.started(timeout=30)
        deadline = time.monotonic() + 10
        while len(http_server.requests) < PAUSED_TARGETS and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(http_server.requests) == PAUSED_TARGETS, "replica 0 never started its checks"
        paused.proc.send_signal(signal.SIGSTOP)
        others = [Daemon(config) for _ in range(2)]
        for replica in others:
            replica.started(timeout=30)
        deadline = time.monotonic() + 30
        while _snapshot_count(engine) < PAUSED_TARGETS and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _snapshot_count(engine) == PAUSED_TARGETS, "the others never took over"
        paused.proc.send_signal(signal.SIGCONT)
        for i in range(PAUSED_TARGETS):  # replica 0's checks end, one way or the other
            paused.wait_for(lambda line, i=i: line.get("target") == f"p{i}" and (
                line.get("event") in ("check", "lease lost: the check is rolled back")),
                timeout=30)
        for replica in [paused, *others]:
            replica.signal(signal.SIGTERM)
        for replica in [paused, *others]:
            assert replica.wait(20) == 0
    finally:
        for replica in [paused, *others]:
            if replica.proc.poll() is None:
                replica.proc.send_signal(signal.SIGCONT)  # a stopped process ignores SIGTERM
            replica.stop()

    with engine.connect() as conn:
        rows = conn.execute(
            select(targets.c.name, snapshots.c.started_at, snapshots.c.finished_at)
            .join(snapshots, snapshots.c.target_id == targets.c.id)
            .order_by(targets.c.name, snapshots.c.started_at)
        ).all()
    engine.dispose()
    spans: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for name, started_at, finished_at in rows:
        spans[name].append((started_at, finished_at))
    for name, found in spans.items():
        for (_, end), (start, _) in itertools.pairwise(found):
            assert end <= start, f"{name}: two snapshots overlap in time: {found}"
    assert sorted(spans) == [f"p{i}" for i in range(PAUSED_TARGETS)]
    lost = [line for line in paused.lines
            if line.get("event") == "lease lost: the check is rolled back"]
    assert sorted(line["target"] for line in lost) == [f"p{i}" for i in range(PAUSED_TARGETS)]


def _snapshot_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(snapshots)).scalar_one())
