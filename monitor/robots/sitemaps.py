"""The ``Sitemap:`` lines of a robots.txt, read as Google reads them (pure)."""

from __future__ import annotations

import re
from urllib.parse import urljoin

__all__ = ["parse_robots"]

_SITEMAP_KEYS = ("sitemap", "site-map")  # robots.txt keys, matched as prefixes as Google does
_ABSOLUTE = re.compile(r"https?://[^/?#\s]", re.IGNORECASE)


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
