"""The small formats, read one item at a time: a sitemap index's <sitemap>, an RSS <item>, an
Atom <entry> (as lxml's item events give them), and a text sitemap's lines."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from email.utils import parsedate_to_datetime

from lxml import etree

from monitor.core.model import DocumentKind, Entry
from monitor.core.rules import RuleId
from monitor.read.extjson import local
from monitor.read.found import Found, drop_through, events

__all__ = ["Items", "TextLines"]

_NOT_IN_XML = dict.fromkeys(range(3), "\ufffd")
_tuple = tuple.__new__  # builds an Entry without its Python-level __new__


class Items:
    """Index, RSS and Atom: one simple pass per item (these documents are small)."""

    __slots__ = ("_found", "_read_item")

    def __init__(self, found: Found, kind: DocumentKind) -> None:
        self._found = found
        self._read_item: Callable[[Found, etree._Element], None] = {
            "sitemapindex": _sitemap, "rss": _rss_item}.get(kind, _atom_entry)

    def read(self, xml: etree.XMLPullParser, finishing: bool) -> None:
        """Read the items finished since the last call, and drop them."""
        found, read_item = self._found, self._read_item
        last = None
        for _, item in events(xml):
            read_item(found, item)
            last = item
        if last is not None:
            drop_through(last)


def _sitemap(found: Found, sitemap: etree._Element) -> None:
    loc, *others = [child.text for child in sitemap if local(child.tag) == "loc"] or [None]
    loc = (loc or "").strip()
    if loc:
        found.children.append(loc)
        lastmod = next(((c.text or "").strip() for c in sitemap
                        if local(c.tag) == "lastmod"), "")
        if lastmod:  # judged by validate.index_issues, as an entry's
            found.child_lastmods.append((loc, lastmod))
        if others:
            found.more_locs("sitemap", loc, others)
    else:
        found.missing_loc("sitemap")


def _rss_item(found: Found, item: etree._Element) -> None:
    found.items += 1
    # Exact names: RSS items are not namespaced, and <atom:link> is not the item's link.
    loc = next(((c.text or "").strip() for c in item.iterchildren("link")), None)
    pub_date = next(((c.text or "").strip() for c in item.iterchildren("pubDate")), None)
    if loc:
        lastmod = _rfc822_to_w3c(pub_date) if pub_date else None
        found.entries.append(_entry(loc, lastmod))
    else:
        found.missing_loc("item", "link")


def _atom_entry(found: Found, entry: etree._Element) -> None:
    found.items += 1
    loc = None
    for child in entry:
        if local(child.tag) == "link" and child.get("rel", "alternate") == "alternate":
            loc = (child.get("href") or "").strip()
            break
    if loc:
        updated = _first_text(entry, "updated") or None
        found.entries.append(_entry(loc, updated))
    else:
        found.missing_loc("entry", "link href")


class TextLines:
    """A text sitemap: one URL a line, each line read once it is whole."""

    __slots__ = ("_found", "_tail")

    def __init__(self, found: Found) -> None:
        self._found = found
        self._tail = bytearray()  # the unfinished last line

    def feed(self, chunk: bytes) -> None:
        """Read the lines this chunk finishes."""
        cut = chunk.rfind(b"\n")
        if cut < 0:
            self._tail += chunk
            return
        lines = (bytes(self._tail) + chunk[:cut]).split(b"\n")
        self._tail = bytearray(chunk[cut + 1 :])
        for line in lines:
            self._line(line)

    def close(self) -> None:
        """Read the last line, which no newline ends."""
        self._line(self._tail)

    def _line(self, line: bytes | bytearray) -> None:
        line = line.strip()
        if not line:
            return
        found = self._found
        try:
            loc = line.decode("utf-8")
        except UnicodeDecodeError:
            if not any(issue.rule == RuleId.ENCODING_NOT_UTF8 for issue in found.issues):
                found.issue(RuleId.ENCODING_NOT_UTF8, "a line of the text sitemap is not UTF-8")
            loc = line.decode("utf-8", "replace")
        found.items += 1
        # \x00-\x02 cannot occur in XML; out of text they would break stored entry sets.
        found.entries.append(_entry(loc.translate(_NOT_IN_XML), None))


def _entry(loc: str, lastmod: str | None) -> Entry:
    return _tuple(Entry, (loc, lastmod, None, None, None))


def _first_text(element: etree._Element, name: str) -> str | None:
    """The text of the first child with this local name, in whatever namespace."""
    for child in element:
        if local(child.tag) == name:
            return (child.text or "").strip()
    return None


def _rfc822_to_w3c(value: str) -> str:
    """An RSS pubDate as a W3C datetime; left as it is (and so invalid) when unparseable."""
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()
