"""The health of listed URLs through ``check --urls``: a real local site with every
state, on both databases; politeness measured from the server's request log."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, TestServer
from site_fixture import Site, urlset
from sqlalchemy import select

from monitor.cli.commands import main
from monitor.core.model import BROKEN_STATES
from monitor.store.db import make_engine
from monitor.store.schema import changes, url_states

PAGE = (b"<!doctype html><html><head><title>p</title>%s</head><body>"
        + b"x" * 2000 + b"</body></html>")


def page(head: bytes = b"", headers: dict[str, str] | None = None, status: int = 200) -> Reply:
    return Reply(status, PAGE % head, headers={"Content-Type": "text/html; charset=utf-8",
                                               **(headers or {})})


def by_url_checks(server: TestServer, route: str | None = None) -> list[Any]:
    """The requests the URL checks made (their page Accept header): a check also reads the
    host's robots.txt, for itself, with the sitemap fetch's."""
    from monitor.read.fetch import _ACCEPT_PAGE

    return [r for r in server.requests if r.headers.get("accept") == _ACCEPT_PAGE
            and (route is None or r.route == route)]


def config(tmp_path: Path, site: Site, *, rate: float = 1000, name: str = "t") -> str:
    path = tmp_path / "monitor.yaml"
    path.write_text(
        "defaults:\n  url_checks: {{enabled: true, rate: {}}}\n"
        "targets:\n  - {{name: {}, url: '{}'}}\n".format(rate, name, site.url("/sitemap.xml")))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    found = capsys.readouterr()
    return code, found.out, found.err


def check_urls(capsys: pytest.CaptureFixture[str], cfg: str, db: str, *extra: str,
               ) -> tuple[int, dict[str, Any]]:
    code, out, err = run(capsys, "check", "t", "--config", cfg, "--database-url", db,
                         "--urls", "--json", *extra)
    assert out, err
    return code, json.loads(out)


def states(db: str) -> dict[str, tuple[str, str | None]]:
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            u = url_states.c
            return {r.loc: (r.state, r.rule) for r in conn.execute(
                select(u.loc, u.state, u.rule).where(u.listed.is_(True)))}
    finally:
        engine.dispose()


def recorded(db: str, kind: str) -> list[Any]:
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            c = changes.c
            return list(conn.execute(select(c.loc, c.before, c.after, c.reason)
                                     .where(c.kind == kind).order_by(c.id)))
    finally:
        engine.dispose()


@pytest.fixture
def every_state(site: Site, http_server: TestServer) -> dict[str, str]:
    """A site whose sitemap lists one URL in each state, and a few that must not count."""
    s = http_server
    s.route("/robots.txt", Reply(body=b"User-agent: *\nDisallow: /private/\nAllow: /private/ok$\n"))
    expected = {
        "/ok": "ok", "/private/ok": "ok", "/moved": "redirect", "/loop-a": "redirect",
        "/to-metadata": "unknown", "/missing": "not-found", "/gone": "gone",
        "/secret": "forbidden", "/teapot": "client-error", "/broken": "server-error",
        "/busy": "unknown", "/slow-down": "unknown", "/meta-noindex": "noindex",
        "/header-noindex": "noindex", "/googlebot-noindex": "noindex",
        "/other-bot-noindex": "ok", "/canonical-elsewhere": "canonicalized",
        "/canonical-self": "ok", "/canonical-header": "canonicalized",
        "/private/page": "disallowed",
    }
    s.route("/ok", page())
    s.route("/private/ok", page())
    s.route("/moved", Reply(301, headers={"Location": "/moved-2"}))
    s.route("/moved-2", Reply(302, headers={"Location": s.url("/ok")}))
    s.route("/loop-a", Reply(301, headers={"Location": "/loop-b"}))
    s.route("/loop-b", Reply(301, headers={"Location": "/loop-a"}))
    s.route("/to-metadata", Reply(302, headers={"Location": "http://169.254.169.254/latest/"}))
    s.route("/missing", page(status=404))
    s.route("/gone", page(status=410))
    s.route("/secret", page(status=403))
    s.route("/teapot", page(status=418))
    s.route("/broken", page(status=500))
    s.route("/busy", page(status=503, headers={"Retry-After": "3600"}))
    s.route("/slow-down", page(status=429))
    s.route("/meta-noindex", page(b'<meta name="robots" content="noindex, follow">'))
    s.route("/header-noindex", page(headers={"X-Robots-Tag": "noindex"}))
    s.route("/googlebot-noindex", page(b'<meta name="googlebot" content="NOINDEX">'))
    s.route("/other-bot-noindex", page(headers={"X-Robots-Tag": "otherbot: noindex"}))
    s.route("/canonical-elsewhere", page(b'<link rel="canonical" href="/ok">'))
    s.route("/canonical-self", page(b'<link rel="canonical" href="%s">'
                                    % s.url("/canonical-self").encode()))
    s.route("/canonical-header", page(headers={"Link": f'<{s.url("/ok")}>; rel="canonical"'}))
    s.route("/private/page", page())
    site.set("/sitemap.xml", urlset({site.url(p): None for p in expected}))
    return expected


def test_every_state_is_found_and_stored(
    every_state: dict[str, str], site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = config(tmp_path, site)
    code, result = check_urls(capsys, cfg, db)
    assert code == 0
    expected: dict[str, int] = {}
    for state in every_state.values():
        expected[state] = expected.get(state, 0) + 1
    assert result["url_health"] == expected
    assert result["url_checks"]["checked"] == len(every_state)
    broken = sum(1 for s in every_state.values() if s not in ("ok", "unknown"))
    assert result["url_checks"]["transitions"] == broken  # counted across concurrent saves
    found = states(db)
    assert {loc.removeprefix(site.url("")): s for loc, (s, _) in found.items()} == every_state
    assert found[site.url("/loop-a")][1] == "url-redirect-loop"
    assert found[site.url("/moved")][1] == "url-redirect"
    # A disallowed URL is never requested; robots.txt is read once, by the check, whose
    # version is in force for the URL checks too.
    assert not http_server.requests_to("/private/page")
    assert len(http_server.requests_to("/robots.txt")) == 1
    # A 5xx is tried three times before it is a server-error; a 503 with Retry-After and a
    # 429 are asked once and are never broken.
    assert len(http_server.requests_to("/broken")) == 3
    assert len(http_server.requests_to("/busy")) == 1
    assert len(http_server.requests_to("/slow-down")) == 1
    problems = {p["loc"].removeprefix(site.url("")): p for p in result["url_problems"]}
    assert "/busy" not in problems
    assert "/slow-down" not in problems
    assert problems["/missing"]["rule"] == "url-not-found"
    # The first check writes a transition for each problem found, none for the ok ones.
    first = {loc.removeprefix(site.url("")): json.loads(after)["state"]
             for loc, _, after, _ in recorded(db, "health")}
    assert first == {p: s for p, s in every_state.items() if s not in ("ok", "unknown")}
    # `urls --status broken`: every URL in an error state (as the pages count them), the
    # redirects, canonicals and unknowns left out
    code, out, err = run(capsys, "urls", "t", "--status", "broken", "--json", "--config", cfg,
                         "--database-url", db)
    assert code == 0, err
    listed = {u["loc"].removeprefix(site.url("")): u["status"] for u in json.loads(out)["urls"]}
    assert listed == {p: s for p, s in every_state.items() if s in BROKEN_STATES}
    assert len(set(listed.values())) >= 5  # not-found, gone, forbidden, noindex...


def test_a_redirect_to_the_metadata_address_is_not_followed(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    http_server.route("/to-metadata",
                      Reply(302, headers={"Location": "http://169.254.169.254/latest/"}))
    site.set("/sitemap.xml", urlset({site.url("/to-metadata"): None}))
    check_urls(capsys, config(tmp_path, site), db)
    engine = make_engine(db)
    with engine.connect() as conn:
        row = conn.execute(select(url_states.c.state, url_states.c.detail)).one()
    engine.dispose()
    assert row.state == "unknown"
    assert "169.254.169.254" in row.detail
    assert "address" in row.detail


def test_fail_on_url_rules_exits_3_for_ci_pipelines(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    http_server.route("/ok", page())
    http_server.route("/missing", page(status=404))
    site.set("/sitemap.xml", urlset({site.url("/ok"): None, site.url("/missing"): None}))
    cfg = config(tmp_path, site)
    code, _ = check_urls(capsys, cfg, db, "--fail-on", "url-noindex,url-gone")
    assert code == 0
    code, result = check_urls(capsys, cfg, db, "--fail-on", "url-not-found,url-noindex")
    assert code == 3
    assert result["url_health"] == {"ok": 1, "not-found": 1}
    code, out, err = run(capsys, "check", "t", "--config", cfg, "--database-url", db,
                         "--fail-on", "url-not-found")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "sitemap-monitor: --fail-on: 'url-not-found' is found by the URL checks: add --urls")
    code, out, err = run(capsys, "check", "t", "--config", cfg, "--database-url", db,
                         "--urls")
    assert code == 0
    assert "url health: 2 listed, 2 checked" in out
    assert "not-found  404" in out.replace("   ", "  ")


def test_only_transitions_are_written(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for i in range(5):
        http_server.route(f"/p{i}", page())
    site.set("/sitemap.xml", urlset({site.url(f"/p{i}"): None for i in range(5)}))
    cfg = config(tmp_path, site)
    check_urls(capsys, cfg, db)
    check_urls(capsys, cfg, db)
    assert recorded(db, "health") == []  # all ok twice: nothing written
    http_server.route("/p3", page(status=404))
    check_urls(capsys, cfg, db)
    check_urls(capsys, cfg, db)
    found = recorded(db, "health")
    assert [(loc, json.loads(b)["state"], json.loads(a)["state"]) for loc, b, a, _ in found] == [
        (site.url("/p3"), "ok", "not-found")]
    http_server.route("/p3", page())
    check_urls(capsys, cfg, db)
    assert [json.loads(a)["state"] for _, _, a, _ in recorded(db, "health")] == [
        "not-found", "ok"]


def test_removed_urls_get_a_reason(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = ["/stays", "/new-home", "/moved", "/deleted", "/still-live", "/flaky"]
    http_server.route("/stays", page())
    http_server.route("/new-home", page())
    for p in paths[2:]:
        http_server.route(p, page())
    site.set("/sitemap.xml", urlset({site.url(p): None for p in paths}))
    cfg = config(tmp_path, site)
    check_urls(capsys, cfg, db)
    # The deploy: four URLs leave the sitemap.
    http_server.route("/moved", Reply(301, headers={"Location": site.url("/new-home")}))
    http_server.route("/deleted", page(status=404))
    http_server.route("/flaky", Reply(503, headers={"Retry-After": "120"}))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in ("/stays", "/new-home")}))
    _code, result = check_urls(capsys, cfg, db)
    assert result["removed"] == 4
    reasons = {loc.removeprefix(site.url("")): reason
               for loc, _, _, reason in recorded(db, "removed")}
    assert reasons == {"/moved": "moved", "/deleted": "gone", "/still-live": "live",
                       "/flaky": "unknown"}
    assert set(states(db)) == {site.url("/stays"), site.url("/new-home")}
    engine = make_engine(db)
    with engine.connect() as conn:  # the dropped URLs' rows went with their triage
        assert conn.execute(select(url_states.c.loc).where(
            url_states.c.listed.is_(False))).all() == []
    engine.dispose()


def test_the_rate_per_host_is_kept_and_a_429_slows_the_host(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = [f"/p{i}" for i in range(12)]
    for p in paths:
        http_server.route(p, page())
    http_server.route("/p5", Reply(429, headers={"Retry-After": "2"}))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in paths}))
    check_urls(capsys, config(tmp_path, site, rate=5), db)
    times = [r.time for r in by_url_checks(http_server) if r.route.startswith("/p")]
    assert len(times) == 12
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # 5 a second: 0.2 s apart. Arrival times carry the server threads' jitter on a busy
    # machine: one late arrival lengthens its gap and shortens the next by as much, so any
    # two gaps in a row still span two intervals, no two requests come together, and on
    # average they keep the rate; a host without a limit sends them all at once (~0 s).
    assert min(gaps) >= 0.05, gaps
    assert min(a + b for a, b in itertools.pairwise(gaps)) >= 0.3, gaps
    assert sum(gaps[:4]) / 4 >= 0.19, gaps
    # The 429 said Retry-After 2: the host's next request waited that long.
    after_429 = [r.time for r in http_server.requests if r.route.startswith("/p")]
    p5 = next(i for i, r in enumerate(
        [r for r in http_server.requests if r.route.startswith("/p")]) if r.route == "/p5")
    if p5 + 1 < len(after_429):
        assert after_429[p5 + 1] - after_429[p5] >= 1.9


def test_a_check_without_urls_fetches_no_page(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    http_server.route("/p", page())
    site.set("/sitemap.xml", urlset({site.url("/p"): None}))
    code, out, _ = run(capsys, "check", "t", "--config", config(tmp_path, site),
                       "--database-url", db, "--json")
    assert code == 0
    assert "url_health" not in json.loads(out)
    assert not http_server.requests_to("/p")
    assert not by_url_checks(http_server)
    assert len(http_server.requests_to("/robots.txt")) == 1  # the check's own


def test_listings_show_health_transitions_and_reasons(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for p in ("/a", "/b", "/c"):
        http_server.route(p, page())
    site.set("/sitemap.xml", urlset({site.url(p): None for p in ("/a", "/b", "/c")}))
    cfg = config(tmp_path, site)
    check_urls(capsys, cfg, db)
    http_server.route("/b", page(status=404))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in ("/a", "/b")}))
    check_urls(capsys, cfg, db)

    def listed(*argv: str) -> Any:
        code, out, err = run(capsys, *argv, "--config", cfg, "--database-url", db, "--json")
        assert code == 0, err
        return json.loads(out)

    broken = listed("urls", "t", "--status", "not-found")
    assert [(u["loc"], u["status"], u["rule"], u["http_status"]) for u in broken["urls"]] == [
        (site.url("/b"), "not-found", "url-not-found", 404)]
    assert [u["loc"] for u in listed("urls", "t", "--status", "ok")["urls"]] == [site.url("/a")]
    # every URL in an error state at once, each with its own state
    assert [(u["loc"], u["status"]) for u in listed("urls", "t", "--status", "broken")["urls"]
            ] == [(site.url("/b"), "not-found")]
    found = listed("changes", "t")["changes"]
    assert sorted((c["kind"], c["loc"], c["reason"]) for c in found) == [
        ("health", site.url("/b"), None), ("removed", site.url("/c"), "live")]
    health = listed("changes", "t", "--kind", "health")["changes"]
    assert [(c["before"]["state"], c["after"]["state"]) for c in health] == [("ok", "not-found")]
    # a diff compares URL sets: the health of a URL is not part of it
    assert [(c["kind"], c["loc"]) for c in listed("diff", "t", "--from", "1")["changes"]] == [
        ("removed", site.url("/c"))]
    code, _, err = run(capsys, "diff", "t", "--from", "1", "--kind", "health",
                       "--database-url", db)
    assert code == 2
    assert "--kind: unknown health" in err
    code, _, err = run(capsys, "urls", "t", "--status", "ok", "--at", "1", "--database-url", db)
    assert code == 2
    assert "status: 'ok' is a URL's health now, which has no history" in err


def test_urls_over_several_batches_are_all_saved_and_counted(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Verdicts saved in several batches (SAVE_BATCH each): none lost, every one counted."""
    paths = [f"/p{i}" for i in range(450)]
    for i, p in enumerate(paths):
        http_server.route(p, page(status=404 if i % 2 else 200))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in paths}))
    _, result = check_urls(capsys, config(tmp_path, site), db)
    assert result["url_health"] == {"ok": 225, "not-found": 225}
    assert result["url_checks"]["checked"] == 450
    assert result["url_checks"]["transitions"] == 225
    assert len(recorded(db, "health")) == 225


def test_url_states_follow_the_snapshots_in_order(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checks without --urls in between: the URL checks catch up on their changes in order,
    a few at a time (a batch of 3 here), a URL dropped and listed again being listed."""
    from monitor.store import urlstates as store_health

    monkeypatch.setattr(store_health, "_BATCH", 3)
    paths = [f"/p{i}" for i in range(8)]
    for p in paths:
        http_server.route(p, page())
    cfg = config(tmp_path, site)

    def publish(listed: list[str]) -> None:
        site.set("/sitemap.xml", urlset({site.url(p): None for p in listed}))
        code, out, _ = run(capsys, "check", "t", "--config", cfg, "--database-url", db)
        assert code == 0, out

    site.set("/sitemap.xml", urlset({site.url(p): None for p in paths[:4]}))
    check_urls(capsys, cfg, db)
    publish(paths[1:8])  # /p0 dropped, /p4../p7 added
    publish(paths[:3] + paths[4:])  # /p0 back, /p3 dropped
    _, result = check_urls(capsys, cfg, db)
    assert set(states(db)) == {site.url(p) for p in paths if p != "/p3"}
    assert result["url_health"] == {"ok": 7}
    reasons = {loc: reason for loc, _, _, reason in recorded(db, "removed")}
    assert reasons == {site.url("/p0"): None, site.url("/p3"): "live"}


def test_targets_on_one_host_share_its_rate() -> None:
    """The daemon's one Budget: two targets' requests to one host take turns at its rate."""
    import asyncio

    from monitor.urlhealth.checker import Budget

    budget = Budget()
    times: dict[str, list[float]] = {"a": [], "b": []}

    async def target(host: str, n: int) -> None:
        for _ in range(n):
            await budget.take(host, 20.0)
            times[host].append(asyncio.get_running_loop().time())

    async def go() -> float:
        start = asyncio.get_running_loop().time()
        await asyncio.gather(target("a", 5), target("a", 5), target("b", 5))
        return asyncio.get_running_loop().time() - start

    elapsed = asyncio.run(go())
    assert [len(times["a"]), len(times["b"])] == [10, 5]
    assert elapsed >= 0.45 - 0.02  # 10 turns of host a at 20/s
    # Host b alongside, not after a: its 5 turns (0.2 s) end before a's 10 (0.45 s). (A
    # bound on the elapsed time said so too, and failed when a busy machine was slow.)
    assert times["b"][-1] < times["a"][-1]


def test_changes_by_removal_reason(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for p in ("/a", "/b", "/c"):
        http_server.route(p, page())
    http_server.route("/c", page(status=404))
    site.set("/sitemap.xml", urlset({site.url(p): None for p in ("/a", "/b", "/c")}))
    cfg = config(tmp_path, site)
    check_urls(capsys, cfg, db)
    site.set("/sitemap.xml", urlset({site.url("/a"): None}))
    check_urls(capsys, cfg, db)
    code, out, _ = run(capsys, "changes", "t", "--reason", "live", "--database-url", db,
                       "--json")
    assert code == 0
    assert [(c["loc"], c["reason"]) for c in json.loads(out)["changes"]] == [
        (site.url("/b"), "live")]
    code, out, _ = run(capsys, "changes", "t", "--reason", "gone,live", "--database-url", db,
                       "--format", "csv")
    assert sorted(line.split(",")[4] for line in out.splitlines()[1:]) == [
        site.url("/b"), site.url("/c")]
    code, _, err = run(capsys, "changes", "t", "--reason", "vanished", "--database-url", db)
    assert code == 2
    assert "--reason: unknown vanished (one of moved, gone, live, unknown)" in err


def test_changes_by_rule(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``changes --rule``: the URLs whose health broke by that rule, the entries that became
    invalid by it (the filter), exact ids or globs; an unknown one says so."""
    for p in ("/a", "/b", "/c"):
        http_server.route(p, page())
    listed = {site.url(p): None for p in ("/a", "/b", "/c")}
    site.set("/sitemap.xml", urlset(listed))
    cfg = config(tmp_path, site)
    check_urls(capsys, cfg, db)
    http_server.route("/b", page(status=404))
    http_server.route("/c", page(status=410))
    site.set("/sitemap.xml", urlset({**listed, "relative/page": None}))
    check_urls(capsys, cfg, db)

    def locs(*rules: str) -> list[tuple[str, str, str]]:
        argv = [a for rule in rules for a in ("--rule", rule)]
        code, out, err = run(capsys, "changes", "t", *argv, "--database-url", db, "--json")
        assert code == 0, err
        return sorted((c["kind"], c["rule"], c["loc"]) for c in json.loads(out)["changes"])

    assert locs("url-not-found") == [("health", "url-not-found", site.url("/b"))]
    assert locs("url-*") == [("health", "url-gone", site.url("/c")),
                             ("health", "url-not-found", site.url("/b"))]
    assert locs("loc-not-absolute") == [("invalid", "loc-not-absolute", "relative/page")]
    assert locs("url-gone", "loc-*") == [("health", "url-gone", site.url("/c")),
                                         ("invalid", "loc-not-absolute", "relative/page")]
    assert locs("url-noindex") == []
    code, out, _ = run(capsys, "changes", "t", "--rule", "url-gone", "--format", "csv",
                       "--database-url", db)
    header, *lines = out.splitlines()
    assert header.split(",")[-1] == "rule"
    assert [line.split(",")[-1] for line in lines] == ["url-gone"]
    code, _, err = run(capsys, "changes", "t", "--rule", "url-nope", "--database-url", db)
    assert code == 2
    assert "--rule: 'url-nope' matches no rule id" in err


def test_html_is_read_as_a_browser_builds_it(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Meta refresh followed as a redirect hop, a robots meta only as an element, a canonical
    resolved against ``<base href>`` and its target checked once a round, not-found phrases
    whole: through ``check --urls`` against a real local site."""
    s = http_server
    body = b"<p>" + b"words of a real page " * 50 + b"</p>"
    html = {"Content-Type": "text/html; charset=utf-8"}

    def doc(head: bytes, rest: bytes = body) -> Reply:
        return Reply(200, b"<!doctype html><html><head>" + head + b"</head><body>" + rest
                     + b"</body></html>", headers=html)

    s.route("/ok", page())
    s.route("/b/page", page())
    s.route("/dead", page(status=404))
    s.route("/refresh-now", doc(b'<meta http-equiv="refresh" content="0; url=/ok">', b""))
    s.route("/refresh-later", doc(b"<meta http-equiv=refresh content=\"5;URL='/ok'\">"))
    s.route("/refresh-to-404", doc(b'<meta http-equiv="refresh" content="0;url=/dead">'))
    s.route("/reloads-itself", doc(b'<meta http-equiv="refresh" content="30">'))
    s.route("/script-noindex", doc(
        b"<script>var tag = '<meta name=\"robots\" content=\"noindex\">';</script>"))
    s.route("/textarea-noindex", doc(
        b"<title>How to hide a page</title>",
        b'<textarea><meta name="robots" content="noindex"></textarea>' + body))
    s.route("/body-noindex", doc(b"", body + b'<meta name="robots" content="noindex">'))
    s.route("/a/page", doc(b'<base href="/b/"><link rel="canonical" href="page">'))
    s.route("/to-dead-1", doc(b'<link rel="canonical" href="/dead">'))
    s.route("/to-dead-2", doc(b'<link rel="canonical" href="/dead">'))
    s.route("/vinyl", doc(b"<title>Rare vinyl not found in stores</title>"))
    s.route("/coupe", doc(b"<title>Classic cars</title>", b"<h1>404 Coup\xc3\xa9</h1>" + body))
    s.route("/seite", doc(b"<title>Seite nicht gefunden \xe2\x80\x93 Shop</title>"))
    expected = {
        "/refresh-now": ("redirect", "url-redirect"),
        "/refresh-later": ("redirect", "url-redirect"),
        "/refresh-to-404": ("not-found", "url-not-found"),
        "/reloads-itself": ("ok", None),
        "/script-noindex": ("ok", None),
        "/textarea-noindex": ("ok", None),
        "/body-noindex": ("noindex", "url-noindex"),
        "/a/page": ("canonicalized", "url-canonicalized"),
        "/to-dead-1": ("canonicalized", "url-canonical-broken"),
        "/to-dead-2": ("canonicalized", "url-canonical-broken"),
        "/vinyl": ("ok", None),
        "/coupe": ("ok", None),
        "/seite": ("soft-404", "url-soft-404"),
    }
    site.set("/sitemap.xml", urlset({site.url(p): None for p in expected}))
    code, _ = check_urls(capsys, config(tmp_path, site), db,
                         "--fail-on", "url-canonical-broken")
    assert code == 3
    found = {loc.removeprefix(site.url("")): v for loc, v in states(db).items()}
    assert found == expected
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            u = url_states.c
            rows = {r.loc.removeprefix(site.url("")): r for r in conn.execute(
                select(u.loc, u.final_url, u.hops, u.detail))}
    finally:
        engine.dispose()
    assert rows["/a/page"].final_url == site.url("/b/page")
    assert rows["/refresh-now"].final_url == site.url("/ok")
    assert "instant: permanent" in rows["/refresh-now"].detail
    assert "after 5 s: temporary" in rows["/refresh-later"].detail
    assert site.url("/dead") in rows["/to-dead-1"].detail
    assert "not-found" in rows["/to-dead-1"].detail
    # The canonical target is checked once in the round, however many pages name it; the
    # refresh that leads there is a request of its own.
    assert len(by_url_checks(s, "/dead")) == 2


def test_a_page_that_is_the_hosts_own_not_found_page_is_a_soft_404(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A host that answers a missing path with a 200 page: the URL checks ask it for a path
    that cannot exist, once a day, and a listed page with that page's content is a soft 404,
    in words no phrase list holds; the pages around the same navigation are not."""
    s = http_server
    html = {"Content-Type": "text/html; charset=utf-8"}
    chrome = (b"<header><nav><a href=/>Trattoria</a> <a href=/menu>Menu</a> <a href=/shop>"
              b"Negozio</a> <a href=/contatti>Contatti</a></nav></header>")
    footer = b"<footer>Trattoria da Gino, via Roma 1, Bologna. P.IVA 01234567890</footer>"

    def shop(title: str, main: str) -> Reply:
        return Reply(200, b"<!doctype html><html lang=it><head><title>" + title.encode()
                     + b"</title></head><body>" + chrome + b"<main>" + main.encode()
                     + b"</main>" + footer + b"</body></html>", headers=html)

    def missing(request: Any) -> Reply:
        return shop("Trattoria da Gino", "<h2>Ci dispiace</h2><p>Qui non c'è niente: forse "
                    "il piatto che cercavi è uscito dal menu. Torna alla pagina iniziale, "
                    "guarda il menu del giorno o scrivici per una prenotazione.</p>")

    s.missing = missing
    s.route("/", shop("Trattoria da Gino", "<h1>Benvenuti</h1><p>Cucina bolognese dal 1962, "
                      "tortellini fatti a mano ogni mattina.</p>"))
    s.route("/shop/tortellini", shop("Tortellini 500 g", "<h1>Tortellini 500 g</h1><p>Pasta "
                                     "all'uovo ripiena di carne, 12 euro.</p>"))
    s.route("/shop/ragu", missing)  # a product taken down: the same 200 page
    site.set("/sitemap.xml", urlset({s.url(p): None for p in ("/", "/shop/tortellini",
                                                              "/shop/ragu")}))
    cfg = config(tmp_path, site)
    check_urls(capsys, cfg, db)
    found = {loc.removeprefix(site.url("")): v for loc, v in states(db).items()}
    assert found == {"/": ("ok", None), "/shop/tortellini": ("ok", None),
                     "/shop/ragu": ("soft-404", "url-soft-404")}
    probes = [r for r in by_url_checks(s) if r.route.startswith("/sitemap-monitor-")]
    assert len(probes) == 1
    # Asked once a day per host: a second round reads the stored fingerprint.
    check_urls(capsys, cfg, db)
    assert [r for r in by_url_checks(s) if r.route.startswith("/sitemap-monitor-")] == probes
    assert states(db)[s.url("/shop/ragu")] == ("soft-404", "url-soft-404")
