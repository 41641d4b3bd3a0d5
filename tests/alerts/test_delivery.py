"""The delivery loop against real receivers on 127.0.0.1: webhook, Slack, retries, failures."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import structlog
from alerttools import SECRET, T0, result, store_check, verify_signature
from conftest import PortHook, Receiver
from httpserver import Reply
from sqlalchemy import Engine, select

from monitor.alerts import send_test
from monitor.alerts.delivery import Deliverer, backoff
from monitor.alerts.payload import redact_url
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.core.errors import DeliveryError
from monitor.core.model import Change, EntryState
from monitor.store.outbox import SqlOutbox
from monitor.store.schema import notifications

FAST = Delivery(initial_backoff=0.05, max_backoff=0.2, max_age=3600)


def config(*channels: Channel, when: str = "removed") -> Alerts:
    """One rule sending to every given channel."""
    return Alerts(channels=list(channels), rules=[
        Rule(name="mass-removal", when=when, channels=[c.name for c in channels],
             severity="critical")  # type: ignore[arg-type]
    ])


def hook(url: str, **extra: object) -> Channel:
    """A webhook channel with the test secret."""
    return Channel.model_validate({"name": "hook", "type": "webhook", "url": url,
                                   "secret": SECRET, **extra})


def raise_alert(engine: Engine, cfg: Alerts, now: datetime | None = None,
                removed: int = 3) -> str:
    """A first check, then one that removes URLs; returns the notification's idempotency key."""
    now = now or datetime.now(UTC)
    store_check(engine, cfg, result(urls=100, added=100), now - timedelta(hours=1))
    check = replace(result(urls=100 - removed, removed=removed),
                    changes=[Change("removed", f"https://shop.example/p/{i}", EntryState(), None)
                             for i in range(removed)])
    [note] = store_check(engine, cfg, check, now)
    return note.idempotency_key


def deliverer(engine: Engine, *channels: Channel, outcomes: list[tuple[str, str]] | None = None,
              delivery: Delivery = FAST, **kwargs: object) -> Deliverer:
    """A Deliverer on the engine that records outcomes."""
    record = outcomes.append if outcomes is not None else None
    return Deliverer(channels, SqlOutbox(engine), owner="test", delivery=delivery,
                     on_result=(lambda c, o: record((c, o))) if record else None,
                     poll_interval=0.02, rng=random.Random(1), **kwargs)  # type: ignore[arg-type]


def row(engine: Engine, key: str) -> dict[str, object]:
    """The outbox row of a notification."""
    status = SqlOutbox(engine).status(key)
    assert status is not None
    return status


def one_pass(d: Deliverer) -> int:
    """One delivery pass in its own event loop, closing the HTTP client afterwards."""

    async def go() -> int:
        try:
            return await d.deliver_due()
        finally:
            await d.aclose()

    return asyncio.run(go())


async def until(done: Callable[[], object], limit: float = 10.0) -> None:
    """Wait for a condition that a receiver thread makes true."""
    start = time.monotonic()
    while not done():  # set by a receiver thread
        assert time.monotonic() - start < limit, "timed out"
        await asyncio.sleep(0.01)


async def run_until(d: Deliverer, done: Callable[[], object]) -> None:
    """Run the delivery loop until ``done()`` is true."""
    stop = asyncio.Event()
    task = asyncio.create_task(d.run(stop))
    try:
        await until(done)
    finally:
        stop.set()
        await task


def test_webhook_payload_and_signature(engine: Engine, receiver: Receiver) -> None:
    """The receiver gets the payload, a valid HMAC signature and the idempotency key."""
    channel = hook(receiver.url, headers={"X-Team": "seo"})
    key = raise_alert(engine, config(channel))
    outcomes: list[tuple[str, str]] = []
    d = deliverer(engine, channel, outcomes=outcomes)
    assert one_pass(d) == 1
    [request] = receiver.attempts()
    assert verify_signature(request)
    assert not verify_signature(request, secret="wrong")  # noqa: S106
    assert request.headers["idempotency-key"] == key
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-team"] == "seo"
    body = json.loads(request.body)
    assert (body["target"], body["rule"], body["state"], body["severity"]) == (
        "shop", "mass-removal", "firing", "critical")
    assert body["counts"]["removed"] == 3
    assert body["examples"]["removed"] == [f"https://shop.example/p/{i}" for i in range(3)]
    assert body["idempotency_key"] == key
    assert outcomes == [("hook", "sent")]
    assert row(engine, key)["status"] == "delivered"
    assert SqlOutbox(engine).pending_count() == 0
    assert one_pass(d) == 0  # nothing left: no second send


def test_no_signature_without_secret(sqlite_engine: Engine, receiver: Receiver) -> None:
    """Without a secret the request carries no signature header."""
    channel = Channel(name="hook", type="webhook", url=receiver.url)
    raise_alert(sqlite_engine, config(channel))
    one_pass(deliverer(sqlite_engine, channel))
    [request] = receiver.attempts()
    assert "x-sitemap-monitor-signature" not in request.headers


def test_retry_after_then_delivered_once(engine: Engine, receiver: Receiver) -> None:
    """503 with Retry-After: 1, then 200: one accepted delivery, sent no sooner than asked."""
    receiver.script = [Reply(503, b"busy", {"Retry-After": "1"})]
    channel = hook(receiver.url)
    key = raise_alert(engine, config(channel))
    outcomes: list[tuple[str, str]] = []
    d = deliverer(engine, channel, outcomes=outcomes)

    async def scenario() -> None:
        await run_until(d, lambda: receiver.accepted)
        await asyncio.sleep(0.3)  # a duplicate would show up here
        await d.aclose()

    asyncio.run(scenario())
    first, second = receiver.attempts()
    assert second.time - first.time >= 0.95
    assert receiver.keys() == {key: 1}
    assert outcomes == [("hook", "retry"), ("hook", "sent")]
    assert row(engine, key)["attempts"] == 2
    assert "HTTP 503" in str(row(engine, key)["last_error"])


def test_receiver_down_then_up(sqlite_engine: Engine, port_hook: PortHook) -> None:
    """Connection refused for a while, then the receiver starts: delivered once."""
    channel = hook(port_hook.url)
    key = raise_alert(sqlite_engine, config(channel))
    outcomes: list[tuple[str, str]] = []
    d = deliverer(sqlite_engine, channel, outcomes=outcomes)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(d.run(stop))
        await until(lambda: len(outcomes) >= 3)
        port_hook.up()
        await until(lambda: port_hook.accepted)
        await asyncio.sleep(0.3)
        stop.set()
        await task

    asyncio.run(scenario())
    assert [a["key"] for a in port_hook.accepted] == [key]
    assert outcomes[-1] == ("hook", "sent")
    assert {o for _, o in outcomes[:-1]} == {"retry"}
    assert row(sqlite_engine, key)["status"] == "delivered"


def test_client_error_is_permanent(engine: Engine, receiver: Receiver) -> None:
    """A 400 is not retried: failed at once, one request."""
    receiver.script = [Reply(400, b"bad payload")]
    channel = hook(receiver.url)
    key = raise_alert(engine, config(channel))
    outcomes: list[tuple[str, str]] = []
    d = deliverer(engine, channel, outcomes=outcomes)
    one_pass(d)
    one_pass(d)
    assert len(receiver.attempts()) == 1
    assert outcomes == [("hook", "failed")]
    stored = row(engine, key)
    assert stored["status"] == "failed"
    assert "HTTP 400: bad payload" in str(stored["last_error"])


@pytest.mark.parametrize("status", [408, 429, 500, 502])
def test_transient_statuses_retry(sqlite_engine: Engine, receiver: Receiver,
                                  status: int) -> None:
    """408, 429 and 5xx are retried, not failed."""
    receiver.script = [Reply(status)]
    channel = hook(receiver.url)
    key = raise_alert(sqlite_engine, config(channel))
    outcomes: list[tuple[str, str]] = []
    one_pass(deliverer(sqlite_engine, channel, outcomes=outcomes))
    assert outcomes == [("hook", "retry")]
    assert row(sqlite_engine, key)["status"] == "pending"


def test_gives_up_after_max_age(sqlite_engine: Engine, receiver: Receiver) -> None:
    """Past delivery.max_age a row is failed as expired, sent or not."""
    receiver.script = [Reply(503)] * 3
    channel = hook(receiver.url)
    key = raise_alert(sqlite_engine, config(channel), now=T0)
    delivery = Delivery(initial_backoff=30, max_backoff=60, max_age=60)
    outcomes: list[tuple[str, str]] = []
    # 50s after creation: the send fails and the next attempt would be past max_age.
    d = deliverer(sqlite_engine, channel, outcomes=outcomes, delivery=delivery,
                  clock=lambda: T0 + timedelta(seconds=50))
    one_pass(d)
    assert outcomes == [("hook", "expired")]
    assert len(receiver.attempts()) == 1
    assert row(sqlite_engine, key)["status"] == "failed"
    assert "max_age" in str(row(sqlite_engine, key)["last_error"])


def test_expired_rows_are_not_sent(sqlite_engine: Engine, receiver: Receiver) -> None:
    """A row older than max_age when its turn comes is not sent at all."""
    channel = hook(receiver.url)
    raise_alert(sqlite_engine, config(channel), now=T0)
    outcomes: list[tuple[str, str]] = []
    d = deliverer(sqlite_engine, channel, outcomes=outcomes, delivery=Delivery(max_age=60),
                  clock=lambda: T0 + timedelta(seconds=61))
    one_pass(d)
    assert outcomes == [("hook", "expired")]
    assert receiver.attempts() == []


def test_unknown_channel_fails(sqlite_engine: Engine, receiver: Receiver) -> None:
    """A row whose channel left the configuration is failed, not retried forever."""
    channel = hook(receiver.url)
    key = raise_alert(sqlite_engine, config(channel))
    outcomes: list[tuple[str, str]] = []
    other = Channel(name="other", type="webhook", url=receiver.url)
    one_pass(deliverer(sqlite_engine, other, outcomes=outcomes))
    assert outcomes == [("hook", "failed")]
    assert "not configured" in str(row(sqlite_engine, key)["last_error"])


def test_resolve_waits_for_its_firing(sqlite_engine: Engine, receiver: Receiver) -> None:
    """A resolved notification is not sent while the firing one it ends is still pending."""
    receiver.script = [Reply(503, headers={"Retry-After": "0"})]
    channel = hook(receiver.url)
    cfg = Alerts(channels=[channel], rules=[  # a state: a removal is an event, never resolved
        Rule(name="too-few", when="url_count_below", count=100, channels=["hook"])])
    now = datetime.now(UTC)
    [firing] = store_check(sqlite_engine, cfg, result(urls=50), now - timedelta(minutes=1))
    firing_key = firing.idempotency_key
    [resolved] = store_check(sqlite_engine, cfg, result(urls=100), now)
    d = deliverer(sqlite_engine, channel, delivery=Delivery(initial_backoff=0.2))
    assert one_pass(d) == 1  # only the firing one was due
    assert row(sqlite_engine, resolved.idempotency_key)["attempts"] == 0
    time.sleep(0.25)
    one_pass(d)
    one_pass(d)
    order = [r.headers["idempotency-key"] for r in receiver.accepted]
    assert order == [firing_key, resolved.idempotency_key]


def test_slack_message(sqlite_engine: Engine, receiver: Receiver) -> None:
    """Slack gets text plus blocks with counts, examples and the link."""
    slack = Channel(name="ops", type="slack", url=receiver.url)
    cfg = config(slack).model_copy(update={
        "delivery": Delivery(api_base_url="https://monitor.example")})
    raise_alert(sqlite_engine, cfg)
    one_pass(deliverer(sqlite_engine, slack))
    [request] = receiver.attempts()
    message = json.loads(request.body)
    assert "shop" in message["text"]
    assert "3 URLs removed" in message["text"]
    assert ":rotating_light:" in message["text"]
    dumped = json.dumps(message["blocks"])
    assert "https://shop.example/p/2" in dumped
    # the listing of exactly these removals: of their kind, from their check to their check
    assert re.search(r"https://monitor\.example/api/v1/targets/shop/changes"
                     r"\?kind=removed&since=(\d+)&until=\1\b", dumped), dumped
    assert any(b.get("fields") for b in message["blocks"])


def test_secrets_stay_out_of_errors_and_logs(sqlite_engine: Engine, port_hook: PortHook) -> None:
    """A Slack URL's token never reaches last_error, logs or the channel's repr."""
    token = "T00000000/B00000000/XXXXXXXXXXXXSECRETXXXX"  # noqa: S105 - a fake one
    url = f"http://127.0.0.1:{port_hook.port}/services/{token}?key=qsecret"
    slack = Channel(name="ops", type="slack", url=url, secret="hmac-secret")  # noqa: S106
    key = raise_alert(sqlite_engine, config(slack))
    with structlog.testing.capture_logs() as logs:
        one_pass(deliverer(sqlite_engine, slack))
    error = str(row(sqlite_engine, key)["last_error"])
    assert redact_url(url) in error
    for text in (error, json.dumps(logs, default=str), repr(slack), str(slack)):
        assert "SECRET" not in text
        assert "qsecret" not in text
        assert "hmac-secret" not in text


def test_send_test(receiver: Receiver) -> None:
    """``alerts test CHANNEL`` sends a signed test notification and reports refusals."""
    asyncio.run(send_test(hook(receiver.url)))
    [request] = receiver.attempts()
    assert verify_signature(request)
    assert json.loads(request.body)["state"] == "test"
    receiver.script = [Reply(401)]
    with pytest.raises(DeliveryError) as refused:
        asyncio.run(send_test(hook(receiver.url)))
    assert refused.value.permanent
    assert "HTTP 401" in refused.value.message


def test_backoff_grows_with_jitter_and_honours_retry_after() -> None:
    """Exponential from initial to max, jittered in the upper half; Retry-After wins."""
    delivery = Delivery(initial_backoff=5, max_backoff=600)
    rng = random.Random(7)
    for attempt, base in [(1, 5), (2, 10), (3, 20), (6, 160), (8, 600), (30, 600)]:
        delays = [backoff(attempt, delivery, rng=rng) for _ in range(200)]
        assert min(delays) >= max(base / 2, 5)
        assert max(delays) <= base
        if base > 5:
            assert max(delays) - min(delays) > base / 10  # jittered, not constant
    assert backoff(1, delivery, retry_after=120) == 120
    assert backoff(1, delivery, retry_after=0) == 5  # no hot loop on Retry-After: 0


def test_outbox_rows_are_durable_across_engines(tmp_path: object) -> None:
    """Rows written and committed are visible to a new engine (a restarted process)."""
    from monitor.store.db import make_engine, upgrade

    url = f"sqlite:///{tmp_path}/durable.db"
    first = make_engine(url)
    upgrade(first)
    key = raise_alert(first, config(hook("http://127.0.0.1:9/hook")))
    first.dispose()
    second = make_engine(url)
    with second.connect() as conn:
        keys = list(conn.execute(select(notifications.c.idempotency_key)).scalars())
    second.dispose()
    assert keys == [key]


def test_retry_after_forms() -> None:
    """Retry-After as seconds or as an HTTP date; garbage is ignored."""
    from monitor.alerts.notifier import parse_retry_after

    now = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
    assert parse_retry_after("120", now) == 120
    assert parse_retry_after("Mon, 06 Jan 2025 12:01:30 GMT", now) == 90
    assert parse_retry_after("Mon, 06 Jan 2025 11:00:00 GMT", now) == 0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None
