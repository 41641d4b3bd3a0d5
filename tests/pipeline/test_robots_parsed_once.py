"""A robots.txt is parsed once a version: the check's judge parses what it fetched, and the
watch, the robots cache the daemon's checks share with its URL checks, and the rounds of URL
checks that follow (which offer the stored version again) take those rules as they are."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from httpserver import TestServer
from site_fixture import Site, urlset
from test_url_health import page

from monitor import config as config_module
from monitor.check.pipeline import run_check
from monitor.cli.commands import main
from monitor.core.model import utcnow
from monitor.read.fetch import Fetcher
from monitor.robots import matcher
from monitor.robots import reader as robotsread
from monitor.store.db import make_engine
from monitor.urlhealth import checker as urlcheck

ALLOW = b"User-agent: *\nAllow: /\n"
DISALLOW = b"User-agent: *\nDisallow: /hide\n"


def test_a_check_and_the_rounds_after_it_parse_each_robots_txt_once(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The daemon's way, one robots cache across checks and rounds: a check that reads a new
    version parses it once; two rounds after it parse nothing, nor does a check that finds
    it unchanged (a 304) beyond its judge's one parse."""
    for p in ("/keep", "/hide"):
        http_server.route(p, page())
    site.set("/sitemap.xml", urlset({site.url(p): None for p in ("/keep", "/hide")}))
    path = tmp_path / "monitor.yaml"
    path.write_text("defaults:\n  url_checks: {enabled: true, rate: 1000}\n"
                    f"targets:\n  - {{name: t, url: '{site.url('/sitemap.xml')}'}}\n")
    [target] = config_module.load(path).resolved_targets()
    assert main(["db", "upgrade", "--database-url", db]) == 0
    engine = make_engine(db)
    parsed: Counter[bytes] = Counter()
    real = matcher._groups

    def groups(data: bytes) -> Any:
        parsed[data] += 1
        return real(data)

    monkeypatch.setattr(matcher, "_groups", groups)

    async def go() -> list[dict[str, int]]:
        fetcher = Fetcher(user_agent=target.settings.user_agent)
        cache, budget = robotsread.RobotsCache(), urlcheck.Budget()
        steps = []

        async def check_then_rounds(rounds: int) -> None:
            await run_check(target, engine=engine, fetcher=fetcher, robots_cache=cache)
            steps.append(dict(parsed))
            for _ in range(rounds):
                found = await urlcheck.run_round(target, engine=engine, fetcher=fetcher,
                                                 budget=budget, now=utcnow, robots=cache,
                                                 limit=1, judged={})
                assert found is not None
            steps.append(dict(parsed))

        try:
            site.set("/robots.txt", ALLOW)
            await check_then_rounds(2)
            await check_then_rounds(1)  # unchanged: the judge parses what it compares
            site.set("/robots.txt", DISALLOW)
            await check_then_rounds(2)
        finally:
            await fetcher.aclose()
        return steps

    try:
        steps = asyncio.run(go())
    finally:
        engine.dispose()
    assert steps == [{ALLOW: 1}, {ALLOW: 1}, {ALLOW: 2}, {ALLOW: 2},
                     {ALLOW: 2, DISALLOW: 1}, {ALLOW: 2, DISALLOW: 1}]
