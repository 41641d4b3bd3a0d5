"""The one robots.txt reader and its cache, shared by a check's robots.txt watch and the URL
checks, so that a version either of them reads is in force for both.

``read`` fetches a robots.txt as Google does (RFC 9309 and Google's documentation): redirects
followed up to 5 hops, past them it counts as absent; every 4xx but 429 means "no robots.txt"
(everything allowed); a 429, a 5xx or no answer at all means it cannot be read (the caller keeps
the last good version); only the first 500 KiB (512,000 bytes) are read. It returns a
``robots.Answer``, which ``robots.judge`` turns into a finding.

``RobotsCache`` holds the version in force of each robots.txt, with the time it was read: a
newer version offered by anyone (the watch, the URL checks, a stored version another replica's
check wrote) replaces an older one, and none is used past a day, as Google caches a robots.txt
up to a day.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from monitor import config
from monitor.core.errors import FetchError
from monitor.read.fetch import Fetcher
from monitor.robots import judge as robots
from monitor.robots.matcher import MAX_BYTES, RobotsRules

__all__ = ["MAX_HOPS", "TTL", "Held", "RobotsCache", "failed", "read"]

MAX_HOPS = 5  # Google follows five redirect hops for a robots.txt, then treats it as a 404
TTL = timedelta(days=1)  # Google caches a robots.txt up to a day
KEPT = timedelta(days=30)  # and uses the last good one up to 30 days while it cannot be read


async def read(fetcher: Fetcher, url: str, settings: config.Defaults, *,
               etag: str | None = None, last_modified: str | None = None,
               allow_private: bool = False) -> tuple[robots.Answer, int]:
    """The answer for robots.txt ``url`` (conditional with ``etag``/``last_modified``) and the
    bytes it took on the wire."""
    hops = settings.model_copy(update={"max_redirects": MAX_HOPS})
    try:
        async with fetcher.fetch(url, hops, etag=etag, last_modified=last_modified,
                                 allow_private=allow_private) as response:
            if response.not_modified:
                answer = robots.Answer(response.status, not_modified=True,
                                       etag=response.etag or etag,
                                       last_modified=response.last_modified or last_modified)
                return answer, response.wire_bytes
            data = bytearray()
            async for chunk in response.chunks():
                data += chunk
                if len(data) >= MAX_BYTES:
                    break
            text = bytes(data[:MAX_BYTES]).decode("utf-8", "replace").lstrip("\ufeff")
            return robots.Answer(response.status, text, etag=response.etag,
                                 last_modified=response.last_modified), response.wire_bytes
    except FetchError as exc:
        return failed(exc), 0


def failed(exc: FetchError) -> robots.Answer:
    """The answer of a robots.txt fetch that raised: redirects past 5 hops (or a loop) and a
    4xx are no robots.txt, as Google reads them; a 429 keeps its status (``robots.judge``
    reads it as unreachable); anything else is no answer."""
    if exc.kind == "redirects":
        return robots.Answer(None)
    if exc.kind == "http-status" and exc.status is not None and exc.status < 500:
        return robots.Answer(exc.status)
    return robots.Answer(exc.status, error=exc.message)


@dataclass(frozen=True, slots=True)
class Held:
    """One robots.txt version in force, parsed (the URL checks ask it for every URL of the
    host), and when it was read."""

    rules: RobotsRules
    read_at: datetime

    @property
    def text(self) -> str | None:
        """The version's text (None: the host has none)."""
        return self.rules.text


class RobotsCache:
    """The robots.txt version in force per URL, shared by the watch and the URL checks (the
    daemon keeps one; ``check --urls`` one per run)."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        # one read at a time per URL: the version read, or None and why it could not be
        self.pending: dict[str, asyncio.Task[tuple[Held | None, str]]] = {}

    def offer(self, url: str, text: str | None, read_at: datetime, *,
              rules: RobotsRules | None = None) -> None:
        """A version read at ``read_at``: in force unless a newer one is held. ``rules``:
        ``text`` as its reader parsed it already; without them, it is parsed only when it is
        taken and is not the text held (a round offers the stored version it holds)."""
        if read_at.tzinfo is None:  # a database that keeps UTC times without their zone
            read_at = read_at.replace(tzinfo=UTC)
        held = self._held.get(url)
        if held is not None and held.read_at > read_at:
            return
        if rules is None:
            rules = held.rules if held is not None and held.text == text else RobotsRules(text)
        self._held[url] = Held(rules, read_at)

    def fresh(self, url: str, now: datetime) -> Held | None:
        """The version in force, if it was read within a day of ``now``."""
        held = self._held.get(url)
        return held if held is not None and now - held.read_at < TTL else None

    def last(self, url: str) -> Held | None:
        """The last good version, however old (kept while the robots.txt cannot be read)."""
        return self._held.get(url)

    def forget(self, now: datetime) -> None:
        """Drop the versions no longer of use even as a last good one (the map stays small)."""
        for url in [u for u, held in self._held.items() if now - held.read_at >= KEPT]:
            del self._held[url]
