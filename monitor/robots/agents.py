"""Which of Google's crawlers a listed URL answers to (pure): a news article to
Googlebot-News, an image (``image:loc``) to Googlebot-Image, each only when the robots.txt has
a group for it, else to Googlebot, as Google documents its crawlers.

>>> rules = RobotsRules("User-agent: Googlebot-News\\nDisallow: /drafts/\\n")
>>> disallowed("https://news.example/drafts/a", '{"news":[{"title":"a"}]}', {
...     "https://news.example/robots.txt": rules}.get)
['news-disallowed']
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from monitor.core.rules import RuleId
from monitor.robots.matcher import GOOGLEBOT, RobotsRules, robots_url

__all__ = ["IMAGE_AGENT", "NEWS_AGENT", "RULES", "agent_for", "disallowed"]

NEWS_AGENT = "Googlebot-News"
IMAGE_AGENT = "Googlebot-Image"
RULES: tuple[RuleId, ...] = (RuleId.NEWS_DISALLOWED, RuleId.IMAGE_DISALLOWED)
_LONE_IMAGE = re.compile(r'\{"image":\[\{"loc":"([^"\\]*)"\}\]\}')


def agent_for(rules: RobotsRules, crawler: str) -> str:
    """``crawler`` when a group of ``rules`` names it, else Googlebot (whose group, or the
    ``*`` one, then applies)."""
    return crawler if rules.has_group(crawler) else GOOGLEBOT


def disallowed(loc: str, extensions: str | None,
               rules_of: Callable[[str], RobotsRules | None]) -> list[RuleId]:
    """The rules an entry breaks: ``news-disallowed`` when it is a news article its crawler
    may not fetch, ``image-disallowed`` when one of its images is; ``rules_of`` gives the
    rules of a robots.txt URL (None: not known, nothing is judged)."""
    if not extensions or ('"news"' not in extensions and '"image"' not in extensions):
        return []
    lone = _LONE_IMAGE.fullmatch(extensions)  # the usual shape, read without a parser
    if lone is not None:
        return [RuleId.IMAGE_DISALLOWED] if _barred(lone.group(1), IMAGE_AGENT, rules_of) else []
    data: dict[str, Any] = json.loads(extensions)
    found: list[RuleId] = []
    if data.get("news") and _barred(loc, NEWS_AGENT, rules_of):
        found.append(RuleId.NEWS_DISALLOWED)
    images = data.get("image") or []
    if any(_barred(src, IMAGE_AGENT, rules_of) for src in map(_loc_of, images) if src):
        found.append(RuleId.IMAGE_DISALLOWED)
    return found


def _barred(url: str, crawler: str, rules_of: Callable[[str], RobotsRules | None]) -> bool:
    rules = rules_of(robots_url(url))
    return rules is not None and not rules.allows(url, agent_for(rules, crawler))


def _loc_of(image: Any) -> str:
    loc = image.get("loc") if isinstance(image, dict) else None
    if isinstance(loc, list):
        loc = loc[0] if loc else None
    if isinstance(loc, dict):
        loc = loc.get("#text")
    return loc.strip() if isinstance(loc, str) else ""
