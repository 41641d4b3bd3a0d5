"""robots.txt and the URL checks read as Google reads them: each case a real local
site run through ``check --json --urls`` on both databases, compared with what Google's own
documentation says Googlebot concludes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, TestServer
from site_fixture import Site, urlset
from sqlalchemy import select
from test_url_health import by_url_checks, check_urls, page, run

from monitor.cli.commands import main
from monitor.store.db import make_engine
from monitor.store.schema import changes, url_states

HTML = {"Content-Type": "text/html; charset=utf-8"}


def rows(db: str) -> dict[str, Any]:
    """Each listed URL's stored health, by path."""
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            u = url_states.c
            found = conn.execute(select(u.loc, u.state, u.rule, u.detail, u.hops, u.final_url)
                                 .where(u.listed.is_(True))).all()
    finally:
        engine.dispose()
    return {"/" + r.loc.split("/", 3)[3]: r for r in found}


def config(tmp_path: Path, site: Site, *, extra: str = "") -> str:
    path = tmp_path / "monitor.yaml"
    path.write_text(
        "defaults:\n  url_checks: {enabled: true, rate: 1000" + extra + "}\n"
        f"targets:\n  - {{name: t, url: '{site.url('/sitemap.xml')}'}}\n", encoding="utf-8")
    return str(path)


def listing(site: Site, paths: list[str]) -> None:
    site.set("/sitemap.xml", urlset({site.url(p): None for p in paths}))


def robots(site: Site, text: str) -> None:
    site.set("/robots.txt", text.encode())


# ---- robots.txt as Googlebot reads it --------------------------------------------------------

def test_the_googlebot_group_decides_and_the_monitors_own_group_only_stops_the_monitor(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``*`` disallows everything but Googlebot's own group allows it: Google crawls every
    page, so none is ``disallowed``; the monitor, which falls under ``*``, requests none and
    says why it could not check them."""
    for p in ("/a", "/b"):
        http_server.route(p, page())
    robots(site, "User-agent: *\nDisallow: /\n\nUser-agent: Googlebot\nAllow: /\n")
    listing(site, ["/a", "/b"])
    _, result = check_urls(capsys, config(tmp_path, site), db)
    assert result["url_health"] == {"unknown": 2}
    found = rows(db)
    assert {p: (r.state, r.rule, r.detail) for p, r in found.items()} == dict.fromkeys(
        ("/a", "/b"), ("unknown", None, "robots.txt disallows this monitor"))
    assert not by_url_checks(http_server, "/a")
    assert not by_url_checks(http_server, "/b")


def test_the_monitors_own_group_is_found_by_its_product_token(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The monitor's user agent is ``sitemap-monitor/VERSION (+URL)``; a group
    ``User-agent: sitemap-monitor`` is its own, so ``*``'s Disallow does not hold for it."""
    for p in ("/a", "/b"):
        http_server.route(p, page())
    robots(site, "User-agent: *\nDisallow: /\n\nUser-agent: Googlebot\nAllow: /\n\n"
                 "User-agent: sitemap-monitor\nDisallow: /b\n")
    listing(site, ["/a", "/b"])
    _, result = check_urls(capsys, config(tmp_path, site), db)
    assert result["url_health"] == {"ok": 1, "unknown": 1}
    assert rows(db)["/b"].detail == "robots.txt disallows this monitor"
    assert by_url_checks(http_server, "/a")
    assert not by_url_checks(http_server, "/b")


def test_a_group_for_googlebot_alone_disallows_its_pages(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for p in ("/ok", "/private/x"):
        http_server.route(p, page())
    robots(site, "User-agent: Googlebot\nDisallow: /private/\n")
    listing(site, ["/ok", "/private/x"])
    _, result = check_urls(capsys, config(tmp_path, site), db)
    assert result["url_health"] == {"ok": 1, "disallowed": 1}
    assert rows(db)["/private/x"].rule == "url-disallowed"
    assert not by_url_checks(http_server, "/private/x")


def test_a_redirect_into_a_disallowed_path_is_not_followed(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each hop of a redirect is asked of robots.txt, as Googlebot asks it: a chain that ends
    in a path disallowed to Googlebot is ``disallowed``, and one the monitor alone may not
    fetch is not requested either."""
    http_server.route("/to-private", Reply(301, headers={"Location": "/private/x"}))
    http_server.route("/to-mine", Reply(301, headers={"Location": "/not-for-monitors/x"}))
    for p in ("/private/x", "/not-for-monitors/x"):
        http_server.route(p, page())
    robots(site, "User-agent: Googlebot\nDisallow: /private/\n\n"
                 "User-agent: *\nDisallow: /private/\nDisallow: /not-for-monitors/\n")
    listing(site, ["/to-private", "/to-mine"])
    check_urls(capsys, config(tmp_path, site), db)
    found = rows(db)
    assert (found["/to-private"].state, found["/to-private"].rule,
            found["/to-private"].hops) == ("disallowed", "url-disallowed", 1)
    assert found["/to-private"].final_url == site.url("/private/x")
    assert (found["/to-mine"].state, found["/to-mine"].detail) == (
        "unknown", f"redirects (1 hop) to {site.url('/not-for-monitors/x')}: "
                   "robots.txt disallows this monitor")
    assert not http_server.requests_to("/private/x")
    assert not http_server.requests_to("/not-for-monitors/x")


@pytest.mark.parametrize("shared", [True, False], ids=["one-process", "stored-version"])
def test_a_robots_change_seen_by_a_check_is_in_force_for_the_url_checks(
    site: Site, http_server: TestServer, db: str, tmp_path: Path, shared: bool,
) -> None:
    """The daemon's way: one robots cache kept across rounds. A ``Disallow:`` that a check
    reads stops the URL checks of those pages at their next round, not a day later: through
    the cache the daemon's checks share with its URL checks, or (another replica's check)
    through the version the check stored."""
    from monitor import config as config_module
    from monitor.check.pipeline import run_check
    from monitor.core.model import utcnow
    from monitor.read.fetch import Fetcher
    from monitor.robots import reader as robotsread
    from monitor.urlhealth import checker as urlcheck

    for p in ("/keep", "/hide"):
        http_server.route(p, page())
    robots(site, "User-agent: *\nAllow: /\n")
    listing(site, ["/keep", "/hide"])
    cfg = config_module.load(Path(config(tmp_path, site)))
    [target] = cfg.resolved_targets()
    assert main(["db", "upgrade", "--database-url", db]) == 0
    engine = make_engine(db)

    async def rounds() -> list[dict[str, int]]:
        fetcher = Fetcher(user_agent=target.settings.user_agent)
        cache, budget, found = robotsread.RobotsCache(), urlcheck.Budget(), []
        try:
            for text in ("User-agent: *\nAllow: /\n", "User-agent: *\nDisallow: /hide\n"):
                robots(site, text)
                await run_check(target, engine=engine, fetcher=fetcher,
                                robots_cache=cache if shared else None)
                done = await urlcheck.run_round(target, engine=engine, fetcher=fetcher,
                                                budget=budget, now=utcnow, robots=cache)
                assert done is not None
                found.append(done.states)
        finally:
            await fetcher.aclose()
        return found

    try:
        first, second = asyncio.run(rounds())
    finally:
        engine.dispose()
    assert first == {"ok": 2}
    assert second == {"ok": 1, "disallowed": 1}
    assert len(by_url_checks(http_server, "/hide")) == 1  # not requested once disallowed


def check(capsys: pytest.CaptureFixture[str], cfg: str, db: str) -> dict[str, Any]:
    code = main(["check", "t", "--config", cfg, "--database-url", db, "--json"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    found: dict[str, Any] = json.loads(out)
    return found


def robots_rules(result: dict[str, Any]) -> list[str]:
    return sorted(i["rule"] for i in result["issues"]
                  if i["rule"].startswith(("robots", "sitemap-")))


def test_a_429_keeps_the_last_good_robots_txt(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Google reads a 429 as a server error: the robots.txt cannot be read, the version it
    had stays in force, and nothing changed (no change to "none", none back)."""
    listing(site, ["/a"])
    robots(site, f"Sitemap: {site.url('/sitemap.xml')}\nUser-agent: *\nDisallow: /sitemap.xml\n")
    cfg = config(tmp_path, site)
    check(capsys, cfg, db)
    site.status["/robots.txt"] = 429
    busy = check(capsys, cfg, db)
    assert busy["robots"][0]["outcome"] == "unreachable"
    assert robots_rules(busy) == ["robots-unreachable", "sitemap-disallowed"]
    del site.status["/robots.txt"]
    back = check(capsys, cfg, db)
    assert robots_rules(back) == ["sitemap-disallowed"]


def test_robots_txt_redirects_are_followed_five_hops_then_it_is_absent(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    listing(site, ["/a"])
    site.set("/r5.txt", f"Sitemap: {site.url('/sitemap.xml')}\nUser-agent: *\n"
             "Disallow: /sitemap.xml\n".encode())
    for i in range(5):  # /robots.txt -> /r1.txt -> ... -> /r5.txt: five hops
        http_server.route("/robots.txt" if i == 0 else f"/r{i}.txt",
                          Reply(301, headers={"Location": f"/r{i + 1}.txt"}))
    cfg = config(tmp_path, site)
    five = check(capsys, cfg, db)
    assert five["robots"][0]["outcome"] == "ok"
    assert robots_rules(five) == ["sitemap-disallowed"]
    http_server.route("/r5.txt", Reply(301, headers={"Location": "/r6.txt"}))
    site.set("/r6.txt", b"User-agent: *\nDisallow: /sitemap.xml\n")
    six = check(capsys, cfg, db)
    assert six["robots"][0]["outcome"] == "absent"  # as a 404: everything allowed
    assert robots_rules(six) == ["robots-changed"]


def test_only_the_first_512000_bytes_of_robots_txt_count(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """500 KiB is 512,000 bytes: a rule that starts after them is not read, by the watch as
    by the URL checks."""
    head = f"Sitemap: {site.url('/sitemap.xml')}\nUser-agent: *\nDisallow: /nothing\n"
    padding = "#" * 99 + "\n"
    text = head + padding * ((512_000 - len(head)) // 100 + 1) + "Disallow: /sitemap.xml\n"
    assert 512_000 < text.index("Disallow: /sitemap.xml") < 512 * 1024
    robots(site, text)
    listing(site, ["/a"])
    found = check(capsys, config(tmp_path, site), db)
    assert robots_rules(found) == []


def test_a_site_targets_sitemap_lines_as_google_reads_them(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A ``site:`` target: a relative ``Sitemap:`` line is ignored with a warning, and lines
    after the first 512,000 bytes are not read."""
    listing(site, ["/a"])
    site.set("/late.xml", urlset({site.url("/late"): None}))
    site.set("/relative.xml", urlset({site.url("/rel"): None}))
    text = (f"Sitemap: {site.url('/sitemap.xml')}\nSitemap: /relative.xml\n"
            + ("#" * 99 + "\n") * 5200 + f"Sitemap: {site.url('/late.xml')}\n")
    robots(site, text)
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"targets:\n  - {{name: t, site: '{site.url('/')}'}}\n", encoding="utf-8")
    found = check(capsys, str(cfg), db)
    assert [d["url"] for d in found["documents"]][1:] == [site.url("/sitemap.xml")]
    [relative] = [i for i in found["issues"] if i["rule"] == "robots-sitemap-relative"]
    assert relative["severity"] == "warning"
    assert "/relative.xml" in relative["message"]


def test_a_relative_sitemap_line_stays_an_issue_while_robots_txt_is_unchanged(
    site: Site, db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The warnings of a ``site:`` target's robots.txt are its own: a re-check whose robots.txt
    answers the same keeps them among the current issues, as a sitemap's own issues are."""
    listing(site, ["/a"])
    robots(site, f"Sitemap: {site.url('/sitemap.xml')}\nSitemap: /relative.xml\n")
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"targets:\n  - {{name: t, site: '{site.url('/')}'}}\n", encoding="utf-8")
    for outcome in ("ok", "unchanged"):
        assert check(capsys, str(cfg), db)["outcome"] == outcome
        assert main(["issues", "t", "--config", str(cfg), "--database-url", db,
                     "--format", "ndjson"]) == 0
        listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [(i["rule"], i["document"]) for i in listed] == [
            ("robots-sitemap-relative", site.url("/robots.txt"))], outcome


# ---- the URL states as Search Console reports them ------------------------------------------

def chain(server: TestServer, name: str, hops: int, end: str) -> None:
    """``/name-0`` redirects ``hops`` times, to ``end``."""
    for i in range(hops):
        location = f"/{name}-{i + 1}" if i + 1 < hops else end
        server.route(f"/{name}-{i}", Reply(302, headers={"Location": location}))


@pytest.fixture
def googles_states(site: Site, http_server: TestServer) -> dict[str, tuple[str, str | None]]:
    """Pages whose state Google documents, each with the state and rule it gets."""
    s = http_server
    robots(site, "User-agent: *\nAllow: /\n")
    s.route("/ok", page())
    s.route("/noindex-page", page(b'<meta name="robots" content="noindex">'))
    chain(s, "seven", 7, "/ok")
    chain(s, "eleven", 11, "/ok")
    chain(s, "to404", 1, "/missing")
    chain(s, "to-noindex", 2, "/noindex-page")
    s.route("/no-content", Reply(204))
    s.route("/empty", Reply(200, b"", HTML))
    s.route("/says-not-found", Reply(200, b"<html><head><title>Page not found</title></head>"
                                     b"<body><h1>Sorry</h1>" + b"x" * 500 + b"</body></html>",
                                     HTML))
    s.route("/login", page(status=401))
    s.route("/secret", page(status=403))
    s.route("/body-meta", Reply(200, b"<html><head><title>t</title></head><body>"
                                + b"x" * 3000 + b'<meta name="robots" content="noindex">'
                                b"</body></html>", HTML))
    css = b"<style>" + b"a{color:red}\n" * 90_000 + b"</style>"
    s.route("/late-noindex", Reply(200, b"<html><head>" + css
                                   + b'<meta name="googlebot" content="noindex"></head>'
                                   b"<body>x</body></html>", HTML))
    s.route("/expired", page(headers={"X-Robots-Tag": "unavailable_after: 2020-01-01"}))
    s.route("/future", page(headers={"X-Robots-Tag": "unavailable_after: 2999-01-01"}))
    s.route("/meta-none", page(b'<meta name="robots" content="none">'))
    s.route("/two-canonicals", page(b'<link rel="canonical" href="/ok">'
                                    b'<link rel="canonical" href="/other">'))
    s.route("/canonical-after-img", page(b'<img src="/x.png"><link rel="canonical" href="/ok">'))
    s.route("/canonical", page(b'<link rel="canonical" href="/ok">'))
    expected: dict[str, tuple[str, str | None]] = {
        "/ok": ("ok", None),
        "/seven-0": ("redirect", "url-redirect"),
        "/eleven-0": ("redirect", "url-redirect-loop"),
        "/to404-0": ("not-found", "url-not-found"),
        "/to-noindex-0": ("noindex", "url-noindex"),
        "/no-content": ("soft-404", "url-soft-404"),
        "/empty": ("soft-404", "url-soft-404"),
        "/says-not-found": ("soft-404", "url-soft-404"),
        "/login": ("forbidden", "url-forbidden"),
        "/secret": ("forbidden", "url-forbidden"),
        "/body-meta": ("noindex", "url-noindex"),
        "/late-noindex": ("noindex", "url-noindex"),
        "/expired": ("noindex", "url-noindex"),
        "/future": ("ok", None),
        "/meta-none": ("noindex", "url-noindex"),
        "/two-canonicals": ("ok", "url-canonical-conflict"),
        "/canonical-after-img": ("ok", None),
        "/canonical": ("canonicalized", "url-canonicalized"),
    }
    listing(site, list(expected))
    return expected


def test_each_state_as_google_reads_it(
    googles_states: dict[str, tuple[str, str | None]], site: Site, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, result = check_urls(capsys, config(tmp_path, site), db)
    found = rows(db)
    assert {p: (r.state, r.rule) for p, r in found.items()} == googles_states
    # a chain is judged by where it ends, its hops and final URL kept
    assert (found["/seven-0"].hops, found["/seven-0"].final_url) == (7, site.url("/ok"))
    assert (found["/to404-0"].hops, found["/to404-0"].final_url) == (1, site.url("/missing"))
    assert found["/to-noindex-0"].hops == 2
    assert "ignored" in found["/two-canonicals"].detail
    problems = {p["loc"].removeprefix(site.url("")): p for p in result["url_problems"]}
    assert problems["/login"]["rule"] == "url-forbidden"
    code, out, _ = run(capsys, "check", "t", "--config", config(tmp_path, site),
                       "--database-url", db, "--urls", "--json", "--fail-on", "url-soft-404")
    assert code == 3, out


def test_a_page_cut_at_body_limit_says_so_and_is_not_called_ok(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A body_limit below Googlebot's 2 MiB cut the part that decides: the state is not
    known, and the detail says where the page was cut."""
    robots(site, "User-agent: *\nAllow: /\n")
    http_server.route("/long", Reply(200, b"<html><head><title>t</title></head><body>"
                                     + b"x" * 200_000 + b"</body></html>", HTML))
    http_server.route("/short", page())
    listing(site, ["/long", "/short"])
    check_urls(capsys, config(tmp_path, site, extra=", body_limit: 64KiB"), db)
    found = rows(db)
    assert found["/short"].state == "ok"
    assert found["/long"].state == "unknown"
    assert "cut at body_limit (65,536 bytes)" in found["/long"].detail


def test_canonicals_that_disagree_are_an_info_finding_never_a_problem(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Google ignores them all: the page is ok, and an info finding (its rule id in the JSON,
    the stored state and the listings) says why; it fails --fail-on only when named."""
    robots(site, "User-agent: *\nAllow: /\n")
    http_server.route("/two", page(b'<link rel="canonical" href="/a">'
                                   b'<link rel="canonical" href="/b">'))
    http_server.route("/plain", page())
    listing(site, ["/two", "/plain"])
    cfg = config(tmp_path, site)
    code, result = check_urls(capsys, cfg, db, "--fail-on", "url-canonicalized,url-noindex")
    assert code == 0, result
    assert result["url_health"] == {"ok": 2}
    assert result["url_problems"] == []
    two = site.url("/two")
    detail = (f"2 rel=canonical that disagree ({site.url('/a')}, {site.url('/b')}): ignored, "
              "as Google ignores them")
    assert result["url_notes"] == [{"loc": two, "state": "ok", "rule": "url-canonical-conflict",
                                    "severity": "info", "http_status": 200, "final_url": None,
                                    "detail": detail}]
    assert (rows(db)["/two"].state, rows(db)["/two"].rule) == ("ok", "url-canonical-conflict")
    code, result = check_urls(capsys, cfg, db, "--fail-on", "url-canonical-conflict")
    assert code == 3, result
    code, out, _ = run(capsys, "urls", "t", "--config", cfg, "--database-url", db,
                       "--status", "ok", "--json")
    assert code == 0
    listed = {row["loc"]: row for row in json.loads(out)["urls"]}
    assert (listed[two]["rule"], listed[two]["detail"]) == ("url-canonical-conflict", detail)
    code, out, _ = run(capsys, "check", "t", "--config", cfg, "--database-url", db, "--urls")
    assert code == 0
    assert ["info", "url-canonical-conflict", two] in [line.split()[:3]
                                                        for line in out.splitlines()]
    code, out, _ = run(capsys, "url", "t", two, "--config", cfg, "--database-url", db)
    assert code == 0
    assert f"  issue: info url-canonical-conflict: {detail}" in out.splitlines()


def test_a_page_that_recovers_with_canonicals_that_disagree_moves_to_ok_without_a_rule(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The health change is about the state moved to, ok: the info finding is not its rule."""
    robots(site, "User-agent: *\nAllow: /\n")
    http_server.route("/p", page(status=404))
    listing(site, ["/p"])
    cfg = config(tmp_path, site)
    check_urls(capsys, cfg, db)
    http_server.route("/p", page(b'<link rel="canonical" href="/a">'
                                 b'<link rel="canonical" href="/b">'))
    check_urls(capsys, cfg, db)
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            c = changes.c
            found = [(json.loads(after)["state"], rule) for after, rule in conn.execute(
                select(c.after, c.rule).where(c.kind == "health").order_by(c.id))]
    finally:
        engine.dispose()
    assert found == [("not-found", "url-not-found"), ("ok", None)]
    assert rows(db)["/p"].rule == "url-canonical-conflict"
