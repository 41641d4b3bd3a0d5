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

What is read from the database is read when it may have changed. A target's documents are
read again only once its last snapshot is not the one they were read at (a check writes them
in its snapshot's transaction). The sweep reads an origin's stored key state only once it is
due: the replicas share that state, and one of them fetches the file only when the stored
state is due, so the time this replica last read stays a lower bound for the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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

SCOPE_TTL = 300.0  # how long a target's scope is kept before its last snapshot is asked


@dataclass(frozen=True, slots=True)
class _Read:
    """A target's scope as read: when, for which URL, at which of its snapshots."""

    at: datetime
    url: str
    version: int
    scope: indexnow.Scope


@dataclass(frozen=True, slots=True)
class _Due:
    """When an origin's key file is next due, for the key and location it was read for."""

    at: datetime
    key_digest: str
    location: str


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
        self._scopes: dict[str, _Read] = {}
        self._scope_locks: dict[str, asyncio.Lock] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._due: dict[tuple[str, str], _Due] = {}

    async def scope(self, target: Target, origin: str | None = None) -> indexnow.Scope:
        """The origins the target may submit for, looked at again after ``SCOPE_TTL``, or at
        once when ``origin`` is not among them (a check may have just found a sitemap there);
        its documents are read only when a snapshot was written since they last were."""
        lock = self._scope_locks.setdefault(target.name, asyncio.Lock())
        async with lock:  # the rows of one target claimed together read it once
            now = self.clock()
            cached = self._scopes.get(target.name)
            if cached is not None and cached.url != target.url:
                cached = None
            if (cached is not None and now < cached.at + timedelta(seconds=SCOPE_TTL)
                    and (origin is None or cached.scope.covers(origin))):
                return cached.scope
            version, origins = await asyncio.to_thread(
                self.repo.document_origins, target.name, indexnow.origin_of,
                -1 if cached is None else cached.version)
            if origins is not None or cached is None:
                scope = indexnow.Scope.of(target.url, origins or ())
            else:
                scope = cached.scope
            self._scopes[target.name] = _Read(now, target.url, version, scope)
            return scope

    async def sweep(self, targets: Iterable[Target]) -> None:
        """Fetch the key file of every origin of every submitting target whose last fetch is
        stale (or never was); a failure is logged and kept for the target's issues. An origin
        whose next fetch this replica knows is not due yet costs no statement."""
        for target in targets:
            settings = target.settings.indexnow
            if not settings.enabled or settings.key is None:
                continue
            digest = indexnowrows.key_digest(settings.key)
            for origin in sorted((await self.scope(target)).origins):
                location = indexnow.key_location(origin, settings.key, settings.key_location)
                due = self._due.get((target.name, origin))
                if (due is not None and due.key_digest == digest and due.location == location
                        and self.clock() < due.at):
                    continue
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
                due = self._remember(target.name, last)
                if now < due:
                    return None if last.ok else (last.detail or "failed")
            problem = await self._fetch(target, key, location)
            state = indexnowrows.KeyState(origin, location, digest, self.clock(),
                                          problem is None, problem)
            await asyncio.to_thread(self.repo.save_key, target.name, state)
            self._remember(target.name, state)
        shown = indexnow.redact(location, key)
        if problem is None:
            log.info("indexnow key file verified", target=target.name, host=origin,
                     location=shown)
        else:
            log.error("indexnow key file not verified", target=target.name, host=origin,
                      rule=indexnow.KEY_RULE, location=shown,
                      error=indexnow.key_message(origin, location, problem, key))
        return problem

    def _remember(self, target_name: str, state: indexnowrows.KeyState) -> datetime:
        """When the key file of this state is next due (a day after it verified, 15 minutes
        after it did not), kept for the sweep."""
        ttl = indexnow.KEY_TTL if state.ok else indexnow.KEY_RETRY
        due = state.checked_at + timedelta(seconds=ttl)
        self._due[(target_name, state.origin)] = _Due(due, state.key_digest, state.location)
        return due

    async def _fetch(self, target: Target, key: str, location: str) -> str | None:
        try:
            got = await self.fetcher.probe(location, target.settings, body_limit=1024,
                                           allow_private=await allow_private(target))
        except FetchError as exc:
            return indexnow.redact(f"no answer: {exc.message}", key)
        return indexnow.key_file_problem(got.status, got.head, key)
