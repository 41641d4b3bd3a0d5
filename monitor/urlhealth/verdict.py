"""The health of a listed URL: what one page's answers say, as one state. Pure.

The URL checks (``monitor.urlhealth.checker``) fetch a page hop by hop and hand the answers here:
``judge`` turns them into a ``Verdict`` the way Search Console's page indexing report does
(404, redirect, ``noindex``, canonical elsewhere, soft 404, disallowed by robots.txt), and
``removal_reason`` says what became of a URL a sitemap dropped. Nothing here does I/O.

States whose answer cannot be trusted to last (408, 429, 503, timeouts, refused connections,
a 5xx before its third time in a row) are ``transient``: the caller keeps the URL's previous
state and tries again, and a URL is never called broken for them (``unknown``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from html import unescape as html_unescape
from typing import Literal
from urllib.parse import urljoin, urlsplit

from lxml import etree

from monitor.model import (
    REMOVAL_REASONS,
    URL_CANONICAL_CONFLICT,
    URL_REDIRECT_LOOP,
    URL_STATES,
    Severity,
)
from monitor.robots.matcher import RobotsRules, robots_url

__all__ = [
    "GOOGLEBOT_BYTES", "MAX_HOPS", "REASONS", "SERVER_ERROR_ATTEMPTS", "STATES", "Answered",
    "RobotsRules", "Verdict",
    "canonical_of", "failed", "judge", "noindex_of", "removal_reason", "robots_rules",
    "robots_url",
]

State = Literal[
    "ok", "redirect", "not-found", "gone", "forbidden", "client-error", "server-error",
    "noindex", "canonicalized", "soft-404", "disallowed", "unknown",
]
STATES = URL_STATES
REASONS = REMOVAL_REASONS
SERVER_ERROR_ATTEMPTS = 3  # a 5xx is a server-error on its third time in a row
MAX_HOPS = 10  # Googlebot follows up to 10 redirect hops
GOOGLEBOT_BYTES = 2 * 2**20  # Googlebot reads the first 2 MiB of an HTML page
_TRANSIENT_STATUSES = frozenset({408, 429})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_LINK = re.compile(r'<\s*([^>]*)>\s*((?:;\s*[^,;]*)*)')
_REL = re.compile(r';\s*rel\s*=\s*"?([^";,]*)"?', re.IGNORECASE)
# The elements a <head> may hold; any other element ends the head, as Google reads it.
_HEAD_TAGS = frozenset({"html", "head", "title", "meta", "link", "script", "style", "base",
                        "noscript", "template"})
_RAW_TEXT = {name: re.compile(rb"</" + name.encode() + rb"\s*>", re.IGNORECASE)
             for name in ("script", "style", "noscript", "template", "title")}
# Starts with a literal (a fast scan to the next "<"); a tag stops at the next "<" and is
# possessive, so that a tag that never closes costs one scan, not one per character.
_TAG = re.compile(rb"<(?:(!--)|(/?)([A-Za-z][A-Za-z0-9-]*+)[^<>]*+>)")
_AGENTS = (None, "googlebot")  # the directives that bind Googlebot: for all crawlers, or its own
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview",
                     "max-video-preview"})
_UNAVAILABLE = re.compile(r"unavailable_after\s*:\s*(.*)", re.IGNORECASE | re.DOTALL)
_NOT_FOUND = re.compile(
    r"\bnot\s+found\b|^\W*404\b|\berror\s*404\b|\b404\s*error\b|\bpage\s+(?:does\s+not|doesn't)"
    r"\s+exist|\bno\s+longer\s+(?:exists|available)\b", re.IGNORECASE)
# A body with one of these is not empty (a script may write the page, as Google renders it).
_MEDIA = re.compile(rb"<(?:img|video|audio|iframe|object|embed|canvas|svg|picture|script|input|"
                    rb"form)\b", re.IGNORECASE)
_TEXT = re.compile(rb"(?:^|>)[^<\S]*[^<\s]")  # some text outside the tags
_TAGS = re.compile(rb"<[^>]*>")
_H1_START = re.compile(rb"<[hH]1\b")  # a literal first: the fast scan to the next "<"
_H1 = re.compile(rb"<h1\b[^<>]*+>(.*?)</h1\s*>", re.IGNORECASE | re.DOTALL)
_META = re.compile(rb"<meta\b([^<>]*+)>", re.IGNORECASE)
_ATTRIBUTE = re.compile(rb"""([A-Za-z_:][-\w:.]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")


@dataclass(frozen=True, slots=True)
class Answered:
    """One hop's answer, as much as judging it needs."""

    url: str
    status: int
    headers: Sequence[tuple[str, str]]  # lower-case names, in order, repeats kept
    head: bytes = b""  # the first bytes of a 2xx body
    truncated: bool = False  # the body went on past ``head``

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
    # An info finding of a state without a rule of its own (model.URL_NOTES): why an ok page
    # is ok, such as canonicals that disagree and are ignored
    note: str | None = None

    @property
    def rule(self) -> str | None:
        """The rule id of this state (``url-redirect-loop`` for a loop), else its note's, or
        None."""
        if self.loop:
            return URL_REDIRECT_LOOP
        known = STATES.get(self.state)
        return self.note if known is None else known[0]

    @property
    def severity(self) -> Severity | None:
        if self.loop:
            return "error"
        known = STATES.get(self.state)
        if known is None:
            return None if self.note is None else "info"
        return known[1]

    @property
    def broken(self) -> bool:
        """Counted as a problem: every state with a rule id of its own (not a note)."""
        return self.loop or STATES.get(self.state) is not None


def failed(url: str, kind: str, message: str, *, hops: int = 0) -> Verdict:
    """A check that got no answer (timeout, refused, blocked address): unknown, transient."""
    return Verdict("unknown", final_url=url if hops else None, hops=hops,
                   detail=f"{kind}: {message}", transient=True)


def judge(answers: Sequence[Answered], *, listed_url: str, loop: bool = False,
          server_errors: int = 1, now: datetime | None = None) -> Verdict:
    """The state of ``listed_url`` from its answers, first hop first (redirects followed).

    ``loop``: the last answer redirects to a URL already visited, or past ``MAX_HOPS``.
    ``server_errors``: how many checks in a row (this one included) answered 5xx.
    ``now``: the time an ``unavailable_after`` date is compared with (default: the clock).
    A chain of redirects is judged by where it ends, as Search Console reports it: ending in
    an ``ok`` page it is a ``redirect``, ending anywhere else it takes that state, the hops
    and the final URL kept either way.
    """
    last = answers[-1]
    hops = len(answers) - 1
    if loop:
        return Verdict("redirect", last.status, last.url, hops + 1, loop=True,
                       detail=f"redirect loop after {hops + 1} hops at {last.url}")
    end = _judge_page(last, listed_url=last.url if hops else listed_url,
                      server_errors=server_errors, now=now or datetime.now(UTC))
    if not hops:
        return end
    via = f"redirects ({hops} hop{'' if hops == 1 else 's'}) to {last.url}"
    if end.state == "ok":
        detail = f"{via} ({last.status})" + (f"; {end.detail}" if end.detail else "")
        return Verdict("redirect", last.status, last.url, hops, detail=detail)
    final = end.final_url if end.state == "canonicalized" else last.url
    return replace(end, final_url=final, hops=hops, detail=f"{via}: {end.detail}")


def _judge_page(last: Answered, *, listed_url: str, server_errors: int,
                now: datetime) -> Verdict:
    """The state of one answer, no redirect followed."""
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
    if status == 204:
        return Verdict("soft-404", status, detail="HTTP 204 No Content: a page without content")
    html = last.head if _is_html(last) and last.head else None
    head_part = None if html is None else _head_part(html)
    head = None if head_part is None else _parse(head_part)
    cut = ""
    if last.truncated:
        cut = f"cut at body_limit ({len(last.head):,} bytes)"
    robots = noindex_of(last.header("x-robots-tag"), html, now)
    if robots:
        return Verdict("noindex", status, detail=robots + (f"; {cut}" if cut else ""))
    if last.truncated and len(last.head) < GOOGLEBOT_BYTES:
        # Googlebot reads 2 MiB: a noindex in the part not read would still count.
        return Verdict("unknown", status, detail=f"{cut}, before its end: a noindex in the "
                       f"rest, which Googlebot reads up to {GOOGLEBOT_BYTES:,} bytes, cannot be "
                       "ruled out (raise url_checks.body_limit)")
    soft = _soft_404(last.head, html, head, b"" if head_part is None else head_part)
    if soft:
        return Verdict("soft-404", status, detail=soft)
    notes = [f"{cut} (as Googlebot stops there)"] if cut else []
    canonical, ignored = canonical_of(last.header("link"), head, last.url)
    if ignored:
        notes.append(ignored)
    if canonical is not None and _same_page(canonical) != _same_page(listed_url):
        return Verdict("canonicalized", status, final_url=canonical,
                       detail="; ".join([f"rel=canonical names {canonical}", *notes]))
    return Verdict("ok", status, detail="; ".join(notes),
                   note=URL_CANONICAL_CONFLICT if ignored else None)


def _is_html(answer: Answered) -> bool:
    content_type = ",".join(answer.header("content-type")).lower()
    return not content_type or any(t in content_type for t in _HTML_TYPES)


def _parse(head: bytes) -> etree._Element | None:
    """A page's ``<head>`` parsed by lxml's HTML parser, or None. Only the head is parsed: the
    body is scanned as bytes (parsing 2 MiB pages whole cost 40 times the CPU)."""
    try:
        parser = etree.HTMLParser(recover=True, no_network=True, remove_comments=True,
                                  remove_pis=True)
        return etree.fromstring(head, parser)
    except (etree.LxmlError, ValueError):
        return None


def _head_part(data: bytes) -> bytes:
    """The start of an HTML page up to the end of its head: ``</head>``, ``<body>`` or the
    first element a head cannot hold (an ``<img>``, a ``<div>``), where Google stops reading
    head-only tags such as ``rel=canonical``."""
    pos = 0
    while (match := _TAG.search(data, pos)) is not None:
        pos = match.end()
        if match.group(1):  # a comment, to its end
            end = data.find(b"-->", pos)
            pos = len(data) if end < 0 else end + 3
            continue
        name = match.group(3).decode("ascii").lower()
        if match.group(2):  # an end tag
            if name in ("head", "body", "html"):
                return data[:match.start()]
            continue
        if name not in _HEAD_TAGS:
            return data[:match.start()]
        if name in _RAW_TEXT:  # its content is text, not tags
            end_tag = _RAW_TEXT[name].search(data, pos)
            pos = len(data) if end_tag is None else end_tag.end()
    return data


def noindex_of(robots_headers: Iterable[str], page: bytes | None,
               now: datetime | None = None) -> str | None:
    """Why the page says ``noindex`` to Googlebot, or None: ``noindex`` or ``none``, or an
    ``unavailable_after`` date before ``now``, in an ``X-Robots-Tag`` header or in a robots or
    googlebot ``<meta>`` anywhere in the HTML ``page`` (head or body: Google reads both; one
    inside a comment does not count).

    A header's directives may name a user agent (``googlebot: noindex``); those that name
    another crawler do not count."""
    when = now or datetime.now(UTC)
    for value in robots_headers:
        agent = None
        for part in value.split(","):
            words = part.strip().lower()
            head, colon, rest = words.partition(":")
            if colon and head.strip() not in _VALUED:
                agent, words = head.strip(), rest.strip()
            if agent in _AGENTS and words in ("noindex", "none"):
                return f"X-Robots-Tag: {value.strip()}"
        expired = _expired(value, when)
        if expired and _agent_of(value) in _AGENTS:
            return f"X-Robots-Tag: {value.strip()} ({expired})"
    if page is None:
        return None
    for match in _META.finditer(page):
        attributes = {key.lower(): html_unescape((a or b or c).decode("utf-8", "replace"))
                      for key, a, b, c in _ATTRIBUTE.findall(match.group(1))}
        name = attributes.get(b"name", "").strip().lower()
        if name not in ("robots", "googlebot") or _in_comment(page, match.start()):
            continue
        content = attributes.get(b"content", "")
        found = f'<meta name="{name}" content="{content}">'
        if any(word.strip().lower() in ("noindex", "none") for word in content.split(",")):
            return found
        expired = _expired(content, when)
        if expired:
            return f"{found} ({expired})"
    return None


def _in_comment(page: bytes, at: int) -> bool:
    start = page.rfind(b"<!--", 0, at)
    return start >= 0 and page.find(b"-->", start, at) < 0


def _agent_of(value: str) -> str | None:
    """The user agent an ``X-Robots-Tag`` value names before its directives, or None."""
    head, colon, _rest = value.partition(":")
    name = head.strip().lower()
    return name if colon and name not in _VALUED else None


def _expired(value: str, now: datetime) -> str | None:
    """``unavailable_after: DATE`` in ``value`` with a DATE before ``now``: the date, else
    None. The date is RFC 822 or ISO 8601, as Google accepts; it may hold a comma."""
    match = _UNAVAILABLE.search(value)
    if match is None:
        return None
    text = match.group(1)
    pieces = text.split(",")
    for count in range(min(len(pieces), 3), 0, -1):  # the longest prefix that is a date
        candidate = ",".join(pieces[:count]).strip()
        date = _date(candidate)
        if date is not None:
            return f"unavailable after {candidate}, which has passed" if date < now else None
    return None


def _date(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:
            parsed = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _soft_404(page: bytes, html: bytes | None, head: etree._Element | None,
              head_part: bytes) -> str | None:
    """Why a 2xx page is a soft 404 (no content, or a title or heading that says the page is
    not found), or None. ``html``: the page when it is HTML; ``head``: its parsed head, the
    first ``head_part`` bytes."""
    if not page.strip():
        return "an empty page (HTTP 200 without content)"
    if html is None:
        return None
    title = "" if head is None else " ".join(_text(t) for t in head.iter("title")).strip()
    heading = _first_h1(html)
    for where, text in (("title", title), ("heading", heading)):
        if text and _NOT_FOUND.search(text):
            return f"its {where} says it is not found: {text[:120]!r}"
    if len(head_part) == len(html):
        return None  # a head that never ends: no body to judge
    body = html[len(head_part):]
    # Text anywhere (a comment's too) or media: not empty. Most pages answer at their first tag.
    if _TEXT.search(body) or _MEDIA.search(body):
        return None
    return "a page whose body has no content"


def _first_h1(html: bytes) -> str:
    """The text of the first ``<h1>``: one scan for its start, then its end from there."""
    start = _H1_START.search(html)
    match = None if start is None else _H1.match(html, start.start())
    if match is None:
        return ""
    return html_unescape(_TAGS.sub(b" ", match.group(1)).decode("utf-8", "replace")).strip()


def _text(element: etree._Element) -> str:
    return "".join(str(t) for t in element.itertext())


def canonical_of(link_headers: Iterable[str], html: etree._Element | None,
                 base: str) -> tuple[str | None, str | None]:
    """The canonical URL a page names (``Link: <...>; rel=canonical`` first, then
    ``<link rel="canonical">`` in ``html``, its head), absolute, or None; and, when several
    disagree, why none counts (Google ignores them all)."""
    named: dict[str, None] = {}
    for value in link_headers:
        for match in _LINK.finditer(value):
            rels = _REL.findall(match.group(2))
            if any("canonical" in rel.lower().split() for rel in rels):
                named[urljoin(base, str(match.group(1)).strip())] = None
    if html is not None:
        for link in html.iter("link"):
            rel = (link.get("rel") or "").lower().split()
            href = (link.get("href") or "").strip()
            if "canonical" in rel and href:
                named[urljoin(base, href)] = None
    pages = {_same_page(url) for url in named}
    if len(pages) > 1:
        return None, (f"{len(named)} rel=canonical that disagree ({', '.join(named)}): "
                      "ignored, as Google ignores them")
    return next(iter(named), None), None


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
