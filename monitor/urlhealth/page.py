"""One HTML page as an HTML5 parser builds it: what judging its health reads. Pure.

``parse`` builds the tree of the first bytes of a page with Lexbor (through selectolax), the
way a browser and Googlebot build the document, so that text which only looks like a tag
(inside a ``<script>`` string, a ``<textarea>`` code sample, a ``<style>``, a ``<template>`` or
a comment) is never taken for an element, and an element that cannot be in a ``<head>`` ends
it exactly where a browser ends it. ``read`` turns the tree into a frozen ``Page``, and
``main_text``, when a fingerprint is wanted, takes the main content's text from the same tree;
both take bytes too (then they parse them). The caller drops the tree: it is many times the
page's size.

>>> page = read(b'<base href="/b/"><link rel=canonical href=page><p>Hi', "https://e.com/a/x")
>>> page.canonicals, page.empty
(('https://e.com/b/page',), False)
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit
from zlib import crc32

from selectolax.lexbor import LexborHTMLParser

__all__ = ["SKETCH", "Page", "Refresh", "Tree", "fingerprint", "main_text", "parse", "read",
           "similar"]

# A body with one of these is not empty (a script may write the page, as Google renders it).
_MEDIA = "img,video,audio,iframe,object,embed,canvas,svg,picture,script,input,form"
_NOT_TEXT = ["script", "style", "noscript", "template"]
# Around the main content, the same on every page of a site: left out of its fingerprint.
_CHROME = ["nav", "header", "footer", "aside", "form"]
_REFRESH = re.compile(r"\s*(\d[\d.]*)\s*(?:[;,]\s*(?:url\s*=\s*)?(.*))?", re.IGNORECASE | re.DOTALL)
_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")
_SHINGLE = 3  # words per shingle of a fingerprint
SKETCH = 64  # shingle hashes kept in a fingerprint
# Fewer shingles than this say too little to match on: an application's shell ("Loading…")
# is the same on every page of a site, its not-found page included.
MIN_SHINGLES = 8
Tree = LexborHTMLParser  # a page as the parser built it (``parse``)


@dataclass(frozen=True, slots=True)
class Refresh:
    """A ``<meta http-equiv="refresh">`` that names a URL: after ``delay`` seconds (0: at
    once, a permanent redirect for Google; later: a temporary one), go to ``url``."""

    delay: float
    url: str

    @property
    def permanent(self) -> bool:
        """An instant refresh, which Google treats as a permanent redirect."""
        return self.delay == 0


@dataclass(frozen=True, slots=True)
class Page:
    """What a page's HTML says to a crawler, read once."""

    robots: tuple[tuple[str, str], ...]  # (name, content) of each robots or googlebot <meta>
    canonicals: tuple[str, ...]  # each <link rel=canonical> of the head, absolute
    refresh: Refresh | None
    title: str
    heading: str  # the text of the first <h1>
    empty: bool  # a body with neither text nor media


def parse(html: bytes) -> Tree:
    """The tree of ``html`` (a page's first bytes) as an HTML5 parser builds it: in the
    encoding the page declares (UTF-8 when it declares none), and with scripting on, as
    Googlebot renders it (a ``<noscript>`` is text, so a tracking pixel's ``<img>`` inside one
    does not end the head)."""
    return LexborHTMLParser(html, encoding=True, scripting=True)


def read(html: bytes | Tree, url: str) -> Page:
    """The page ``html`` (its first bytes, or their tree from ``parse``) served at ``url``."""
    tree = parse(html) if isinstance(html, bytes) else html
    base = url
    base_node = tree.css_first("base[href]")
    if base_node is not None:  # the first <base href> is the document's base URL
        base = urljoin(url, (base_node.attributes.get("href") or "").strip())
    robots: list[tuple[str, str]] = []
    refresh = None
    for meta in tree.css("meta"):
        attributes = meta.attributes
        name = (attributes.get("name") or "").strip().lower()
        if name in ("robots", "googlebot"):
            robots.append((name, attributes.get("content") or ""))
        elif refresh is None and (attributes.get("http-equiv") or "").strip().lower() == "refresh":
            refresh = _refresh(attributes.get("content") or "", base)
    head = tree.head
    canonicals: list[str] = []
    title = ""
    if head is not None:  # the parser's head: up to the first element that ends a head
        for link in head.css("link[rel][href]"):
            rels = (link.attributes.get("rel") or "").lower().split()
            href = (link.attributes.get("href") or "").strip()
            if "canonical" in rels and href:
                canonicals.append(urljoin(base, href))
        title_node = head.css_first("title")
        if title_node is not None:
            title = _collapse(title_node.text(deep=True))
    body = tree.body
    heading = ""
    empty = True
    if body is not None:
        h1 = body.css_first("h1")
        heading = "" if h1 is None else _collapse(h1.text(deep=True, separator=" "))
        # a script's text counts too, and a script is content: it may write the page, from
        # the head too (a bundler's <script type=module> beside an empty <div id=app>)
        empty = (body.css_first(_MEDIA) is None and not body.text(deep=True).strip()
                 and tree.css_first("script") is None)
    return Page(tuple(robots), tuple(canonicals), refresh, title, heading, empty)


def main_text(html: bytes | Tree) -> str:
    """The visible text of a page's main content: ``<main>`` (or ``[role=main]``) when there
    is one, else the body without its navigation, header, footer and asides; never a
    script's or a style's. Read only when a fingerprint is needed. Given a tree, it takes
    those parts out of it: ``read`` the tree first."""
    body = (parse(html) if isinstance(html, bytes) else html).body
    if body is None:
        return ""
    body.strip_tags(_NOT_TEXT)
    main = body.css_first("main, [role=main]")
    if main is None:
        body.strip_tags(_CHROME)
        main = body
    return main.text(deep=True, separator=" ")


def _collapse(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _refresh(content: str, base: str) -> Refresh | None:
    """A refresh's ``content`` (``5; url=/next``) as a ``Refresh``, or None when it names no
    URL (a page that reloads itself) or is not one, as browsers parse it."""
    match = _REFRESH.match(content)
    if match is None:
        return None
    target = (match.group(2) or "").strip()
    if target[:1] in ("'", '"'):  # a quoted URL ends at its closing quote
        quote = target[0]
        target = target[1:].split(quote, 1)[0]
    target = target.strip()
    if not target:
        return None
    try:
        delay = float(match.group(1).rstrip("."))
    except ValueError:
        return None
    url = urljoin(base, target)
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        return None  # a javascript: or mailto: target is no page to go to
    return Refresh(delay, url)


def fingerprint(text: str) -> bytes:
    """A sketch of ``text``'s word shingles (the ``SKETCH`` smallest of their CRC-32s, as
    big-endian 4-byte numbers): ``similar`` estimates from two sketches how much of two texts
    is shared, the same on every run and every replica. Empty for a text without words."""
    words = [w.casefold() for w in _WORD.findall(text)]
    if not words:
        return b""
    shingles = {crc32(" ".join(words[i:i + _SHINGLE]).encode("utf-8"))
                for i in range(max(1, len(words) - _SHINGLE + 1))}
    smallest = sorted(shingles)[:SKETCH]
    return struct.pack(f">{len(smallest)}I", *smallest)


def similar(a: bytes, b: bytes, *, at_least: float = 0.8) -> bool:
    """Two sketches of (nearly) the same text: the share of their shingles they hold in
    common, estimated from the smallest of both (exact for short texts), is ``at_least``;
    never for a text of fewer than ``MIN_SHINGLES`` shingles (about ten words)."""
    if len(a) < 4 * MIN_SHINGLES or len(b) < 4 * MIN_SHINGLES:
        return False
    first = set(struct.unpack(f">{len(a) // 4}I", a))
    second = set(struct.unpack(f">{len(b) // 4}I", b))
    union = sorted(first | second)[:SKETCH]
    shared = sum(1 for value in union if value in first and value in second)
    return shared >= at_least * len(union)
