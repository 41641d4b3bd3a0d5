"""The Notifier protocol every channel implements, and the HTTP posting the HTTP channels share.

Every answer is read to a bound (``monitor.net.bounded``): a receiver's status, headers and
first few KiB, however much it sends. A channel raises ``DeliveryError``: ``permanent`` for
refusals a retry cannot fix (4xx other than 408 and 429, a redirect, a bad address), else
transient with ``retry_after`` when the
receiver said when to come back. Messages name the receiver by ``redact_url`` only, since
webhook URLs carry their credentials in the path.
"""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime
from typing import Protocol

import httpx

from monitor import __version__
from monitor.alerts.payload import redact_url
from monitor.config import Channel
from monitor.core.errors import DeliveryError, FetchError
from monitor.core.model import Notification
from monitor.net import bounded

__all__ = ["USER_AGENT", "Notifier", "parse_retry_after", "post"]

USER_AGENT = f"sitemap-monitor/{__version__}"
_RETRYABLE = frozenset({408, 429})


class Notifier(Protocol):
    """Sends one notification to one configured channel."""

    channel: Channel

    async def send(self, notification: Notification) -> None:
        """Deliver or raise ``DeliveryError``."""


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - (now or datetime.now(UTC))).total_seconds())


async def post(client: httpx.AsyncClient, channel: Channel, url: str, body: bytes,
               headers: dict[str, str]) -> bounded.Reply:
    """POST ``body``, read the answer to its bound and map it to success or a
    ``DeliveryError``."""
    where = f"channel {channel.name} ({redact_url(url)})"
    merged = {"User-Agent": USER_AGENT, **channel.headers, **headers}
    try:
        request = client.build_request("POST", url, content=body, headers=merged,
                                       timeout=channel.timeout)
        response = await bounded.send(client, request, where=redact_url(url),
                                      within=channel.timeout)
    except httpx.TimeoutException:
        raise DeliveryError(f"{where}: timed out after {channel.timeout:g}s") from None
    except httpx.InvalidURL:
        raise DeliveryError(f"{where}: invalid URL", permanent=True) from None
    except FetchError as exc:  # the address rules, or a name that does not resolve
        raise DeliveryError(f"{where}: {exc.message}", permanent=exc.permanent) from None
    except httpx.HTTPError as exc:
        # The text of transport errors is the OS's ("Connection refused"), never the URL;
        # still strip it to be sure no token leaks into logs or the outbox.
        reason = str(exc).replace(url, redact_url(url)) or exc.__class__.__name__
        raise DeliveryError(f"{where}: {reason}") from None
    status = response.status
    if status < 300:
        return response
    snippet = response.text(200)
    message = f"{where}: HTTP {status}" + (f": {snippet}" if snippet else "")
    if response.cut:
        message += f" (answer cut at {bounded.KEEP // 1024} KiB)"
    if status in _RETRYABLE or status >= 500:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        raise DeliveryError(message, retry_after=retry_after)
    raise DeliveryError(message, permanent=True)
