"""A round of URL checks counts its target's listed URLs once: the states, the rule ids, the
coverage, the estimate's strata and the first round's test come from one grouped read of
``url_states``, handed to the metrics, the alert rules and the API (on both databases)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from httpserver import Reply, TestServer
from site_fixture import Site, urlset
from sqlalchemy import Engine, event, select

from monitor import config as config_module
from monitor.cli.commands import main
from monitor.core.model import utcnow
from monitor.read.fetch import Fetcher
from monitor.store import urlstates
from monitor.store.db import make_engine
from monitor.store.schema import url_checks
from monitor.urlhealth import checker as urlcheck

PAGE = b"<!doctype html><html><head><title>p</title></head><body>" + b"x" * 500 + b"</body></html>"
HTML = {"Content-Type": "text/html; charset=utf-8"}
CONFIG = """\
defaults:
  url_checks: {{enabled: true, rate: 1000}}
targets:
  - {{name: t, url: '{url}'}}
alerts:
  channels: [{{name: hook, type: webhook, url: 'http://127.0.0.1:9/hook'}}]
  rules: [{{name: broken, channels: [hook], when: url_health, state: [not-found]}}]
"""


@contextmanager
def counting(engine: Engine) -> Iterator[list[str]]:
    """The statements that count over ``url_states`` while the block runs."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM url_states" in statement and "count(" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def test_a_round_counts_the_listed_urls_once(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
) -> None:
    """Two rounds of two URLs over five listed (one a 404): each reads the counts in one
    statement, whose figures the round, its alert rules' first-round test and the API tell."""
    http_server.route("/robots.txt", Reply(body=b"User-agent: *\nAllow: /\n"))
    paths = [f"/p{i}" for i in range(4)]
    for p in paths:
        http_server.route(p, Reply(body=PAGE, headers=HTML))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in [*paths, "/missing"]}))
    path = tmp_path / "monitor.yaml"
    path.write_text(CONFIG.format(url=site.url("/sitemap.xml")))
    assert main(["check", "t", "--config", str(path), "--database-url", db]) == 0
    cfg = config_module.load(path)
    [target] = cfg.resolved_targets()
    engine = make_engine(db)

    async def go(limit: int) -> urlcheck.Round:
        fetcher = Fetcher(user_agent=target.settings.user_agent)
        try:
            done = await urlcheck.run_round(target, engine=engine, fetcher=fetcher,
                                            budget=urlcheck.Budget(), now=utcnow, limit=limit,
                                            alerts=cfg.alerts)
        finally:
            await fetcher.aclose()
        assert done is not None
        return done

    def first_round_at() -> Any:
        with engine.connect() as conn:
            return conn.execute(select(url_checks.c.first_round_at)).scalar_one()

    try:
        with counting(engine) as seen:
            first = asyncio.run(go(2))
        assert len(seen) == 1, seen
        assert (first.checked, first.listed, first.covered) == (2, 5, 2)
        assert first.strata is not None
        assert (first.strata.checked, first.strata.unchecked) == (2, 3)
        assert first_round_at() is None  # three listed URLs never tried
        with counting(engine) as seen:
            second = asyncio.run(go(3))
        assert len(seen) == 1, seen
        assert second.states == {"ok": 4, "not-found": 1}
        assert second.rules == {"url-not-found": 1}
        assert (second.listed, second.covered) == (5, 5)
        assert second.strata is not None
        assert (second.strata.checked, second.strata.unchecked) == (5, 0)
        assert first_round_at() is not None  # every listed URL checked once: kept
        with counting(engine) as seen:
            told = urlstates.health(engine, "t")
        assert len(seen) == 1, seen
        assert told is not None
        assert (told["listed"], told["checked"], told["unchecked"], told["complete"]) == (
            5, 5, 0, True)
        assert told["url_health"] == {"ok": 4, "not-found": 1}
    finally:
        engine.dispose()
