"""What a target may submit to IndexNow, and whether each of its hosts proves the key.

The scope of a target is the origins of its own sitemaps (its URL's and its current
documents'): a URL elsewhere (a ``loc-out-of-scope`` loc) is never submitted and its host
never asked for the key file, since the key would vouch for a site that is not the
operator's. A key file in a folder vouches for that folder only.

Each origin of the scope has its key file fetched when IndexNow is enabled (the ``sweep`` the
submitter runs, so a target whose sitemap never changes still hears that its key is wrong)
and daily after that, every 15 minutes while it fails, through the shared ``Fetcher``: the
address rules and the per-host politeness of the checks. The key never reaches a log line: the
key file's URL names it and is redacted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

import structlog

from monitor.config import Target
from monitor.core.errors import FetchError
from monitor.indexnow import protocol as indexnow
from monitor.net.addresses import is_private_target
from monitor.read.fetch import Fetcher
from monitor.store import indexnowrows

__all__ = ["SCOPE_TTL", "Keys", "allow_private"]

log = structlog.get_logger("monitor.indexnow.keys")

SCOPE_TTL = 300.0  # a target's documents are read again for its scope at most this often


async def allow_private(target: Target) -> bool:
    """Whether the target's requests may go to private and loopback addresses."""
    return target.settings.allow_private or await is_private_target(target.url)


class Keys:
    """The scope of each target and the state of its hosts' key files (one per Submitter)."""

    def __init__(self, repo: indexnowrows.SqlSubmissions, fetcher: Fetcher,
                 clock: Callable[[], datetime]) -> None:
        self.repo = repo
        self.fetcher = fetcher
        self.clock = clock
        self._scopes: dict[str, tuple[datetime, str, indexnow.Scope]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def scope(self, target: Target, origin: str | None = None) -> indexnow.Scope:
        """The origins the target may submit for, read again after ``SCOPE_TTL``, or at once
        when ``origin`` is not among them (a check may have just found a sitemap there)."""
        now = self.clock()
        cached = self._scopes.get(target.name)
        if (cached is not None and cached[1] == target.url
                and now < cached[0] + timedelta(seconds=SCOPE_TTL)
                and (origin is None or cached[2].covers(origin))):
            return cached[2]
        origins = await asyncio.to_thread(self.repo.document_origins, target.name,
                                          indexnow.origin_of)
        scope = indexnow.Scope.of(target.url, origins)
        self._scopes[target.name] = (now, target.url, scope)
        return scope

    async def sweep(self, targets: Iterable[Target]) -> None:
        """Fetch the key file of every origin of every submitting target whose last fetch is
        stale (or never was); a failure is logged and kept for the target's issues."""
        for target in targets:
            settings = target.settings.indexnow
            if not settings.enabled or settings.key is None:
                continue
            for origin in sorted((await self.scope(target)).origins):
                location = indexnow.key_location(origin, settings.key, settings.key_location)
                await self.problem(target, origin, settings.key, location)

    async def problem(self, target: Target, origin: str, key: str,
                      location: str) -> str | None:
        """Why the origin's key file does not prove the key (None: it does), fetched when
        the last fetch is older than a day (or 15 minutes, when it failed) or was of
        another key or location."""
        lock = self._locks.setdefault((target.name, origin), asyncio.Lock())
        async with lock:  # one fetch for the rows of one host claimed together
            digest = indexnowrows.key_digest(key)
            now = self.clock()
            last = await asyncio.to_thread(self.repo.key, target.name, origin)
            if last is not None and last.key_digest == digest and last.location == location:
                ttl = indexnow.KEY_TTL if last.ok else indexnow.KEY_RETRY
                if now < last.checked_at + timedelta(seconds=ttl):
                    return None if last.ok else (last.detail or "failed")
            problem = await self._fetch(target, key, location)
            await asyncio.to_thread(self.repo.save_key, target.name, indexnowrows.KeyState(
                origin, location, digest, self.clock(), problem is None, problem))
        shown = indexnow.redact(location, key)
        if problem is None:
            log.info("indexnow key file verified", target=target.name, host=origin,
                     location=shown)
        else:
            log.error("indexnow key file not verified", target=target.name, host=origin,
                      rule=indexnow.KEY_RULE, location=shown,
                      error=indexnow.key_message(origin, location, problem, key))
        return problem

    async def _fetch(self, target: Target, key: str, location: str) -> str | None:
        try:
            got = await self.fetcher.probe(location, target.settings, body_limit=1024,
                                           allow_private=await allow_private(target))
        except FetchError as exc:
            return indexnow.redact(f"no answer: {exc.message}", key)
        return indexnow.key_file_problem(got.status, got.head, key)
