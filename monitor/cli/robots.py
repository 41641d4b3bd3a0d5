"""``robots test FILE|URL --agent AGENT URL...``: whether an agent may crawl each URL, as
Google's parser decides, with the group and the line that decided (the tester Search Console
no longer has).

A URL source is read as Google reads a robots.txt (``monitor.robots.reader``): redirects up to
5 hops, a 4xx is no robots.txt (everything allowed), a 5xx, a 429 or no answer is a usage error
(one line, exit 2), as is a file that cannot be read. A URL whose path is not ``/robots.txt``
stands for its host's robots.txt. The URLs tested are taken as given, as Google's parser takes
them (already escaped; an empty one is the path ``/``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from monitor.config import Config
from monitor.core.errors import ConfigError
from monitor.robots.matcher import MAX_BYTES, RobotsRules, robots_url
from monitor.robots.tester import answer, describe

__all__ = ["read_source", "test"]

_URL = re.compile(r"^https?://", re.IGNORECASE)


def test(source: str, agent: str, urls: Sequence[str], cfg: Config, *, as_json: bool,
         out: Callable[[str], None]) -> int:
    """Print the decision for each of ``urls``, in order; 0 once answered."""
    name, text, note = read_source(source, cfg)
    rules = RobotsRules(text)
    decisions = [rules.decide(url, agent) for url in urls]
    if as_json:
        out(json.dumps([answer(url, agent, d) for url, d in zip(urls, decisions, strict=True)],
                       ensure_ascii=False))
        return 0
    out(f"{name}{note}, for {agent!r}:" if agent else f"{name}{note}, for an empty agent:")
    for url, decision in zip(urls, decisions, strict=True):
        out(f"{'allowed' if decision.allowed else 'disallowed':<10}  {url or '(empty)'}")
        out(f"            {describe(decision)}")
    return 0


def read_source(source: str, cfg: Config) -> tuple[str, str | None, str]:
    """The robots.txt to test: its name, its text (None: there is none) and a note on how it
    was read."""
    if _URL.match(source):
        url = source if urlsplit(source).path == "/robots.txt" else robots_url(source)
        return asyncio.run(_fetch(url, cfg))
    try:
        with Path(source).open("rb") as file:
            data = file.read(MAX_BYTES)  # Google reads the first 500 KiB
    except OSError as exc:
        raise ConfigError(f"robots test: {source}: {exc.strerror or exc}") from None
    return source, data.decode("utf-8", "surrogateescape"), ""


async def _fetch(url: str, cfg: Config) -> tuple[str, str | None, str]:
    from monitor.net.addresses import is_private_target
    from monitor.read.fetch import Fetcher
    from monitor.robots import judge, reader

    settings = cfg.defaults
    fetcher = Fetcher(user_agent=settings.user_agent, per_host=cfg.scheduler.per_host)
    try:
        private = settings.allow_private or await is_private_target(url)
        found, _ = await reader.read(fetcher, url, settings, allow_private=private)
    finally:
        await fetcher.aclose()
    if judge.unreachable(found):
        why = found.error or f"HTTP {found.status}"
        raise ConfigError(f"robots test: {url} cannot be read ({why})")
    if found.status is not None and 200 <= found.status < 300:
        return url, found.text or "", ""
    why = "redirects past 5 hops" if found.status is None else f"HTTP {found.status}"
    return url, None, f" (none: {why}, so everything is allowed)"
