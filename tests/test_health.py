"""The health stage's pure rules, table by table: answers -> state, robots.txt
matching by Google's rules, a removal's reason."""

from __future__ import annotations

import pytest

from monitor.core.rules import TABLE
from monitor.robots.matcher import agent_token
from monitor.urlhealth import verdict as health
from monitor.urlhealth.verdict import Answered, Verdict, judge

HTML = [("content-type", "text/html; charset=utf-8")]
U = "https://example.com/page"


BODY = b"<body><p>content</p></body></html>"


def answer(status: int = 200, head: bytes = b"<html><head></head>",
           headers: list[tuple[str, str]] | None = None, url: str = U) -> Answered:
    """A 2xx answer's body gets some content after its head (an empty one is a soft 404)."""
    body = head + BODY if 200 <= status < 300 else b""
    return Answered(url, status, HTML + (headers or []), body)


@pytest.mark.parametrize(("answers", "state", "rule"), [
    ([answer()], "ok", None),
    ([answer(404)], "not-found", "url-not-found"),
    ([answer(410)], "gone", "url-gone"),
    ([answer(401)], "forbidden", "url-forbidden"),
    ([answer(403)], "forbidden", "url-forbidden"),
    ([answer(400)], "client-error", "url-client-error"),
    ([answer(451)], "client-error", "url-client-error"),
    ([answer(408)], "unknown", None),
    ([answer(429)], "unknown", None),
    ([answer(301, url=U), answer(200, url=U + "/new")], "redirect", "url-redirect"),
    ([answer(301)], "redirect", "url-redirect"),  # no Location
    ([answer(head=b'<html><head><meta name="robots" content="noindex"></head>')],
     "noindex", "url-noindex"),
    ([answer(head=b'<html><head><META NAME="GoogleBot" CONTENT="none"></head>')],
     "noindex", "url-noindex"),
    ([answer(head=b'<html><head><meta name="bingbot" content="noindex"></head>')], "ok", None),
    ([answer(headers=[("x-robots-tag", "noindex, nofollow")])], "noindex", "url-noindex"),
    ([answer(headers=[("x-robots-tag", "googlebot: noindex")])], "noindex", "url-noindex"),
    ([answer(headers=[("x-robots-tag", "otherbot: noindex")])], "ok", None),
    # a date that has passed is a noindex; one to come is not yet
    ([answer(headers=[("x-robots-tag", "unavailable_after: 25 Jun 2010 15:00:00 PST")])],
     "noindex", "url-noindex"),
    ([answer(headers=[("x-robots-tag", "unavailable_after: Wed, 01 Jan 2020 00:00:00 GMT")])],
     "noindex", "url-noindex"),
    ([answer(headers=[("x-robots-tag", "unavailable_after: 2999-01-01T00:00:00+00:00")])],
     "ok", None),
    ([answer(headers=[("x-robots-tag", "otherbot: unavailable_after: 2010-01-01")])],
     "ok", None),
    ([answer(head=b'<html><head><meta name="robots" content="unavailable_after: 2020-06-01">'
              b'</head>')], "noindex", "url-noindex"),
    # a meta after the head (in the body) is read: Google honours it there
    ([answer(head=b'<html><head></head><body><meta name="robots" content="noindex">')],
     "noindex", "url-noindex"),
    # a canonical after an element that ends the head is not read, nor two that disagree
    ([answer(head=b'<html><head><img src="/x.png"><link rel="canonical" href="/other">')],
     "ok", None),
    ([answer(head=b'<html><head><script>var a = "<div>";</script>'
              b'<link rel="canonical" href="/other"></head>')],
     "canonicalized", "url-canonicalized"),
    ([answer(head=b'<html><head><link rel="canonical" href="/a"><link rel="canonical" '
              b'href="/b"></head>')], "ok", "url-canonical-conflict"),
    ([answer(head=b'<html><head><link rel="canonical" href="/a"></head>',
             headers=[("link", '<https://example.com/a>; rel="canonical"')])],
     "canonicalized", "url-canonicalized"),
    # soft 404s: no content, or a page that says it is not found
    ([answer(204)], "soft-404", "url-soft-404"),
    ([Answered(U, 200, HTML, b"")], "soft-404", "url-soft-404"),
    ([Answered(U, 200, HTML, b"<html><head><title>t</title></head><body> </body></html>")],
     "soft-404", "url-soft-404"),
    ([Answered(U, 200, HTML, b"<html><body><div id=app></div><script src=/a.js></script>")],
     "ok", None),
    ([answer(head=b"<html><head><title>404 - Page Not Found</title></head>")],
     "soft-404", "url-soft-404"),
    ([answer(head=b"<html><head><title>Notes on 404 pages</title></head>")], "ok", None),
    # a chain is judged by where it ends
    ([answer(301), answer(404, url=U + "/b")], "not-found", "url-not-found"),
    ([answer(301), answer(head=b'<html><head><meta name="robots" content="noindex">',
                          url=U + "/b")], "noindex", "url-noindex"),
    ([answer(head=b'<html><head><link rel="canonical" href="/other"></head>')],
     "canonicalized", "url-canonicalized"),
    ([answer(head=b'<html><head><link rel="canonical" href="HTTPS://Example.com:443/page#x">')],
     "ok", None),
    ([answer(headers=[("link", '<https://example.com/other>; rel="canonical"')])],
     "canonicalized", "url-canonicalized"),
    ([answer(headers=[("link", '<https://example.com/style.css>; rel=preload')])], "ok", None),
    # not HTML: its body is not read for a head
    ([Answered(U, 200, [("content-type", "application/pdf")],
               b'<head><meta name="robots" content="noindex">')], "ok", None),
    # 401 and 403 are errors: Google treats every 4xx but 429 as content that does not exist
])
def test_answers_give_a_state(answers: list[Answered], state: str, rule: str | None) -> None:
    verdict = judge(answers, listed_url=U)
    assert (verdict.state, verdict.rule) == (state, rule)
    assert verdict.broken == (rule is not None and rule != "url-canonical-conflict")
    assert verdict.severity == (None if rule is None else TABLE[rule].severity)


@pytest.mark.parametrize(("limit", "state"), [(64 * 1024, "unknown"), (2 * 2**20, "ok")])
def test_a_page_cut_at_body_limit_says_so(limit: int, state: str) -> None:
    """Cut before Googlebot's 2 MiB, the rest may hold a noindex: not ok on a guess."""
    cut = Answered(U, 200, HTML, (b"<html><body>" + b"x" * limit)[:limit], truncated=True)
    verdict = judge([cut], listed_url=U)
    assert verdict.state == state
    assert f"cut at body_limit ({limit:,} bytes)" in verdict.detail


def test_forbidden_is_an_error() -> None:
    assert judge([answer(403)], listed_url=U).severity == "error"


def test_a_loop_is_a_redirect_with_its_own_rule() -> None:
    verdict = judge([answer(301), answer(301, url=U + "/b")], listed_url=U, loop=True)
    assert (verdict.state, verdict.rule, verdict.severity) == (
        "redirect", "url-redirect-loop", "error")


@pytest.mark.parametrize(("status", "errors", "state"), [
    (500, 1, "unknown"), (500, 2, "unknown"), (500, 3, "server-error"),
    (502, 3, "server-error"), (503, 3, "server-error"),
])
def test_a_5xx_is_a_server_error_on_its_third_time(status: int, errors: int,
                                                    state: str) -> None:
    verdict = judge([answer(status)], listed_url=U, server_errors=errors)
    assert verdict.state == state
    assert verdict.transient == (state == "unknown")


def test_a_503_with_retry_after_is_never_a_server_error() -> None:
    busy = answer(503, headers=[("retry-after", "120")])
    verdict = judge([busy], listed_url=U, server_errors=10)
    assert (verdict.state, verdict.transient) == ("unknown", True)


@pytest.mark.parametrize(("robots", "path", "allowed"), [
    ("User-agent: *\nDisallow: /private/", "/private/x", False),
    ("User-agent: *\nDisallow: /private/", "/public", True),
    # the longest match wins
    ("User-agent: *\nDisallow: /a\nAllow: /a/b", "/a/b/c", True),
    ("User-agent: *\nAllow: /a\nDisallow: /a/b", "/a/b/c", False),
    # * and $
    ("User-agent: *\nDisallow: /*.pdf$", "/files/x.pdf", False),
    ("User-agent: *\nDisallow: /*.pdf$", "/files/x.pdf?download=1", True),
    # Allow wins a tie
    ("User-agent: *\nDisallow: /page\nAllow: /page", "/page", True),
    # the most specific group for the agent
    ("User-agent: *\nDisallow: /\n\nUser-agent: sitemap-monitor\nAllow: /", "/x", True),
    ("", "/anything", True),
])
def test_robots_txt_by_googles_rules(robots: str, path: str, allowed: bool) -> None:
    rules = health.robots_rules(200, robots.encode())
    # the monitor asks as its product token, as Google's parser expects a crawler to
    agent = agent_token("sitemap-monitor/1.0 (+x)")
    assert agent == "sitemap-monitor"
    assert rules.allows("https://example.com" + path, agent) is allowed


def test_a_robots_txt_that_did_not_answer_allows_everything() -> None:
    assert health.robots_rules(404, b"User-agent: *\nDisallow: /").allows(U, "x")
    assert health.robots_rules(None, b"").allows(U, "x")


@pytest.mark.parametrize(("verdict", "reason"), [
    (Verdict("redirect", 200, "https://example.com/new", 1), "moved"),
    (Verdict("redirect", 200, "https://example.com/elsewhere", 1), "unknown"),
    (Verdict("canonicalized", 200, "https://example.com/new"), "moved"),
    (Verdict("not-found", 404), "gone"),
    (Verdict("gone", 410), "gone"),
    (Verdict("ok", 200), "live"),
    (Verdict("noindex", 200), "unknown"),
    (Verdict("unknown", 503, transient=True), "unknown"),
])
def test_removal_reasons(verdict: Verdict, reason: str) -> None:
    listed = {"https://example.com/new"}
    assert health.removal_reason(verdict, listed.__contains__) == reason


def test_soft_404_reaches_every_list_of_states() -> None:
    """The new state is known wherever states are listed: metrics' label set, alert rules'
    ``state:``, the API's (and OpenAPI's) status values, the web pages' broken states."""
    import json

    from prometheus_client import CollectorRegistry

    from monitor import config
    from monitor.listing import params as listing
    from monitor.observe.metrics import Metrics
    from monitor.serve import openapi
    from monitor.serve import pages as web

    registry = CollectorRegistry()
    Metrics(registry, [], []).set_url_targets(["t"])
    assert registry.get_sample_value("sitemap_monitor_url_health",
                                     {"target": "t", "state": "soft-404"}) == 0
    cfg = config.parse({
        "targets": [{"name": "t", "url": "https://example.com/sitemap.xml"}],
        "alerts": {"channels": [{"name": "h", "type": "webhook", "url": "https://h.example/"}],
                   "rules": [{"name": "soft", "when": "url_health", "state": ["soft-404"],
                              "channels": ["h"]}]}})
    assert cfg.alerts.rules[0].state == ["soft-404"]
    assert "soft-404" in listing.STATUSES
    assert '"soft-404"' in json.dumps(openapi.document())
    assert "soft-404" in web._BROKEN


def test_a_commented_out_noindex_does_not_count() -> None:
    page = answer(head=b'<html><head><!-- <meta name="robots" content="noindex"> --></head>')
    assert judge([page], listed_url=U).state == "ok"


@pytest.mark.parametrize("body", [
    b"<html><body>x" + b"<meta name=a " * 150_000,  # tags that never close
    b"<html><head>" + b"<!-- a" * 300_000,  # comments that never close
    b"<html><body>" + b"<h1>a" * 300_000,
    b"<html><head><title>t</title><s" + b"x" * 2_000_000,
])
def test_a_hostile_2_mib_page_is_judged_in_linear_time(body: bytes) -> None:
    """The body is scanned as bytes: no pattern goes back over the page once per tag (these
    took minutes before the scans were made possessive)."""
    import time

    started = time.process_time()
    judge([Answered(U, 200, HTML, body)], listed_url=U)
    assert time.process_time() - started < 10  # about 0.2 s; quadratic is minutes
