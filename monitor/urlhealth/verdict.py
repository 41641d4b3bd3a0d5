"""The health of a listed URL: what one page's answers say, as one state. Pure.

The URL checks (``monitor.urlhealth.checker``) fetch a page hop by hop and hand the answers here:
``judge`` turns them into a ``Verdict`` the way Search Console's page indexing report does
(404, redirect, ``noindex``, canonical elsewhere, disallowed by robots.txt), and
``removal_reason`` says what became of a URL a sitemap dropped. Nothing here does I/O.

States whose answer cannot be trusted to last (408, 429, 503, timeouts, refused connections,
a 5xx before its third time in a row) are ``transient``: the caller keeps the URL's previous
state and tries again, and a URL is never called broken for them (``unknown``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urljoin, urlsplit

from lxml import etree

from monitor.model import REMOVAL_REASONS, URL_REDIRECT_LOOP, URL_STATES, Severity
from monitor.read.robotstxt import RobotsRules, robots_url

__all__ = [
    "REASONS", "SERVER_ERROR_ATTEMPTS", "STATES", "Answered", "RobotsRules", "Verdict",
    "canonical_of", "failed", "judge", "noindex_of", "removal_reason", "robots_rules",
    "robots_url",
]

State = Literal[
    "ok", "redirect", "not-found", "gone", "forbidden", "client-error", "server-error",
    "noindex", "canonicalized", "disallowed", "unknown",
]
STATES = URL_STATES
REASONS = REMOVAL_REASONS
SERVER_ERROR_ATTEMPTS = 3  # a 5xx is a server-error on its third time in a row
_TRANSIENT_STATUSES = frozenset({408, 429})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_HEAD_END = re.compile(rb"</head\s*>|<body[\s>]", re.IGNORECASE)
_LINK = re.compile(r'<\s*([^>]*)>\s*((?:;\s*[^,;]*)*)')
_REL = re.compile(r';\s*rel\s*=\s*"?([^";,]*)"?', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Answered:
    """One hop's answer, as much as judging it needs."""

    url: str
    status: int
    headers: Sequence[tuple[str, str]]  # lower-case names, in order, repeats kept
    head: bytes = b""  # the first bytes of a 2xx body

    def header(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one check of one URL found."""

    state: str
    status: int | None = None  # the last answer's HTTP status
    final_url: str | None = None  # where its redirects end
    hops: int = 0
    detail: str = ""  # one line for people: why this state
    transient: bool = False  # no answer to trust: keep the previous state, try again
    loop: bool = False  # a redirect state that is a loop (or ran out of hops)

    @property
    def rule(self) -> str | None:
        """The rule id of this state (``url-redirect-loop`` for a loop), or None."""
        if self.loop:
            return URL_REDIRECT_LOOP
        known = STATES.get(self.state)
        return None if known is None else known[0]

    @property
    def severity(self) -> Severity | None:
        if self.loop:
            return "error"
        known = STATES.get(self.state)
        return None if known is None else known[1]

    @property
    def broken(self) -> bool:
        """Counted as a problem: every state with a rule id."""
        return self.rule is not None


def failed(url: str, kind: str, message: str, *, hops: int = 0) -> Verdict:
    """A check that got no answer (timeout, refused, blocked address): unknown, transient."""
    return Verdict("unknown", final_url=url if hops else None, hops=hops,
                   detail=f"{kind}: {message}", transient=True)


def judge(answers: Sequence[Answered], *, listed_url: str, loop: bool = False,
          server_errors: int = 1) -> Verdict:
    """The state of ``listed_url`` from its answers, first hop first (redirects followed).

    ``loop``: the last answer redirects to a URL already visited, or past the hop limit.
    ``server_errors``: how many checks in a row (this one included) answered 5xx.
    """
    last = answers[-1]
    hops = len(answers) - 1
    final = last.url if hops else None
    if loop:
        return Verdict("redirect", last.status, last.url, hops + 1, loop=True,
                       detail=f"redirect loop after {hops + 1} hops at {last.url}")
    if hops:
        return Verdict("redirect", last.status, final, hops,
                       detail=f"redirects ({hops} hops) to {final} ({last.status})")
    status = last.status
    if status in _REDIRECTS:  # a 3xx without a Location to follow
        return Verdict("redirect", status, detail=f"HTTP {status} without a Location")
    if status in _TRANSIENT_STATUSES or (status == 503 and last.header("retry-after")):
        return Verdict("unknown", status, detail=f"HTTP {status}: try again later",
                       transient=True)
    if status >= 500:
        if server_errors < SERVER_ERROR_ATTEMPTS:
            return Verdict("unknown", status, transient=True,
                           detail=f"HTTP {status} ({server_errors} of "
                                  f"{SERVER_ERROR_ATTEMPTS} in a row)")
        return Verdict("server-error", status,
                       detail=f"HTTP {status} on {server_errors} checks in a row")
    if status == 404:
        return Verdict("not-found", status, detail="HTTP 404")
    if status == 410:
        return Verdict("gone", status, detail="HTTP 410")
    if status in (401, 403):
        return Verdict("forbidden", status, detail=f"HTTP {status}")
    if status >= 400:
        return Verdict("client-error", status, detail=f"HTTP {status}")
    if status < 200 or status >= 300:
        return Verdict("unknown", status, detail=f"HTTP {status}", transient=True)
    html = _html_head(last)
    robots = noindex_of(last.header("x-robots-tag"), html)
    if robots:
        return Verdict("noindex", status, detail=robots)
    canonical = canonical_of(last.header("link"), html, last.url)
    if canonical is not None and _same_page(canonical) != _same_page(listed_url):
        return Verdict("canonicalized", status, final_url=canonical,
                       detail=f"rel=canonical names {canonical}")
    return Verdict("ok", status)


def _html_head(answer: Answered) -> etree._Element | None:
    """The parsed ``<head>`` of an HTML answer (lxml's HTML parser), or None."""
    content_type = ",".join(answer.header("content-type")).lower()
    if not answer.head or (content_type and not any(t in content_type for t in _HTML_TYPES)):
        return None
    data = answer.head
    end = _HEAD_END.search(data)
    if end is not None:
        data = data[:end.start()]
    try:
        parser = etree.HTMLParser(recover=True, no_network=True, remove_comments=True,
                                  remove_pis=True)
        root = etree.fromstring(data, parser)
    except (etree.LxmlError, ValueError):
        return None
    return root


def noindex_of(robots_headers: Iterable[str], html: etree._Element | None) -> str | None:
    """Why the page says ``noindex`` (``X-Robots-Tag`` or a robots/googlebot meta), or None.

    A header's directives may name a user agent (``googlebot: noindex``); those that name
    another crawler do not count."""
    for value in robots_headers:
        agent = None
        for part in value.split(","):
            words = part.strip().lower()
            if ":" in words:
                head, _, rest = words.partition(":")
                if head.strip() not in ("unavailable_after",):
                    agent, words = head.strip(), rest.strip()
            if words in ("noindex", "none") and agent in (None, "googlebot"):
                return f"X-Robots-Tag: {value.strip()}"
    if html is None:
        return None
    for meta in html.iter("meta"):
        name = (meta.get("name") or "").strip().lower()
        if name not in ("robots", "googlebot"):
            continue
        content = (meta.get("content") or "").lower()
        if any(word.strip() in ("noindex", "none") for word in content.split(",")):
            return f'<meta name="{name}" content="{meta.get("content")}">'
    return None


def canonical_of(link_headers: Iterable[str], html: etree._Element | None,
                 base: str) -> str | None:
    """The canonical URL a page names (``Link: <...>; rel=canonical`` first, then
    ``<link rel="canonical">``), absolute, or None."""
    for value in link_headers:
        for match in _LINK.finditer(value):
            rels = _REL.findall(match.group(2))
            if any("canonical" in rel.lower().split() for rel in rels):
                return urljoin(base, str(match.group(1)).strip())
    if html is None:
        return None
    for link in html.iter("link"):
        rel = (link.get("rel") or "").lower().split()
        href = (link.get("href") or "").strip()
        if "canonical" in rel and href:
            return urljoin(base, href)
    return None


def _same_page(url: str) -> tuple[str, str, str, str]:
    """A URL as two that name the same page compare: scheme and host in lower case, the
    default port dropped, no fragment, an empty path as ``/``."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    port = parts.port
    if port is not None and (parts.scheme.lower(), port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return (parts.scheme.lower(), host, parts.path or "/", parts.query)


def robots_rules(status: int | None, body: bytes) -> RobotsRules:
    """The rules of a robots.txt answer: its text for a 2xx, no rules otherwise."""
    if status is None or not 200 <= status < 300:
        return RobotsRules(None)
    return RobotsRules(body.decode("utf-8", "replace"))


def removal_reason(verdict: Verdict, listed: Callable[[str], bool]) -> str:
    """What became of a URL the sitemap dropped: ``moved`` (it redirects, or names
    as canonical, a URL the sitemap lists now), ``gone`` (404/410), ``live`` (still a page that
    search engines would index: the deploy bug), ``unknown``."""
    if verdict.state in ("redirect", "canonicalized") and not verdict.loop:
        if verdict.final_url is not None and listed(verdict.final_url):
            return "moved"
        return "unknown"
    if verdict.state in ("not-found", "gone"):
        return "gone"
    if verdict.state == "ok":
        return "live"
    return "unknown"
