"""Links to what a watched site listed, safe to put in a page.

A loc is whatever text a sitemap holds, so a page must not make every loc a link: an
``href`` of ``javascript:...`` runs script in the page when clicked, with the reader's access
to the daemon's API. Browsers read an ``href`` leniently (the WHATWG URL parser): they drop
leading and trailing control characters and spaces, remove every tab and newline, and ignore
the scheme's case, so `` JaVa\\tScript:`` is ``javascript:``. ``web_href`` reads a URL the same
way and keeps it only when its scheme is ``http`` or ``https``; ``external_link`` is the Jinja
filter the templates use: a link for such a URL, the text alone for anything else::

    {{ row.loc | external_link }}
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

__all__ = ["external_link", "web_href"]

# What the URL parser strips from both ends (C0 controls and space) and removes everywhere.
_ENDS = "".join(chr(c) for c in range(0x21))
_TAB_OR_NEWLINE = re.compile("[\t\n\r]")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_WEB_SCHEMES = frozenset({"http", "https"})


def web_href(url: object) -> str | None:
    """``url`` as a browser would read it in an ``href``, when that is an absolute ``http`` or
    ``https`` URL; else None (another scheme, a relative reference, not text)."""
    if not isinstance(url, str):
        return None
    href = _TAB_OR_NEWLINE.sub("", url.strip(_ENDS))
    scheme = _SCHEME.match(href)
    if scheme is None or scheme.group(1).lower() not in _WEB_SCHEMES:
        return None
    return href


def external_link(url: object) -> Markup:
    """A link to ``url`` that sends no referrer when it is a web URL, else the text alone."""
    href = web_href(url)
    if href is None:
        return escape("" if url is None else str(url))
    return Markup('<a href="{}" rel="noreferrer">{}</a>').format(href, url)
