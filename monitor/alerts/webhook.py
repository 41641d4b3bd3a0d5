"""The generic webhook channel: the payload as JSON, signed when the channel has a secret.

Receivers verify ``X-Sitemap-Monitor-Signature: sha256=<hex>``, the HMAC-SHA256 of the raw
request body keyed with the channel secret, and deduplicate on ``Idempotency-Key``.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx

from monitor.alerts.notifier import post
from monitor.config import Channel
from monitor.core.model import Notification

__all__ = ["SIGNATURE_HEADER", "WebhookNotifier", "body", "sign"]

SIGNATURE_HEADER = "X-Sitemap-Monitor-Signature"


def sign(secret: str, raw: bytes) -> str:
    """The signature header value for ``raw`` under ``secret``."""
    digest = hmac.new(secret.encode("utf-8"), raw, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def body(notification: Notification) -> bytes:
    """The request body: the payload plus the notification's identity."""
    document = {
        **notification.payload,
        "channel": notification.channel,
        "state": notification.state,
        "idempotency_key": notification.idempotency_key,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


class WebhookNotifier:
    """POSTs JSON to the channel's URL."""

    def __init__(self, channel: Channel, client: httpx.AsyncClient) -> None:
        self.channel = channel
        self.client = client

    async def send(self, notification: Notification) -> None:
        """Deliver or raise ``DeliveryError``."""
        raw = body(notification)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": notification.idempotency_key,
        }
        if self.channel.secret:
            headers[SIGNATURE_HEADER] = sign(self.channel.secret, raw)
        assert self.channel.url is not None  # the config requires it
        await post(self.client, self.channel, self.channel.url, raw, headers)
