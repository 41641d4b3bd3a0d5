"""The Alertmanager channel: Prometheus Alertmanager API v2 (``POST /api/v2/alerts``).

Labels identify the alert (Alertmanager groups, routes and silences on them): ``alertname``
(the rule), ``target``, ``rule``, ``severity``. A firing alert is sent with ``endsAt`` the
channel's ``alert_ttl`` ahead, and re-sent on every check while it fires, so it stays active
while the daemon runs and expires on its own if the daemon is gone; a resolve sends
``endsAt`` = now.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from monitor.alerts.notifier import post
from monitor.alerts.payload import iso, text_lines
from monitor.config import Channel
from monitor.core.model import Notification

__all__ = ["AlertmanagerNotifier", "alerts"]

_TEST_TTL = timedelta(minutes=5)  # long enough to see it, short enough not to page twice


def alerts(notification: Notification, channel: Channel, now: datetime) -> list[dict[str, Any]]:
    """The request body: one alert."""
    payload = notification.payload
    labels = {
        "alertname": notification.rule,
        "target": notification.target_name,
        "rule": notification.rule,
        "severity": notification.severity,
    }
    if notification.state == "test":
        labels["test"] = "true"
    annotations = {
        "summary": str(payload.get("summary", "")),
        "description": "\n".join(text_lines(payload)).strip(),
    }
    alert: dict[str, Any] = {"labels": labels, "annotations": annotations}
    link = payload.get("link")
    if link:
        annotations["api"] = str(link)
    if payload.get("page"):
        annotations["page"] = str(payload["page"])
    if link or payload.get("page"):
        alert["generatorURL"] = str(link or payload["page"])
    starts = str(payload.get("since") or iso(now))
    alert["startsAt"] = starts
    if notification.state == "resolved":
        alert["endsAt"] = iso(now)
    elif notification.state == "test":
        alert["endsAt"] = iso(now + _TEST_TTL)
    else:
        alert["endsAt"] = iso(now + timedelta(seconds=channel.alert_ttl))
    return [alert]


class AlertmanagerNotifier:
    """POSTs alerts to ``{url}/api/v2/alerts``."""

    def __init__(self, channel: Channel, client: httpx.AsyncClient) -> None:
        self.channel = channel
        self.client = client

    async def send(self, notification: Notification) -> None:
        """Deliver or raise ``DeliveryError``."""
        assert self.channel.url is not None  # the config requires it
        url = self.channel.url.rstrip("/") + "/api/v2/alerts"
        raw = json.dumps(alerts(notification, self.channel, datetime.now(UTC)))
        await post(self.client, self.channel, url, raw.encode("utf-8"),
                   {"Content-Type": "application/json"})
