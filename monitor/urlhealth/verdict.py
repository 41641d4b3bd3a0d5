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
from typing import Literal
from urllib.parse import urljoin, urlsplit

from monitor.core.model import (
    REMOVAL_REASONS,
    URL_CANONICAL_BROKEN,
    URL_CANONICAL_CONFLICT,
    URL_REDIRECT_LOOP,
    URL_STATES,
    Severity,
)
from monitor.core.rules import RuleId
from monitor.robots.matcher import RobotsRules, robots_url
from monitor.urlhealth import page as pages
from monitor.urlhealth.notfound import says_not_found

__all__ = [
    "GOOGLEBOT_BYTES", "MAX_HOPS", "REASONS", "SERVER_ERROR_ATTEMPTS", "STATES", "Answered",
    "RobotsRules", "Verdict",
    "canonical_broken", "canonical_of", "failed", "host_not_found", "judge", "noindex_of",
    "parse_page", "read_page",
    "refresh_of", "removal_reason", "robots_rules", "robots_url",
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
_AGENTS = (None, "googlebot")  # the directives that bind Googlebot: for all crawlers, or its own
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview",
                     "max-video-preview"})
_UNAVAILABLE = re.compile(r"unavailable_after\s*:\s*(.*)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Answered:
    """One hop's answer, as much as judging it needs."""

    url: str
    status: int
    headers: Sequence[tuple[str, str]]  # lower-case names, in order, repeats kept
    head: bytes = b""  # the first bytes of a 2xx body
    truncated: bool = False  # the body went on past ``head``
    page: pages.Page | None = None  # ``head`` as parsed, when it is HTML (``read_page``)
    # the main content's text (``pages.main_text``), when the caller read it from the tree it
    # parsed ``page`` from: what ``host_not_found`` compares with the host's not-found page
    main: str | None = None

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
    note: RuleId | None = None
    # a canonicalized page whose canonical is not ok itself (``canonical_broken``)
    broken_canonical: bool = False

    @property
    def rule(self) -> RuleId | None:
        """The rule id of this state (``url-redirect-loop`` for a loop), else its note's, or
        None."""
        if self.loop:
            return URL_REDIRECT_LOOP
        if self.broken_canonical:
            return URL_CANONICAL_BROKEN
        known = STATES.get(self.state)
        return self.note if known is None else known[0]

    @property
    def severity(self) -> Severity | None:
        """The severity of ``rule`` (a note's is ``info``), or None."""
        rule = self.rule
        return None if rule is None else rule.severity

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
    A chain of redirects (3xx, or a ``<meta http-equiv="refresh">`` that names a URL) is
    judged by where it ends, as Search Console reports it: ending in an ``ok`` page it is a
    ``redirect``, ending anywhere else it takes that state, the hops and the final URL kept
    either way.
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
    refreshes = [_refresh_kind(a) for a in answers[:-1] if 200 <= a.status < 300]
    kinds = f", {len(refreshes)} by meta refresh ({', '.join(refreshes)})" if refreshes else ""
    via = f"redirects ({hops} hop{'' if hops == 1 else 's'}{kinds}) to {last.url}"
    if end.state == "ok":
        detail = f"{via} ({last.status})" + (f"; {end.detail}" if end.detail else "")
        return Verdict("redirect", last.status, last.url, hops, detail=detail)
    final = end.final_url if end.state == "canonicalized" else last.url
    return replace(end, final_url=final, hops=hops, detail=f"{via}: {end.detail}")


def parse_page(answer: Answered) -> pages.Tree | None:
    """The tree of a 2xx answer's HTML (``pages.parse``), or None when it is not HTML or has
    no body: what ``read_page`` reads, and ``pages.main_text`` after it."""
    if not 200 <= answer.status < 300 or not answer.head or not _is_html(answer):
        return None
    return pages.parse(answer.head)


def read_page(answer: Answered) -> pages.Page | None:
    """The parsed HTML of a 2xx answer (``answer.page`` when it was read already), or None
    when it is not HTML or has no body."""
    if answer.page is not None:
        return answer.page
    tree = parse_page(answer)
    return None if tree is None else pages.read(tree, answer.url)


def refresh_of(answer: Answered) -> pages.Refresh | None:
    """The meta refresh a 2xx HTML answer redirects by, or None: one that names a URL other
    than the page itself (a page that reloads itself is no redirect)."""
    page = read_page(answer)
    refresh = None if page is None else page.refresh
    if refresh is None or _same_page(refresh.url) == _same_page(answer.url):
        return None
    return refresh


def _refresh_kind(answer: Answered) -> str:
    refresh = refresh_of(answer)
    if refresh is None or refresh.permanent:
        return "instant: permanent"
    return f"after {refresh.delay:g} s: temporary"


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
    page = read_page(last)
    cut = ""
    if last.truncated:
        cut = f"cut at body_limit ({len(last.head):,} bytes)"
    robots = noindex_of(last.header("x-robots-tag"), page, now)
    if robots:
        return Verdict("noindex", status, detail=robots + (f"; {cut}" if cut else ""))
    if last.truncated and len(last.head) < GOOGLEBOT_BYTES:
        # Googlebot reads 2 MiB: a noindex in the part not read would still count.
        return Verdict("unknown", status, detail=f"{cut}, before its end: a noindex in the "
                       f"rest, which Googlebot reads up to {GOOGLEBOT_BYTES:,} bytes, cannot be "
                       "ruled out (raise url_checks.body_limit)")
    refresh = refresh_of(last)
    if refresh is not None:  # the caller follows it; a chain that ended here did not
        return Verdict("redirect", status, final_url=refresh.url,
                       detail=f"meta refresh to {refresh.url} not followed")
    soft = _soft_404(last.head, page)
    if soft:
        return Verdict("soft-404", status, detail=soft)
    notes = [f"{cut} (as Googlebot stops there)"] if cut else []
    canonical, ignored = canonical_of(last.header("link"),
                                      () if page is None else page.canonicals, last.url)
    if ignored:
        notes.append(ignored)
    if canonical is not None and _same_page(canonical) != _same_page(listed_url):
        return Verdict("canonicalized", status, final_url=canonical,
                       detail="; ".join([f"rel=canonical names {canonical}", *notes]))
    return Verdict("ok", status, detail="; ".join(notes),
                   note=URL_CANONICAL_CONFLICT if ignored else None)


def canonical_broken(verdict: Verdict, target: Verdict) -> Verdict:
    """A ``canonicalized`` verdict given what its canonical target's own check found: when
    the target is not ``ok`` (a 404, a redirect, noindex, disallowed), the rule
    ``url-canonical-broken`` names it and its state. A target that could not be judged yet
    (``transient``) leaves the verdict as it is."""
    if verdict.state != "canonicalized" or target.state == "ok" or target.transient:
        return verdict
    if target.state == "unknown":
        return verdict
    why = target.state if target.status is None else f"{target.state}, HTTP {target.status}"
    return replace(verdict, broken_canonical=True,
                   detail=f"{verdict.detail}; the canonical {verdict.final_url} is not ok "
                          f"({why}: {target.detail})")


def host_not_found(verdict: Verdict, last: Answered | None, host_page: bytes,
                   host_url: str | None) -> Verdict:
    """An ``ok`` page (or a redirect to one) whose main content matches ``host_page``, the
    fingerprint of what its host answers for a path that cannot exist there (``host_url``,
    where that answer ended), is that host's not-found page: a soft 404 (``last.main`` is
    its main text when the caller read it, else it is read from ``last.head``). The page at
    ``host_url`` itself, listed as it is, stays what it is (a missing path that redirects to
    the home page does not make the home page a soft 404), and so does a site's root (a site
    that answers every path with its home page)."""
    if verdict.state not in ("ok", "redirect") or verdict.loop or last is None:
        return verdict
    if not verdict.hops and urlsplit(last.url).path in ("", "/") and not urlsplit(last.url).query:
        return verdict
    if not host_page or read_page(last) is None:
        return verdict
    if host_url is not None and not verdict.hops and _same_page(last.url) == _same_page(host_url):
        return verdict
    main = pages.main_text(last.head) if last.main is None else last.main
    if not pages.similar(pages.fingerprint(main), host_page):
        return verdict
    return replace(verdict, state="soft-404",
                   detail="its content is the host's own not-found page (the answer to a path "
                          f"that cannot exist, {host_url})"
                          + (f"; {verdict.detail}" if verdict.detail else ""))


def _is_html(answer: Answered) -> bool:
    content_type = ",".join(answer.header("content-type")).lower()
    return not content_type or any(t in content_type for t in _HTML_TYPES)


def noindex_of(robots_headers: Iterable[str], page: pages.Page | None,
               now: datetime | None = None) -> str | None:
    """Why the page says ``noindex`` to Googlebot, or None: ``noindex`` or ``none``, or an
    ``unavailable_after`` date before ``now``, in an ``X-Robots-Tag`` header or in a robots or
    googlebot ``<meta>`` element anywhere in the parsed HTML ``page`` (head or body: Google
    reads both; text that only looks like one, in a script, a textarea or a comment, is not
    an element).

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
    for name, content in page.robots:
        found = f'<meta name="{name}" content="{content}">'
        if any(word.strip().lower() in ("noindex", "none") for word in content.split(",")):
            return found
        expired = _expired(content, when)
        if expired:
            return f"{found} ({expired})"
    return None


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


def _soft_404(body: bytes, page: pages.Page | None) -> str | None:
    """Why a 2xx page is a soft 404 (no content, or a title or heading that is a whole
    not-found phrase), or None. ``page``: the body parsed, when it is HTML."""
    if not body.strip():
        return "an empty page (HTTP 200 without content)"
    if page is None:
        return None
    for where, text in (("title", page.title), ("heading", page.heading)):
        phrase = says_not_found(text)
        if phrase is not None:
            return f"its {where} says it is not found: {text[:120]!r}"
    if page.empty:
        return "a page whose body has no content"
    return None


def canonical_of(link_headers: Iterable[str], canonicals: Iterable[str],
                 base: str) -> tuple[str | None, str | None]:
    """The canonical URL a page names (``Link: <...>; rel=canonical`` first, then the
    ``canonicals`` of its ``<head>``, already absolute), or None; and, when several
    disagree, why none counts (Google ignores them all)."""
    named: dict[str, None] = {}
    for value in link_headers:
        for match in _LINK.finditer(value):
            rels = _REL.findall(match.group(2))
            if any("canonical" in rel.lower().split() for rel in rels):
                named[urljoin(base, str(match.group(1)).strip())] = None
    for url in canonicals:
        named[url] = None
    pages_named = {_same_page(url) for url in named}
    if len(pages_named) > 1:
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
