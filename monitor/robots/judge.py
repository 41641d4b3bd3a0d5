"""The robots.txt of a target's hosts, watched with each check. Pure.

A check fetches the robots.txt of every host its sitemaps live on (conditionally: an unchanged
one is a 304) and hands the answer here with the version stored last time. ``judge`` says what
it means as search engines read it:

- ``robots-changed`` (warning): the text is not the one stored (an absent robots.txt, a 4xx
  but 429, or redirects past 5 hops, is no robots.txt, as Google reads it); the first fetch is
  the baseline, as a first check is.
- ``robots-unreachable`` (error): a 5xx, a 429, or no answer at all (timeout, refused). Google
  then stops crawling the whole site and keeps using the last good version: the stored version
  stands and nothing is recorded as changed.
- ``sitemap-disallowed`` (error): a sitemap of the target on that host is disallowed to
  Googlebot (Google's matching, ``monitor.robots.matcher``), so Google cannot read it.
- ``robots-sitemap-missing`` (warning): a ``url:`` target's sitemap is not named by a
  ``Sitemap:`` line of its host's robots.txt (only where a robots.txt answered 2xx: a host
  without one is not told to add a line to a file it does not have).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from monitor.core.model import Issue
from monitor.core.rules import RuleId
from monitor.robots.matcher import MAX_BYTES, RobotsRules
from monitor.robots.sitemaps import parse_robots

__all__ = ["MAX_BYTES", "Answer", "Finding", "Stored", "judge", "unreachable"]


@dataclass(frozen=True, slots=True)
class Stored:
    """The version of one robots.txt stored last (``text`` None: the host had none)."""

    text: str | None
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """What fetching a robots.txt gave: a status and text, a 304, or no answer (``error``)."""

    status: int | None = None
    text: str | None = None
    not_modified: bool = False
    error: str | None = None  # why there was no usable answer
    etag: str | None = None
    last_modified: str | None = None


@dataclass(slots=True)
class Finding:
    """One robots.txt after this check: what to store, what changed, its issues, and its
    ``rules``: the version in force, parsed once (the watch hands them on)."""

    url: str
    outcome: str  # ok | not_modified | absent | unreachable
    http_status: int | None
    text: str | None  # the robots.txt in force (the stored one when unreachable)
    changed: bool = False
    before: str | None = None
    store: bool = False  # a new version to keep (a change, or the first fetch)
    issues: list[Issue] = field(default_factory=list)
    rules: RobotsRules = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.rules = RobotsRules(self.text)

    def as_json(self, *, with_text: bool = False) -> dict[str, object]:
        """The check's JSON (``robots``); ``with_text`` adds the text before and after."""
        found: dict[str, object] = {"url": self.url, "outcome": self.outcome,
                                    "http_status": self.http_status, "changed": self.changed}
        if with_text:
            found["before"], found["after"] = self.before, self.text
        return found


def judge(url: str, previous: Stored | None, answer: Answer, *, sitemaps: Sequence[str],
          listed: Iterable[str] = ()) -> Finding:
    """The finding for robots.txt ``url``: ``sitemaps`` are the target's documents on its host
    (each must be allowed to Googlebot), ``listed`` the sitemaps that should be named by a
    ``Sitemap:`` line (a ``url:`` target's own)."""
    if unreachable(answer):
        why = answer.error or f"HTTP {answer.status}"
        found = Finding(url, "unreachable", answer.status,
                        None if previous is None else previous.text)
        found.issues.append(Issue(RuleId.ROBOTS_UNREACHABLE, f"{url} cannot be read ({why}): "
                                  "Google stops crawling a site whose robots.txt fails", url,
                                  url))
    elif answer.not_modified and previous is not None:
        found = Finding(url, "not_modified", answer.status, previous.text)
    else:
        ok = answer.status is not None and 200 <= answer.status < 300
        text = (answer.text or "") if ok else None
        found = Finding(url, "ok" if ok else "absent", answer.status, text)
        before = None if previous is None else previous.text
        found.store = previous is None or (before or "") != (text or "")
        if previous is not None and found.store:
            found.changed, found.before = True, before
            found.issues.append(Issue(RuleId.ROBOTS_CHANGED, f"{url} changed "
                                      f"({_size(before)} -> {_size(text)})", url, url))
    for sitemap in sitemaps:
        if not found.rules.allows(sitemap):
            found.issues.append(Issue(RuleId.SITEMAP_DISALLOWED, f"{url} disallows the sitemap "
                                      f"{sitemap} to Googlebot: Google cannot read it", sitemap,
                                      url))
    if found.outcome != "unreachable" and found.text is not None:
        named = set(parse_robots(found.text, url))
        for sitemap in listed:
            if sitemap not in named:
                found.issues.append(Issue(RuleId.ROBOTS_SITEMAP_MISSING, f"{url} has no Sitemap: "
                                          f"line for {sitemap}", sitemap, url))
    return found


def unreachable(answer: Answer) -> bool:
    """No usable answer: Google keeps the last good version (a 5xx, a 429, no answer)."""
    return answer.error is not None or (answer.status is not None
                                        and (answer.status >= 500 or answer.status == 429))


def _size(text: str | None) -> str:
    return "none" if text is None else f"{len(text.encode())} bytes"
