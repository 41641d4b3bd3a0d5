"""A large site's URL health before every URL was checked: the URLs checked first are a random
sample of the listing, and the estimate's interval holds the true share, on both databases.

The site is built against a checker that goes in listing order: its broken pages all sit in the
last quarter of the listing (the last child sitemap), so the first URLs in listing order are
all fine.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, TestServer
from site_fixture import Site, index, urlset
from sqlalchemy import func, select

from monitor.cli.commands import main
from monitor.store.db import make_engine
from monitor.store.schema import url_states

CHILDREN, PER_CHILD = 4, 500
LISTED = CHILDREN * PER_CHILD
# In the last child only: 16% of it answers 404 and 8% is noindex, 4% and 2% of the listing.
NOT_FOUND = {i for i in range(PER_CHILD) if i % 25 < 4}
NOINDEX = {i for i in range(PER_CHILD) if i % 25 in (4, 5)}
TRUTH = {"not-found": len(NOT_FOUND) / LISTED, "noindex": len(NOINDEX) / LISTED}
HTML = {"Content-Type": "text/html; charset=utf-8"}


def loc(child: int, i: int) -> str:
    return f"/c{child}/page-{i:04d}"


def clustered_site(site: Site, server: TestServer) -> None:
    """The sitemap index and its pages: 404s (not routed) and noindex pages in the last child."""
    server.route("/robots.txt", Reply(body=b"User-agent: *\nAllow: /\n"))
    for child in range(CHILDREN):
        last = child == CHILDREN - 1
        for i in range(PER_CHILD):
            if last and i in NOT_FOUND:
                continue
            head = b'<meta name="robots" content="noindex">' if last and i in NOINDEX else b""
            server.route(loc(child, i), Reply(
                body=b"<!doctype html><html><head><title>p</title>%s</head><body>%s</body>"
                     b"</html>" % (head, b"x" * 500), headers=HTML))
        site.set(f"/s{child}.xml", urlset({site.url(loc(child, i)): None
                                           for i in range(PER_CHILD)}))
    site.set("/sitemap.xml", index([site.url(f"/s{c}.xml") for c in range(CHILDREN)]))


def rounds(tmp_path: Path, site: Site, db: str, sizes: list[int], key: str | None = None,
           ) -> list[Any]:
    """A check of the sitemap, then URL-check rounds of these sizes; each round's result.
    ``key``: the target's sample key, stored before its first round (else one is drawn)."""
    from monitor import config as config_module
    from monitor.core.model import utcnow
    from monitor.read.fetch import Fetcher
    from monitor.urlhealth import checker as urlcheck

    path = tmp_path / "monitor.yaml"
    path.write_text("defaults:\n  url_checks: {enabled: true, rate: 1000}\n"
                    f"targets:\n  - {{name: t, url: '{site.url('/sitemap.xml')}'}}\n")
    assert main(["check", "t", "--config", str(path), "--database-url", db]) == 0
    [target] = config_module.load(path).resolved_targets()
    engine = make_engine(db)
    if key is not None:
        from sqlalchemy import insert

        from monitor.store.schema import targets, url_checks

        with engine.begin() as conn:
            target_id = conn.execute(select(targets.c.id)).scalar_one()
            conn.execute(insert(url_checks).values(target_id=target_id, sample_key=key))

    async def go() -> list[Any]:
        fetcher = Fetcher(user_agent=target.settings.user_agent)
        budget, found = urlcheck.Budget(), []
        try:
            for size in sizes:
                done = await urlcheck.run_round(target, engine=engine, fetcher=fetcher,
                                                budget=budget, now=utcnow, limit=size)
                assert done is not None
                found.append(done)
        finally:
            await fetcher.aclose()
        return found

    try:
        return asyncio.run(go())
    finally:
        engine.dispose()


def served(db: str, api_path: str, page_path: str) -> tuple[Any, str]:
    """The JSON of an API route and the text of a web page, from the daemon's HTTP app."""
    import httpx
    from prometheus_client import CollectorRegistry

    from monitor.serve import api

    engine = make_engine(db)
    app = api.create_app(engine=engine, registry=CollectorRegistry(), alive=lambda: True,
                         configured=lambda: ["t"])

    async def get() -> tuple[Any, str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            found = await c.get(api_path)
            assert found.status_code == 200, found.text
            shown = await c.get(page_path)
            assert shown.status_code == 200, shown.text
            return found.json(), shown.text

    try:
        return asyncio.run(get())
    finally:
        engine.dispose()


def truth_of(path: str) -> str:
    child, i = int(path.split("/")[1][1:]), int(path.rsplit("-", 1)[1])
    if child < CHILDREN - 1:
        return "ok"
    return "not-found" if i in NOT_FOUND else "noindex" if i in NOINDEX else "ok"


def a_fair_key(site: Site, n: int) -> tuple[str, set[str]]:
    """A key whose first ``n`` URLs hold each state's true share in their 95% interval, and
    those URLs. The locs hold the test server's port, so each run has other samples; 95% of
    keys are fair (tests/test_sampling.py), and picking one makes the run the same every time:
    what this test asks is that the daemon checks exactly that sample and tells its estimate."""
    from monitor.core import sampling

    locs = {site.url(loc(c, i)): loc(c, i) for c in range(CHILDREN) for i in range(PER_CHILD)}
    for k in range(100):
        key = f"{k:032x}"
        first = sorted(locs, key=lambda u: sampling.turn(key, u))[:n]
        seen: dict[str, int] = {}
        for url in first:
            seen[truth_of(locs[url])] = seen.get(truth_of(locs[url]), 0) + 1
        strata = sampling.Strata(LISTED, seen, LISTED, {}, LISTED - n)
        if all(e.low <= TRUTH.get(s, 1 - sum(TRUTH.values())) <= e.high
               for s, e in sampling.estimate(strata, ["not-found", "noindex", "ok"]).items()):
            return key, set(first)
    raise AssertionError("no fair key among 100")


def test_the_urls_checked_first_are_a_sample_whose_interval_holds_the_truth(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
) -> None:
    """300 of 2,000 URLs checked (15%): their broken share is the site's, not the first
    child's 0%, and the 95% interval of each state's estimate holds its true share."""
    from monitor.core import sampling

    clustered_site(site, http_server)
    key, sample = a_fair_key(site, 300)
    found = rounds(tmp_path, site, db, [150, 150], key=key)
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            u = url_states.c
            checked = set(conn.execute(select(u.loc).where(
                u.checked_at.is_not(None) | (u.attempts > 0))).scalars())
    finally:
        engine.dispose()
    assert checked == sample  # the first 300 of the key's order, nothing else
    done = sum(sum(r.outcomes.values()) for r in found)
    assert done == 300
    seen = sum(r.outcomes.get("not-found", 0) for r in found)
    # In listing order, every URL checked is of the first child and none is broken.
    assert 0.01 * done <= seen <= 0.10 * done, f"{seen} 404s among {done} checked"
    strata = found[-1].strata
    assert (strata.listed, strata.checked, strata.complete) == (LISTED, 300, False)
    estimates = sampling.estimate(strata, ["not-found", "noindex", "ok"])
    for state, truth in TRUTH.items():
        got = estimates[state]
        assert got.low <= truth <= got.high, (state, truth, got)
        assert 0 < got.margin < 0.05, got
        assert got.share - got.margin <= got.low
        assert got.high <= got.share + got.margin
    assert estimates["ok"].low <= 1 - sum(TRUTH.values()) <= estimates["ok"].high

    # The API and the target's page tell the same estimate.
    answer, page = served(db, "/api/v1/targets/t/url-health", "/targets/t")
    assert answer["listed"] == LISTED
    assert answer["checked"] == 300
    assert answer["complete"] is False
    told = answer["estimate"]["not-found"]
    assert told["share"] == pytest.approx(estimates["not-found"].share, abs=1e-6)
    assert told["low"] <= TRUTH["not-found"] <= told["high"]
    line = (f"about {told['share']:.1%} not-found, +/- {told['margin']:.1%}, from 300 checked "
            "of 2,000")
    assert line in page, page

def test_new_urls_go_first_and_stay_out_of_the_sample(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
) -> None:
    """URLs listed after the first round began are checked next, ahead of the random order,
    and counted as they are (not as a sample of the rest): 40 new URLs, all 404, among 400
    listed do not make the estimate of the rest 10% broken. Once every URL is checked, the
    estimate is the count's share, with no margin."""
    paths = [f"/old/{i}" for i in range(360)]
    for p in paths:
        http_server.route(p, Reply(body=b"<html><head></head><body>" + b"x" * 300
                                   + b"</body></html>", headers=HTML))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in paths}))
    rounds(tmp_path, site, db, [50])
    added = [f"/new/{i}" for i in range(40)]  # not routed: 404
    site.set("/sitemap.xml", urlset({site.url(p): None for p in paths + added}))
    [result] = rounds(tmp_path, site, db, [40])
    assert result.outcomes == {"not-found": 40}  # the new ones, all of them, first
    strata = result.strata
    assert strata.known == {"not-found": 40}
    assert sum(strata.sampled.values()) == 50
    assert strata.sampled.get("not-found", 0) == 0
    from monitor.core import sampling

    got = sampling.combined(strata, ["not-found"])
    assert got.low <= 40 / 400 <= got.high
    assert got.low >= 40 / 400 - 1e-9  # the 40 are known: no URL of the rest is broken
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            u = url_states.c
            ahead = conn.execute(select(func.count()).where(u.turn < 0)).scalar()
    finally:
        engine.dispose()
    assert ahead == 40

    done = rounds(tmp_path, site, db, [400])[-1]
    assert done.strata.complete
    assert done.strata.checked == 400
    whole = sampling.combined(done.strata, ["not-found"])
    assert (whole.share, whole.margin, whole.exact) == (40 / 400, 0.0, True)


def test_urls_stored_before_the_check_order_are_placed_in_it(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
) -> None:
    """Rows of a database from before (no key, no place: what the migration leaves) get a key
    and a place at the next round, and the round goes on in that order."""
    from sqlalchemy import update

    from monitor.store.schema import url_checks

    paths = [f"/q/{i}" for i in range(120)]
    for p in paths:
        http_server.route(p, Reply(body=b"<html><head></head><body>" + b"x" * 300
                                   + b"</body></html>", headers=HTML))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in paths}))
    rounds(tmp_path, site, db, [20])
    engine = make_engine(db)
    try:
        with engine.begin() as conn:
            first = set(conn.execute(select(url_states.c.loc).where(
                url_states.c.checked_at.is_not(None))).scalars())
            conn.execute(update(url_states).values(turn=None))
            conn.execute(update(url_checks).values(sample_key=None))
    finally:
        engine.dispose()
    [result] = rounds(tmp_path, site, db, [30])
    assert result.strata.checked == 50
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            u = url_states.c
            placed = conn.execute(select(u.loc, u.turn, u.checked_at)).all()
            key = conn.execute(select(url_checks.c.sample_key)).scalar_one()
    finally:
        engine.dispose()
    from monitor.core import sampling

    assert key is not None
    assert all(row.turn == sampling.turn(key, row.loc) for row in placed)
    # the 30 checked next are the first 30 of the new order among those not checked before
    rest = sorted((r for r in placed if r.loc not in first), key=lambda r: r.turn)
    assert len(first) == 20
    assert {r.loc for r in placed if r.checked_at is not None} - first == {
        r.loc for r in rest[:30]}
