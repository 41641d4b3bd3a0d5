"""robots.txt matched as Google matches it, for every stage that asks whether a URL may be
crawled: the URL checks and the robots.txt watch of a check.

protego (BSD-3-Clause, Scrapy's maintained parser) follows Google's rules: the longest match
wins, ``*`` and ``$`` in paths, Allow wins a tie, the group of the most specific user agent.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit, urlunsplit

from protego import Protego

__all__ = ["GOOGLEBOT", "MAX_BYTES", "RobotsRules", "parse_robots", "robots_url"]

GOOGLEBOT = "Googlebot"
_SITEMAP_KEYS = ("sitemap", "site-map")  # robots.txt keys, matched as prefixes as Google does
_ABSOLUTE = re.compile(r"https?://[^/?#\s]", re.IGNORECASE)
MAX_BYTES = 512_000  # Google reads the first 500 KiB of a robots.txt, 500 x 1,000 bytes


class RobotsRules:
    """One host's robots.txt. ``None`` (no robots.txt, or one that did not answer 2xx) allows
    everything."""

    def __init__(self, text: str | None) -> None:
        self.text = text
        self._rules = None if text is None else Protego.parse(text)

    def allows(self, url: str, agent: str = GOOGLEBOT) -> bool:
        """Whether ``agent`` may crawl ``url``: the most specific group that matches the
        agent's product token decides, as RFC 9309 and Google read it."""
        return self._rules is None or bool(self._rules.can_fetch(url, agent))


def robots_url(url: str) -> str:
    """The robots.txt that governs ``url``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/robots.txt", "", ""))


def parse_robots(text: str, robots_url: str, *, limit: int | None = None,
                 relative: list[str] | None = None) -> list[str]:
    """The ``Sitemap:`` URLs of a robots.txt, absolute, deduplicated, in order; at most
    ``limit`` of them. A value that is not a full URL is skipped, as Google skips it (it is
    added to ``relative`` when given).

    Lines are read as Google's parser reads them: the key in any case, with spaces around it,
    and ``Site-map:`` (a frequent typo) as well; a comment starts at ``#``; a key and value of
    two words may be separated by whitespace alone (a forgotten colon)."""
    found: dict[str, None] = {}
    for line in text.lstrip("\ufeff").splitlines():
        line = line.partition("#")[0].strip()
        key, colon, value = line.partition(":")
        if not colon or len(key.split()) > 1:  # "Sitemap https://...": no colon after the key
            words = line.split()
            if len(words) != 2:
                continue
            key, value = words
        if not key.strip().lower().startswith(_SITEMAP_KEYS):
            continue
        value = value.strip()
        if not value:
            continue
        if not _ABSOLUTE.match(value):
            if relative is not None:
                relative.append(value)
            continue
        url = urljoin(robots_url, value)
        if url.split("#")[0] != robots_url.split("#")[0]:
            found[url] = None
            if limit is not None and len(found) >= limit:
                break
    return list(found)
