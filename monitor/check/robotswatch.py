"""The robots.txt watch of one check: each host the target's documents live on, its
robots.txt fetched conditionally, judged by ``monitor.robots.judge``, and its new version
recorded for the check's transaction."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from monitor.check.context import Context
from monitor.check.tally import RobotsFound
from monitor.core.model import Issue
from monitor.robots import judge as robots
from monitor.robots import reader
from monitor.robots.matcher import RobotsRules, robots_url
from monitor.store.robotsversions import Version

__all__ = ["ROBOTS_HOSTS", "Watched", "answer", "watch"]

ROBOTS_HOSTS = 10  # robots.txt watched per target: its sitemaps' hosts, the first ten


async def answer(ctx: Context, url: str,
                 stored: tuple[str | None, str | None, str | None] | None,
                 ) -> tuple[robots.Answer, int]:
    """A host's robots.txt, conditional on the stored version's validators, and the bytes
    read on the wire for it."""
    etag, modified = (None, None) if stored is None else stored[1:]
    return await reader.read(ctx.fetcher, url, ctx.settings, etag=etag,
                             last_modified=modified, allow_private=ctx.allow_private)


@dataclass(frozen=True, slots=True)
class Watched:
    """The robots.txt of the target's hosts after the watch: the rules in force of each (by
    URL), those whose version is new (changed, or read for the first time), and what the
    check's tally takes of it."""

    rules: dict[str, RobotsRules]
    new: frozenset[str]
    found: RobotsFound


async def watch(ctx: Context, root_robots: robots.Answer | None) -> Watched:
    """Read and judge the robots.txt of the target's hosts; ``root_robots`` is a site
    target's root, its robots.txt, as the walk read it."""
    hosts: dict[str, list[str]] = {}
    for doc in ctx.tally.documents.values():
        robots_of = robots_url(doc.url)
        if robots_of not in hosts and len(hosts) >= ROBOTS_HOSTS:
            continue
        sitemaps = hosts.setdefault(robots_of, [])
        if doc.url != robots_of:
            sitemaps.append(doc.url)
    stored = ctx.loaded.robots
    root, root_robots_url = ctx.target.url, robots_url(ctx.target.url)
    # A site target's root is its robots.txt, read by this check already (a 304 of it
    # before its first version is stored is read again, whole).
    if not ctx.target.site or (root_robots is not None and root_robots.not_modified
                               and root_robots_url not in stored):
        root_robots = None
    answers = await asyncio.gather(*(
        answer(ctx, url, stored.get(url))
        if root_robots is None or url != root_robots_url else _answered(root_robots)
        for url in hosts))
    versions = []
    issues: list[Issue] = []
    rows: list[dict[str, Any]] = []
    in_force: dict[str, RobotsRules] = {}
    new: set[str] = set()
    for (url, sitemaps), (got, _read) in zip(hosts.items(), answers, strict=True):
        previous = None if url not in stored else robots.Stored(*stored[url])
        found = robots.judge(url, previous, got, sitemaps=sitemaps, listed=(
            [root] if not ctx.target.site and url == root_robots_url else []))
        issues.extend(found.issues)
        in_force[url] = found.rules
        if found.store:
            new.add(url)
        rows.append(found.as_json(with_text=found.changed))
        if ctx.robots_cache is not None and found.outcome != "unreachable":
            ctx.robots_cache.offer(url, found.text, ctx.started, rules=found.rules)
        # new validators to keep (an answer without any, a 304 of the root, keeps the old)
        moved = (got.etag or got.last_modified) is not None and (
            (got.etag, got.last_modified) != (stored.get(url) or (None,) * 3)[1:])
        if found.outcome != "unreachable" and (found.store or moved):
            versions.append(Version(
                url, got.status, found.text, got.etag, got.last_modified,
                new=found.store, validators_moved=moved, changed=found.changed,
                before=found.before))
    if versions:  # an unchanged robots.txt writes nothing
        ctx.writes.robots(versions)
    wire = sum(read for _answer, read in answers)
    return Watched(in_force, frozenset(new), RobotsFound(issues, rows, wire))


async def _answered(found: robots.Answer) -> tuple[robots.Answer, int]:
    return found, 0
