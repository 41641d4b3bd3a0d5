"""The outbox survives SIGKILL and shares work between processes; delivery latency measured.

Delivery processes are real subprocesses (deliver_process.py) on a real SQLite file or a
fresh PostgreSQL database; the receiver counts accepted deliveries per idempotency key.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alerttools import result, store_check
from conftest import Receiver
from httpserver import Reply
from sqlalchemy import Engine

from monitor.alerts.delivery import Deliverer
from monitor.alerts.payload import idempotency_key
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.core.model import Notification
from monitor.store.outbox import SqlOutbox, write

SCRIPT = Path(__file__).with_name("deliver_process.py")


class Process:
    """A delivery subprocess whose outcome lines are collected by a thread."""

    def __init__(self, engine: Engine, hook_url: str, owner: str, lease: float = 30.0) -> None:
        url = engine.url.render_as_string(hide_password=False)
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), url, hook_url, owner, str(lease)],
            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2],
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: "ready" in self.lines, limit=30)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def outcomes(self) -> Counter[str]:
        """Delivery outcomes printed so far."""
        return Counter(line for line in self.lines if line != "ready")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the process (SIGKILL: no cleanup, no lease release)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    """Delivery processes started by a test, all killed at its end."""
    started: list[Process] = []
    yield started
    for p in started:
        p.kill()


def wait_for(done: Callable[[], object], limit: float = 20.0) -> None:
    """Poll until ``done()`` is true."""
    start = time.monotonic()
    while not done():
        assert time.monotonic() - start < limit, "timed out"
        time.sleep(0.01)


def cfg(url: str) -> Alerts:
    """One webhook channel and a removal rule."""
    return Alerts(channels=[Channel(name="hook", type="webhook", url=url,
                                    secret="k")],  # noqa: S106
                  rules=[Rule(name="mass-removal", when="removed", channels=["hook"])])


def raise_one(engine: Engine, url: str) -> str:
    """A check that raises one notification; its idempotency key."""
    now = datetime.now(UTC)
    store_check(engine, cfg(url), result(urls=10, added=10), now)
    [note] = store_check(engine, cfg(url), result(urls=5, removed=5), now)
    return note.idempotency_key


def enqueue(engine: Engine, count: int) -> list[str]:
    """``count`` notifications for as many targets, written in one transaction."""
    notes = [
        Notification(target_name=f"t{i}", rule="r", channel="hook", state="firing",
                     severity="warning", idempotency_key=idempotency_key(f"t{i}", "r", "hook",
                                                                         None, "firing"),
                     payload={"target": f"t{i}", "rule": "r", "summary": "test"})
        for i in range(count)
    ]
    with engine.begin() as conn:
        write(conn, None, notes, datetime.now(UTC))
    return [n.idempotency_key for n in notes]


@pytest.mark.slow
def test_sigkill_after_a_failed_attempt(engine: Engine, receiver: Receiver,
                                        processes: list[Process]) -> None:
    """Receiver failing, deliverer SIGKILLed, receiver back, new deliverer: delivered once."""
    receiver.script = [Reply(503)] * 10_000
    key = raise_one(engine, receiver.url)
    processes.append(first := Process(engine, receiver.url, "replica-a"))
    wait_for(lambda: first.outcomes()["retry"] >= 2)
    first.kill()
    with receiver.lock:
        receiver.script.clear()
    processes.append(second := Process(engine, receiver.url, "replica-b"))
    wait_for(lambda: receiver.accepted)
    time.sleep(0.5)  # a duplicate would arrive here
    assert receiver.keys() == {key: 1}
    assert second.outcomes() == {"sent": 1}
    assert SqlOutbox(engine).status(key)["status"] == "delivered"  # type: ignore[index]


@pytest.mark.slow
def test_sigkill_during_a_send(engine: Engine, receiver: Receiver,
                               processes: list[Process]) -> None:
    """Killed while the request is in flight: the lease expires, the next process delivers once."""
    receiver.script = [Reply(200, delay=30)]  # never answers before the kill
    key = raise_one(engine, receiver.url)
    processes.append(first := Process(engine, receiver.url, "replica-a", lease=1.5))
    wait_for(lambda: receiver.attempts())
    lease_until = SqlOutbox(engine).status(key)["lease_until"]  # type: ignore[index]
    first.kill()
    killed_at = time.monotonic()
    processes.append(Process(engine, receiver.url, "replica-b", lease=1.5))
    wait_for(lambda: receiver.accepted)
    second_attempt = receiver.accepted[0].time
    time.sleep(0.5)
    assert receiver.keys() == {key: 1}
    assert len(receiver.attempts()) == 2
    # The dead process's lease was respected: no re-send before it ran out. (Measured against
    # the lease itself: the first request reaches the receiver a moment after the claim, a
    # long moment on a loaded machine.)
    if lease_until.tzinfo is None:
        lease_until = lease_until.replace(tzinfo=UTC)
    wall = second_attempt + time.time() - time.monotonic()
    assert wall >= lease_until.timestamp() - 0.05
    assert second_attempt >= killed_at


@pytest.mark.slow
def test_two_deliverers_deliver_each_notification_once(
    engine: Engine, receiver: Receiver, processes: list[Process]
) -> None:
    """Two processes polling one database: every notification is sent exactly once."""
    receiver.server.route(receiver.path, lambda r: (receiver.accepted.append(r),
                                                    Reply(200, delay=0.1))[1])
    processes.append(a := Process(engine, receiver.url, "replica-a"))
    processes.append(b := Process(engine, receiver.url, "replica-b"))
    keys = enqueue(engine, 40)
    wait_for(lambda: len(receiver.accepted) >= 40)
    time.sleep(0.5)
    sent = receiver.keys()
    assert sent == dict.fromkeys(keys, 1)
    assert len(receiver.attempts()) == 40
    assert a.outcomes()["sent"] + b.outcomes()["sent"] == 40
    assert a.outcomes()["sent"] > 0
    assert b.outcomes()["sent"] > 0
    assert SqlOutbox(engine).pending_count() == 0


@pytest.mark.slow
@pytest.mark.parametrize("poll", [1.0, 0.1])
def test_delivery_latency(engine: Engine, receiver: Receiver, poll: float,
                          capsys: pytest.CaptureFixture[str]) -> None:
    """Seconds from the committed outbox row to the receiver, with the loop polling."""
    count = 8
    channel = Channel(name="hook", type="webhook", url=receiver.url)
    deliverer = Deliverer([channel], SqlOutbox(engine), owner="latency",
                          delivery=Delivery(), poll_interval=poll)
    committed: dict[str, float] = {}
    rng = random.Random(3)

    def produce() -> None:
        for i in range(count):
            time.sleep(rng.uniform(0.05, 0.4))
            key = idempotency_key("lat", "r", "hook", i, "firing")
            note = Notification(target_name="lat", rule=f"r{i}", channel="hook",
                                state="firing", severity="info", idempotency_key=key,
                                payload={"summary": "latency"})
            with engine.begin() as conn:
                write(conn, None, [note], datetime.now(UTC))
            committed[key] = time.monotonic()

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(deliverer.run(stop))
        await asyncio.to_thread(produce)
        await asyncio.to_thread(wait_for, lambda: len(receiver.accepted) >= count)
        stop.set()
        await task

    asyncio.run(scenario())
    latencies = sorted(r.time - committed[r.headers["idempotency-key"]]
                       for r in receiver.accepted)
    assert len(latencies) == count
    assert max(latencies) < poll + 1.0
    with capsys.disabled():
        print(f"\n[latency {engine.dialect.name} poll={poll}s n={count}] "
              f"min={latencies[0]:.3f}s median={statistics.median(latencies):.3f}s "
              f"max={latencies[-1]:.3f}s")
