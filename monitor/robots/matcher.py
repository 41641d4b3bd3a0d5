"""robots.txt matched as Google matches it, for every stage that asks whether a URL may be
crawled: the URL checks and the robots.txt watch of a check.

protego (BSD-3-Clause, Scrapy's maintained parser) follows Google's rules: the longest match
wins, ``*`` and ``$`` in paths, Allow wins a tie, the group of the most specific user agent.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from protego import Protego

__all__ = ["GOOGLEBOT", "MAX_BYTES", "RobotsRules", "robots_url"]

GOOGLEBOT = "Googlebot"
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
