"""A robots.txt version that changed, applied at once to the listed URLs of its host, without
a request (pure).

Without this, a new ``Disallow:`` would reach each URL only at its next check, up to
``recheck`` (7 days) later. When the version in force of a robots.txt differs from the one the
target's URL states were last judged against, every listed URL of that host is judged again
for Googlebot: a URL the new version disallows (and that is not ``disallowed`` already)
becomes ``disallowed`` in this round, a ``health`` transition like any other, and a URL that
was ``disallowed`` and is allowed now is queued to be checked first. A daemon that starts
judges once against the versions it finds (judging again against the same version changes
nothing).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from monitor.robots.matcher import GOOGLEBOT, RobotsRules, robots_url
from monitor.urlhealth.verdict import Verdict

__all__ = ["Rejudged", "Row", "changed", "judge", "version_of"]

DETAIL = "robots.txt disallows it to Googlebot (a new robots.txt, judged without a request)"


class Row(Protocol):
    """A listed URL as its state row says it is (``store.urlstates.Due``)."""

    @property
    def loc(self) -> str: ...
    @property
    def listed(self) -> bool: ...
    @property
    def state(self) -> str: ...


R = TypeVar("R", bound=Row)


@dataclass(slots=True)
class Rejudged(Generic[R]):
    """What a new robots.txt decided for a batch of listed URLs."""

    barred: list[tuple[R, Verdict]] = field(default_factory=list)  # newly disallowed
    freed: list[str] = field(default_factory=list)  # disallowed before, allowed now


def version_of(text: str | None) -> str:
    """A short fingerprint of a robots.txt version (None: the host has none)."""
    if text is None:
        return "none"
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def changed(in_force: Mapping[str, RobotsRules], judged: Mapping[str, str],
            ) -> dict[str, RobotsRules]:
    """The robots.txt (by URL) whose version in force is not the one last judged."""
    return {url: rules for url, rules in in_force.items()
            if judged.get(url) != version_of(rules.text)}


def judge(batch: Iterable[R], rules: Mapping[str, RobotsRules]) -> Rejudged[R]:
    """The listed URLs of ``batch`` on the hosts of ``rules`` (robots.txt URL -> rules) that
    the new versions disallow to Googlebot, or allow again."""
    found: Rejudged[R] = Rejudged()
    for due in batch:
        if not due.listed:
            continue
        held = rules.get(robots_url(due.loc))
        if held is None:
            continue
        allowed = held.allows(due.loc, GOOGLEBOT)
        if not allowed and due.state != "disallowed":
            found.barred.append((due, Verdict("disallowed", detail=DETAIL)))
        elif allowed and due.state == "disallowed":
            found.freed.append(due.loc)
    return found
