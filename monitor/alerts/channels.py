"""One Notifier per channel type, and the test notification of ``alerts test CHANNEL``."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import httpx

from monitor.alerts.alertmanager import AlertmanagerNotifier
from monitor.alerts.email import EmailNotifier
from monitor.alerts.notifier import USER_AGENT, Notifier
from monitor.alerts.payload import PAYLOAD_VERSION, iso
from monitor.alerts.slack import SlackNotifier
from monitor.alerts.webhook import WebhookNotifier
from monitor.config import Channel
from monitor.core.errors import DeliveryError
from monitor.core.model import Notification
from monitor.net import connections

__all__ = ["build_test_notification", "make_client", "make_notifier", "send_test"]


def make_client(transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """The one HTTP client the channels share: explicit timeouts and limits, connections only
    to the addresses ``post`` vetted."""
    limits = httpx.Limits(max_connections=20, max_keepalive_connections=10)
    return httpx.AsyncClient(
        transport=transport or connections.transport(limits, httpx.create_ssl_context()),
        timeout=httpx.Timeout(10.0, connect=5.0),
        limits=limits,
        headers={"User-Agent": USER_AGENT},
        follow_redirects=False,
        trust_env=False,  # a proxy from the environment must not see webhook tokens
    )


def make_notifier(channel: Channel, client: httpx.AsyncClient) -> Notifier:
    """The Notifier for this channel's type."""
    if channel.type == "webhook":
        return WebhookNotifier(channel, client)
    if channel.type == "slack":
        return SlackNotifier(channel, client)
    if channel.type == "alertmanager":
        return AlertmanagerNotifier(channel, client)
    return EmailNotifier(channel)


def build_test_notification(channel: Channel, now: datetime | None = None) -> Notification:
    """A harmless notification that says it is a test, with a fresh idempotency key."""
    now = now or datetime.now(UTC)
    payload = {
        "version": PAYLOAD_VERSION,
        "target": "sitemap-monitor",
        "url": None,
        "rule": "test",
        "when": "test",
        "severity": "info",
        "state": "test",
        "event": True,
        "snapshot_id": None,
        "checked_at": iso(now),
        "since": iso(now),
        "summary": f"Test notification for channel {channel.name}: delivery works.",
        "counts": {},
        "examples": {},
        "examples_truncated": False,
        "error": None,
        "link": None,
    }
    return Notification(
        target_name="sitemap-monitor",
        rule="test",
        channel=channel.name,
        state="test",
        severity="info",
        idempotency_key=f"test-{secrets.token_hex(16)}",
        payload=payload,
    )


async def send_test(channel: Channel, *,
                    transport: httpx.AsyncBaseTransport | None = None) -> None:
    """Send a test notification now, bypassing the outbox; raises ``DeliveryError``."""
    async with make_client(transport) as client:
        notifier = make_notifier(channel, client)
        try:
            await notifier.send(build_test_notification(channel))
        except DeliveryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a channel bug still reaches the CLI as one line
            raise DeliveryError(f"channel {channel.name}: {exc.__class__.__name__}") from None
