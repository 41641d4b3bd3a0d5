"""Bytes -> entries: a pure, streaming parser for sitemaps, indexes, text sitemaps and feeds.

The input is decompressed bytes, fed in chunks as they arrive. Nothing here does I/O. A document
that cannot be read completely ends in ``ParsedDocument.failure`` with no entries at all, so a
broken document never looks like a shorter one. DOCTYPE and entity declarations are
refused before lxml ever sees them.

Past the 600 lines a module is split at: its per-element hot loop stays whole, in one module.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, cast

from lxml import etree

from monitor.core.model import DocumentKind, Entry, Issue, Links, ParsedDocument
from monitor.core.rules import RuleId

__all__ = ["SITEMAP_NS", "DocumentParser", "parse_document"]

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"

_ROOTS: dict[bytes, DocumentKind] = {
    b"urlset": "urlset",
    b"sitemapindex": "sitemapindex",
    b"rss": "rss",
    b"feed": "atom",
}
# The repeated element of each kind; "{*}" so that a wrong namespace is still read.
_ITEMS: dict[DocumentKind, str] = {
    "urlset": "{*}url",
    "sitemapindex": "{*}sitemap",
    "rss": "{*}item",
    "atom": "{*}entry",
}
_FIELD_INDEX = {"loc": 0, "lastmod": 1, "changefreq": 2, "priority": 3}  # of a <url>
_SLICE = 64 * 1024  # lxml is fed at most this much at once, so the unread tree stays small
_PROLOG_MAX = 1 << 20  # bytes before the root element; real sitemaps need a few hundred
# Bytes fed while no item (<url>, <sitemap>, feed item) finishes: a real <url> is a few hundred
# bytes, tens of KB with a thousand images. lxml holds the unfinished element whole, at up to
# ~35 bytes a byte (one element of a million attributes: 12 MB took 404 MB), so past this the
# document fails instead.
_ITEM_MAX = 1 << 20
_KEPT_MAX = 1000  # issues of one rule kept in full per document; the rest are counted
_WS = re.compile(rb"[ \t\r\n]*")
_NAME = re.compile(rb"[^ \t\r\n/>]*")
_ENCODING = re.compile(rb"""encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
_ATTRIBUTE = re.compile(rb"""[ \t\r\n]+([^ \t\r\n=/>]+)[ \t\r\n]*=[ \t\r\n]*("[^"]*"|'[^']*')""")
_TAG_END = re.compile(rb"[ \t\r\n]*/?>")
_HTML_PAGE = "an HTML page ({}) where a sitemap was expected: the server answered with a web page"
_SITEMAP_NS_BYTES = SITEMAP_NS.encode()
_UTF8_NAMES = {"utf-8", "utf8", "us-ascii", "ascii"}  # ASCII bytes are UTF-8 bytes
_NOT_IN_XML = dict.fromkeys(range(3), "\ufffd")
_MARK = b"<!---->"  # put after a urlset's start tag: its event hands over the root element

# Entry is a named tuple; tuple.__new__ builds one without its Python-level __new__.
_tuple = tuple.__new__
_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False).encode
_json_string = json.encoder.encode_basestring_ascii  # what _json does with a string


def _skip_ws(s: bytes, i: int) -> int:
    match = _WS.match(s, i)
    return match.end() if match else i


def _entry(
    loc: str, lastmod: str | None, changefreq: str | None, priority: str | None, ext: str | None
) -> Entry:
    return _tuple(Entry, (loc, lastmod, changefreq, priority, ext))


class _Head:
    """What the bytes before the root element say: the format, where XML starts, the root."""

    __slots__ = ("encoding", "failure", "kind", "opened", "prefix", "root", "start", "xmlns")

    def __init__(self) -> None:
        self.kind: str | None = None  # "xml" or "text"; None while more bytes are needed
        self.start = 0  # offset of the first byte to hand on (after BOM and whitespace)
        self.prefix = b""  # a UTF-16 BOM, which lxml needs to see first
        self.root = b""  # local name of the root element
        self.encoding: str | None = None  # a non-UTF-8 encoding, for encoding-not-utf8
        self.failure: tuple[RuleId, str] | None = None
        self.xmlns: tuple[int, int] | None = None  # where the root says xmlns="SITEMAP_NS"
        self.opened: int | None = None  # just past the ">" of that root's start tag (not "/>")


def _sniff(buf: bytes, eof: bool) -> _Head:
    """Look at the start of a document; ``kind`` stays None when more bytes are needed."""
    head = _Head()
    bom, unit, codec = 0, 1, ""
    if buf.startswith(b"\xef\xbb\xbf"):
        bom = 3
    elif eof and buf and b"\xef\xbb\xbf".startswith(buf):
        bom = len(buf)  # a BOM cut short: nothing after it
    elif buf[:2] in (b"\xff\xfe", b"\xfe\xff"):
        bom, unit, codec = 2, 2, "utf-16-le" if buf[0] == 0xFF else "utf-16-be"
    elif len(buf) >= 2 and buf[1] == 0 and buf[0] in b"< \t\r\n":
        unit, codec = 2, "utf-16-le"
    elif len(buf) >= 2 and buf[0] == 0 and buf[1] in b"< \t\r\n":
        unit, codec = 2, "utf-16-be"
    if not eof and len(buf) < 4:
        return head  # a BOM or a UTF-16 pattern may still be arriving
    text = buf[bom : bom + _PROLOG_MAX]
    if codec:
        text = text[: len(text) // 2 * 2].decode(codec, "replace").encode("utf-8", "replace")
        head.encoding = "UTF-16"
    capped = len(buf) - bom >= _PROLOG_MAX
    _scan_prolog(text, eof or capped, head)
    if capped and head.kind is None and head.failure is not None:
        head.failure = (RuleId.XML_MALFORMED, f"no root element in the first {_PROLOG_MAX} bytes")
    # Only ASCII whitespace precedes ``start``, so UTF-16 offsets are twice the scanned ones.
    head.start = bom + head.start * unit
    if codec:
        head.prefix, head.xmlns, head.opened = buf[:bom], None, None
    elif head.xmlns is not None:
        head.xmlns = (head.xmlns[0] + bom, head.xmlns[1] + bom)
        head.opened = None if head.opened is None else head.opened + bom
    return head


def _sitemap_xmlns(s: bytes, i: int, head: _Head) -> None:
    """Where the root's start tag says ``xmlns="SITEMAP_NS"`` and where the tag ends, when it
    is complete."""
    span = None
    while match := _ATTRIBUTE.match(s, i):
        if match.group(1) == b"xmlns":
            span = match.span() if match.group(2)[1:-1] == _SITEMAP_NS_BYTES else None
        i = match.end()
    end = _TAG_END.match(s, i)
    if end is not None and span is not None:
        head.xmlns = span
        head.opened = None if end.group().endswith(b"/>") else end.end()


def _scan_prolog(s: bytes, eof: bool, head: _Head) -> None:
    """Walk the XML declaration, comments and PIs up to the root's name; refuse a DOCTYPE."""
    n = len(s)
    i = _skip_ws(s, 0)
    if i == n:
        if eof:
            head.failure = (RuleId.XML_MALFORMED, "the document is empty")
        return
    head.start = i
    if s[i] != 0x3C:  # not "<": a text sitemap starts with an absolute URL
        word = s[i : i + 8].lower()
        if word.startswith((b"http://", b"https://")):
            head.kind = "text"
        elif eof or n - i >= 8 or not (b"https://".startswith(word) or b"http://".startswith(word)):
            head.failure = (RuleId.ROOT_UNKNOWN, "neither XML nor a text sitemap (one URL a line)")
        return
    first = True
    while True:
        if i == n or (n - i < 9 and not eof):
            break  # every decision below needs up to 9 bytes
        if s[i] != 0x3C:
            head.failure = (RuleId.XML_MALFORMED, "text before the root element")
            return
        if s.startswith(b"<?", i):
            j = s.find(b"?>", i + 2)
            if j < 0:
                break
            if first and s.startswith(b"<?xml", i) and s[i + 5 : i + 6].isspace():
                match = _ENCODING.search(s, i, j)
                if match and match.group(1).decode().lower() not in _UTF8_NAMES:
                    head.encoding = head.encoding or match.group(1).decode()
            i = j + 2
        elif s.startswith(b"<!--", i):
            j = s.find(b"-->", i + 4)
            if j < 0:
                break
            i = j + 3
        elif s.startswith(b"<!", i):
            word = s[i + 2 : i + 9].upper()
            if word == b"DOCTYPE":
                name = _NAME.match(s, _skip_ws(s, i + 9))
                assert name is not None  # _NAME matches the empty string too
                if name.end() == n and not eof:
                    break  # the name may go on in the next chunk
                if name.group().lower() == b"html":  # a web page, not an attack
                    head.failure = (RuleId.ROOT_UNKNOWN, _HTML_PAGE.format("<!DOCTYPE html>"))
                else:
                    head.failure = (RuleId.XML_DOCTYPE, "a DOCTYPE or entity declaration (refused)")
            elif word.startswith(b"ENTITY"):
                head.failure = (RuleId.XML_DOCTYPE, "a DOCTYPE or entity declaration (refused)")
            else:
                head.failure = (RuleId.XML_MALFORMED, "markup declaration before the root element")
            return
        else:
            name = _NAME.match(s, i + 1)
            end = name.end() if name else i + 1
            if end == n:
                break  # the name may go on in the next chunk
            if end == i + 1:
                head.failure = (RuleId.XML_MALFORMED, "a '<' without an element name")
                return
            head.kind, head.root = "xml", s[i + 1 : end].rpartition(b":")[2]
            _sitemap_xmlns(s, end, head)
            return
        first = False
        i = _skip_ws(s, i)
    if eof:
        head.failure = (RuleId.XML_MALFORMED, "the document ends before its root element")


class DocumentParser:
    """Incremental parser for one document; feed() chunks as they arrive, then close()."""

    def __init__(
        self,
        url: str,
        *,
        max_bytes: int = 50 * 2**20,
        max_urls: int = 50_000,
        max_children: int = 50_000,
    ) -> None:
        self.url = url
        self._max_bytes = max_bytes
        self._max_urls = max_urls
        self._max_children = max_children
        self._size = 0
        self._head: bytearray | None = bytearray()  # bytes kept until the format is known
        self._next_sniff = 0  # sniff again only once the head has doubled: O(n) in total
        self._kind: DocumentKind | None = None
        self._xml: etree.XMLPullParser | None = None
        self._reader: Callable[[], None] = self._read_urls
        self._read_item: Callable[[etree._Element], None] = self._sitemap
        self._text_tail: bytearray | None = None  # the unfinished last line of a text sitemap
        self._fields: tuple[str, ...] | None = None  # qualified child names, from the first item
        self._xmlns_blanked = False
        self._root: etree._Element | None = None  # a urlset's root, read off its tree
        self._commented: set[etree._Element] = set()  # children of it with comments inside
        self._finishing = False  # the parse is over: every element is finished
        self._entries: list[Entry] = []
        self._links: Links | None = Links()  # of the entries; None: not all are (take_batch)
        self._children: list[str] = []
        self._child_lastmods: list[tuple[str, str]] = []
        self._issues: list[Issue] = []
        self._items = 0  # occurrences, with or without loc
        self._unkeyed = 0
        self._unread = 0  # bytes fed to lxml since an item last finished (_ITEM_MAX)
        self._kept: dict[str, int] = {}  # issues of a per-entry rule kept so far, by rule
        self._dropped: dict[str, int] = {}  # and counted past _KEPT_MAX
        self._failure: Issue | None = None
        self._result: ParsedDocument | None = None

    def feed(self, chunk: bytes) -> None:
        """Take the next chunk; never raises on bad input, it records the failure instead."""
        if self._result is not None:
            raise RuntimeError("feed() after close()")
        if self._failure is not None or not chunk:
            return
        self._size += len(chunk)
        if self._size > self._max_bytes:
            self._fail(RuleId.SIZE_TOO_LARGE, f"more than {self._max_bytes} bytes (decompressed)")
            return
        try:
            if self._xml is not None:
                self._feed_xml(chunk)
            elif self._text_tail is not None:
                self._feed_text(chunk)
            else:
                self._feed_head(chunk, eof=False)
        except (etree.LxmlError, ValueError) as exc:
            self._fail(RuleId.XML_MALFORMED, _syntax_message(exc))

    def take_batch(self) -> tuple[list[Entry], Links | None]:
        """The entries read since the last ``take_batch()``, which ``close()`` will then not
        hold: a caller can validate them while the parse goes on, so a document's entries are
        never all held twice. Until ``close()`` returns without a failure they may not be the
        document's: a failure later on means that none are. With them, their
        hreflang alternates (``Links``), or None when one of them had extension data of
        another shape (read its JSON, then)."""
        entries, links = self._entries, self._links
        self._entries, self._links = [], Links()
        return entries, links

    def close(self) -> ParsedDocument:
        """End of input: finish parsing and return what the document holds."""
        if self._result is not None:
            return self._result
        try:
            if self._failure is None and self._head is not None:
                self._feed_head(b"", eof=True)
            if self._failure is None and self._xml is not None:
                root = self._xml.close()
                self._finishing = True
                self._reader()
                self._check_root(root)
            elif self._failure is None and self._text_tail is not None:
                self._text_line(self._text_tail)
        except (etree.LxmlError, ValueError) as exc:
            self._fail(RuleId.XML_MALFORMED, _syntax_message(exc))
        self._xml = None
        # Bound methods kept on self make a reference cycle: without these two lines the
        # parser, and with it every entry, would wait for the cycle collector (digest
        # workers run without one).
        self._reader = _nothing
        self._read_item = _ignore
        if self._failure is not None:
            self._result = ParsedDocument(kind=self._kind, failure=self._failure)
            return self._result
        if self._items > self._max_urls and self._kind != "sitemapindex":
            self._issue(RuleId.URLS_TOO_MANY, f"{self._items} URLs; the limit is {self._max_urls}")
        if len(self._children) > self._max_children:
            self._issue(
                RuleId.INDEX_TOO_MANY,
                f"{len(self._children)} sitemaps; the limit is {self._max_children}",
            )
        self._result = ParsedDocument(
            kind=self._kind,
            entries=self._entries,
            children=self._children,
            child_lastmods=self._child_lastmods,
            issues=self._issues,
            unkeyed_invalid=self._unkeyed,
            dropped_issues=self._dropped,
        )
        return self._result

    # -- failures and issues ------------------------------------------------------------------

    def _fail(self, rule: RuleId, message: str) -> None:
        # Keep nothing: a failed document must not be mistaken for a shorter one.
        self._failure = Issue(rule, message, document=self.url)
        self._xml = None
        self._head = None
        self._text_tail = None
        self._entries, self._children, self._issues = [], [], []
        self._child_lastmods = []
        self._links = Links()
        self._unkeyed = 0

    def _issue(self, rule: RuleId, message: str, loc: str | None = None) -> None:
        self._issues.append(Issue(rule, message, loc=loc, document=self.url))

    def _entry_issue(self, rule: RuleId, message: str, loc: str | None = None) -> None:
        """An issue that may come once an entry: the first ``_KEPT_MAX`` kept, all counted."""
        kept = self._kept.get(rule, 0)
        if kept < _KEPT_MAX:
            self._kept[rule] = kept + 1
            self._issue(rule, message, loc)
        else:
            self._dropped[rule] = self._dropped.get(rule, 0) + 1

    def _missing_loc(self, element: str, loc: str = "loc") -> None:
        self._unkeyed += 1
        self._entry_issue(RuleId.LOC_MISSING,
                          f"a <{element}> without a <{loc}> (or with an empty one)")

    def _more_locs(self, element: str, first: str, others: list[str | None]) -> None:
        """``loc-multiple``: the first loc is read; every other one is named."""
        named = ", ".join(repr((text or "").strip()) for text in others)
        self._entry_issue(
            RuleId.LOC_MULTIPLE, f"a <{element}> with {len(others) + 1} <loc> elements: "
            f"{first!r} is read, not {named}", first)

    # -- format detection -----------------------------------------------------------------------

    def _feed_head(self, chunk: bytes, *, eof: bool) -> None:
        assert self._head is not None
        self._head += chunk
        if not eof and len(self._head) < self._next_sniff:
            return
        buf = bytes(self._head)
        head = _sniff(buf, eof)
        if head.failure is not None:
            self._fail(*head.failure)
            return
        if head.kind is None:
            self._next_sniff = 2 * len(buf)
            return
        self._head = None
        if head.kind == "text":
            self._kind = "text"
            self._text_tail = bytearray()
            self._feed_text(buf[head.start :])
            return
        kind = _ROOTS.get(head.root)
        if kind is None:
            root = head.root.decode("utf-8", "replace")
            if root.lower() == "html":
                self._fail(RuleId.ROOT_UNKNOWN, _HTML_PAGE.format("an <html> root element"))
            else:
                self._fail(RuleId.ROOT_UNKNOWN, f"root element <{root}> is not a sitemap or a feed")
            return
        self._kind = kind
        if head.encoding is not None:
            self._issue(RuleId.ENCODING_NOT_UTF8, f"the document is encoded as {head.encoding}")
        self._reader = self._read_urls if kind == "urlset" else self._read_items
        self._read_item = {"sitemapindex": self._sitemap, "rss": self._rss_item}.get(
            kind, self._atom_entry
        )
        events: dict[str, Any] = {"events": ("end",), "tag": _ITEMS[kind],
                                  "remove_comments": True}
        if head.xmlns is not None and kind in ("urlset", "sitemapindex"):
            # lxml builds every tag string anew, and "{namespace}loc" costs twice "loc": with
            # the (correct) default namespace blanked out, reading the children is ~20% faster.
            # Only the root's own xmlns="SITEMAP_NS" goes, replaced by as many spaces.
            first, stop = head.xmlns
            opened = head.opened
            if kind == "urlset" and opened is not None:
                # Better still, the attributes after it move left, and the spaces go after the
                # tag, behind a comment: its event hands over the root, whose <url> children
                # are then read off the tree that libxml2 builds alone, without the callback
                # into Python at every element that item events cost (~16% of the parse).
                # Offsets after the start tag are unchanged, so are lxml's error positions.
                buf = (buf[:first] + buf[stop:opened] + _MARK
                       + b" " * (stop - first - len(_MARK)) + buf[opened:])
                events = {"events": ("comment",), "remove_comments": False}
                self._reader = self._read_children
            else:
                buf = buf[:first] + b" " * (stop - first) + buf[stop:]
            self._xmlns_blanked = True
        # DOCTYPEs never get here; these settings are the second line of defence.
        self._xml = etree.XMLPullParser(
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            dtd_validation=False,
            huge_tree=False,
            remove_pis=True,
            remove_blank_text=True,
            collect_ids=False,
            **events,
        )
        self._feed_xml(head.prefix + buf[head.start :])

    def _check_root(self, root: etree._Element) -> None:
        if self._kind not in ("urlset", "sitemapindex") or self._xmlns_blanked:
            return
        tag = root.tag
        namespace = tag[1 : tag.find("}")] if tag[:1] == "{" else None
        if namespace != SITEMAP_NS:
            found = "no namespace" if namespace is None else f"namespace {namespace!r}"
            self._issue(RuleId.NAMESPACE_WRONG, f"root element has {found}, not {SITEMAP_NS!r}")

    # -- XML ----------------------------------------------------------------------------------

    def _feed_xml(self, chunk: bytes) -> None:
        xml = self._xml
        assert xml is not None
        for start in range(0, len(chunk), _SLICE):
            piece = chunk[start : start + _SLICE] if len(chunk) > _SLICE else chunk
            read = self._items + len(self._children) + self._unkeyed
            xml.feed(piece)
            self._reader()
            if self._items + len(self._children) + self._unkeyed != read:
                self._unread = 0
            else:
                self._unread += len(piece)
                if self._unread > _ITEM_MAX:
                    self._fail(RuleId.SIZE_TOO_LARGE, f"more than {_ITEM_MAX} bytes without the "
                               "end of a <url>, <sitemap> or feed item (an element that big is "
                               "refused)")
                    return

    def _read_children(self) -> None:
        """The hot path of a urlset: the root's finished children, read and dropped. All but
        the last are finished while the parse goes on (the last may be half-built)."""
        xml = self._xml
        assert xml is not None
        root = self._root
        for _, comment in _events(xml):
            if root is None:  # _MARK (a comment before the root has no parent)
                root = self._root = comment.getparent()
            elif (child := _child_holding(comment, root)) is not None:
                self._commented.add(child)
        if root is None:
            return
        children = list(root)
        if not self._finishing:
            del children[-1:]
        if not children:
            return
        if self._commented:
            for child in children:
                if child in self._commented:
                    self._commented.discard(child)
                    _drop_comments(child)
        self._take_urls(_urls(children))
        del root[: len(children)]

    def _read_urls(self) -> None:
        """<url> elements as item events give them (a urlset whose root tag is unusual)."""
        assert self._xml is not None
        last = self._take_urls(url for _, url in _events(self._xml) if _outermost(url))
        if last is not None:
            _drop_through(last)

    def _take_urls(self, urls: Iterator[etree._Element]) -> etree._Element | None:
        """One pass over each <url>'s children; the last <url> read."""
        if self._fields is None:
            first = next(urls, None)
            if first is None:
                return None
            urls = itertools.chain((first,), urls)
            # Children share the namespace of the first <url>, whatever it is (namespace-wrong);
            # a <url> that differs is read by _other_children.
            tag = first.tag
            prefix = tag[: tag.find("}") + 1] if tag[:1] == "{" else ""
            self._fields = tuple(prefix + name for name in _FIELD_INDEX)
        loc_tag, lastmod_tag, changefreq_tag, priority_tag = self._fields
        append = self._entries.append
        new = _tuple
        items = 0
        url = None
        for url in urls:
            items += 1
            loc = lastmod = changefreq = priority = extra = None
            other: list[etree._Element] | None = None
            for child in url:
                tag = child.tag
                # An empty optional element is an absent one: "" or None is None.
                if tag == loc_tag:
                    if loc is None:
                        loc = child.text or ""
                    else:
                        extra = [child.text] if extra is None else [*extra, child.text]
                elif tag == lastmod_tag:
                    if lastmod is None:
                        lastmod = (child.text or "").strip() or None
                elif tag == changefreq_tag:
                    if changefreq is None:
                        changefreq = (child.text or "").strip() or None
                elif tag == priority_tag:
                    if priority is None:
                        priority = (child.text or "").strip() or None
                elif other is None:
                    other = [child]
                else:
                    other.append(child)
            extensions = None
            if other is not None:
                extensions = _usual_extensions(other, self._links, len(self._entries))
                if extensions is None:
                    self._links = None  # maybe partly filled, and not all: of no use now
                    values = [loc, lastmod, changefreq, priority]
                    extra = extra or []
                    extensions = _other_children(other, values, extra)
                    loc, lastmod, changefreq, priority = values
            if loc is None or not (loc := loc.strip()):
                self._missing_loc("url")
                if other is not None:
                    self._links = None  # it may have given links to an entry never made
                continue
            if extra:
                self._more_locs("url", loc, extra)
            append(new(Entry, (loc, lastmod, changefreq, priority, extensions)))
        self._items += items
        return url

    def _read_items(self) -> None:
        """Index, RSS and Atom: one simple pass per item (these documents are small)."""
        assert self._xml is not None
        last = None
        for _, item in _events(self._xml):
            self._read_item(item)
            last = item
        if last is not None:
            _drop_through(last)

    def _sitemap(self, sitemap: etree._Element) -> None:
        loc, *others = [child.text for child in sitemap if _local(child.tag) == "loc"] or [None]
        loc = (loc or "").strip()
        if loc:
            self._children.append(loc)
            lastmod = next(((c.text or "").strip() for c in sitemap
                            if _local(c.tag) == "lastmod"), "")
            if lastmod:  # judged by validate.index_issues, as an entry's
                self._child_lastmods.append((loc, lastmod))
            if others:
                self._more_locs("sitemap", loc, others)
        else:
            self._missing_loc("sitemap")

    def _rss_item(self, item: etree._Element) -> None:
        self._items += 1
        # Exact names: RSS items are not namespaced, and <atom:link> is not the item's link.
        loc = next(((c.text or "").strip() for c in item.iterchildren("link")), None)
        pub_date = next(((c.text or "").strip() for c in item.iterchildren("pubDate")), None)
        if loc:
            lastmod = _rfc822_to_w3c(pub_date) if pub_date else None
            self._entries.append(_entry(loc, lastmod, None, None, None))
        else:
            self._missing_loc("item", "link")

    def _atom_entry(self, entry: etree._Element) -> None:
        self._items += 1
        loc = None
        for child in entry:
            if _local(child.tag) == "link" and child.get("rel", "alternate") == "alternate":
                loc = (child.get("href") or "").strip()
                break
        if loc:
            updated = _first_text(entry, "updated") or None
            self._entries.append(_entry(loc, updated, None, None, None))
        else:
            self._missing_loc("entry", "link href")

    # -- text sitemaps --------------------------------------------------------------------------

    def _feed_text(self, chunk: bytes) -> None:
        assert self._text_tail is not None
        cut = chunk.rfind(b"\n")
        if cut < 0:
            self._text_tail += chunk
            return
        lines = (bytes(self._text_tail) + chunk[:cut]).split(b"\n")
        self._text_tail = bytearray(chunk[cut + 1 :])
        for line in lines:
            self._text_line(line)

    def _text_line(self, line: bytes | bytearray) -> None:
        line = line.strip()
        if not line:
            return
        try:
            loc = line.decode("utf-8")
        except UnicodeDecodeError:
            if not any(issue.rule == RuleId.ENCODING_NOT_UTF8 for issue in self._issues):
                self._issue(RuleId.ENCODING_NOT_UTF8, "a line of the text sitemap is not UTF-8")
            loc = line.decode("utf-8", "replace")
        self._items += 1
        # \x00-\x02 cannot occur in XML; out of text they would break stored entry sets.
        self._entries.append(_entry(loc.translate(_NOT_IN_XML), None, None, None, None))


def _nothing() -> None:
    return None


def _ignore(_element: etree._Element) -> None:
    return None


def _events(xml: etree.XMLPullParser) -> Iterator[tuple[str, etree._Element]]:
    # The stubs type events loosely; with events=("end",) and a tag each one is an element.
    return cast("Iterator[tuple[str, etree._Element]]", xml.read_events())


def _urls(children: list[etree._Element]) -> Iterator[etree._Element]:
    """The <url> elements among a urlset's children (in any namespace, as item events
    would find them): a <url> wrapped in another element too, not comments, not a <url>
    inside a <url>."""
    for child in children:
        tag = child.tag
        if tag == "url" or _is_url(tag):  # the usual tag first: no call on the hot path
            yield child
        elif type(tag) is str:  # not a comment
            yield from (url for url in child.iter("{*}url") if _outermost(url))


def _outermost(url: etree._Element) -> bool:
    """Whether no ancestor of a <url> is one: a <url> inside a <url> is extension data."""
    parent = url.getparent()
    while parent is not None:
        if _is_url(parent.tag):
            return False
        parent = parent.getparent()
    return True


def _is_url(tag: object) -> bool:
    """Whether an element's tag is <url>, in any namespace (a comment's tag is a function)."""
    return tag == "url" or (type(tag) is str and tag.endswith("}url"))


def _child_holding(comment: etree._Element, root: etree._Element) -> etree._Element | None:
    """The child of ``root`` that holds a comment, None for a comment that is one."""
    node, parent = comment, comment.getparent()
    while parent is not None and parent is not root:
        node, parent = parent, parent.getparent()
    return None if node is comment or parent is None else node


def _drop_comments(element: etree._Element) -> None:
    """Remove the comments under an element as ``remove_comments`` would have: the text
    after each joins the text before it (``<loc>a<!-- -->b</loc>`` reads "ab"). Only an
    element's own text is ever read, not the text after a child: that is all it keeps."""
    for comment in list(element.iter(etree.Comment)):
        parent, tail = comment.getparent(), comment.tail
        assert parent is not None
        if tail and comment.getprevious() is None:
            parent.text = (parent.text or "") + tail
        parent.remove(comment)


def _drop_through(last: etree._Element) -> None:
    """Free every finished element up to ``last``; the one being built comes after it."""
    parent = last.getparent()
    if parent is not None:
        del parent[: parent.index(last) + 1]


def _first_text(element: etree._Element, name: str) -> str | None:
    """The text of the first child with this local name, in whatever namespace."""
    for child in element:
        if _local(child.tag) == name:
            return (child.text or "").strip()
    return None


def _syntax_message(exc: Exception) -> str:
    message = str(exc).strip() or type(exc).__name__
    return f"not well-formed XML, or truncated: {message}"[:500]


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _other_children(elements: list[etree._Element], values: list[str | None],
                    extra_locs: list[str | None]) -> str | None:
    """Children the fast path did not know, and not of the usual shape (``_usual_extensions``):
    fields in another namespace, or extensions.

    A <url> may redeclare the namespace (``<url xmlns="...">``) unlike the first one did, so
    its fields are matched by local name here; ``values`` is filled where still missing, and a
    further loc goes to ``extra_locs``.
    """
    rest = []
    for element in elements:
        index = _FIELD_INDEX.get(_local(element.tag))
        if index is None:
            rest.append(element)
        elif values[index] is None:
            text = element.text or ""
            values[index] = text if index == 0 else text.strip() or None
        elif index == 0:
            extra_locs.append(element.text)
    return _extensions(rest) if rest else None


def _extensions(elements: list[etree._Element]) -> str | None:
    """Image, video, news and hreflang data of one <url>, as canonical JSON."""
    if len(elements) == 1 and (lone := _lone_image(elements[0])) is not None:
        return lone
    return _any_extensions(elements)


def _any_extensions(elements: list[etree._Element]) -> str | None:
    data: dict[str, list[Any]] = {}
    for element in elements:
        name = _local(element.tag)
        if name == "link":
            if (element.get("rel") or "").strip() == "alternate":
                data.setdefault("alternates", []).append(
                    {
                        "hreflang": (element.get("hreflang") or "").strip(),
                        "href": (element.get("href") or "").strip(),
                    }
                )
        elif name in ("image", "video", "news"):
            data.setdefault(name, []).append(_as_json(element))
    if not data:
        return None
    return _json(data)


_LINK = "{http://www.w3.org/1999/xhtml}link"
_IMAGE = "{http://www.google.com/schemas/sitemap-image/1.1}image"
_IMAGE_LOC = "{http://www.google.com/schemas/sitemap-image/1.1}loc"


def _usual_extensions(elements: list[etree._Element], links: Links | None, owner: int,
                      ) -> str | None:
    """What ``_extensions`` makes of the usual localized page, hreflang links (xhtml:link)
    and at most one lone image after them, written straight as its JSON (no field among
    them: their tags are qualified); None for any other shape. Each link also goes to
    ``links``, as entry ``owner``'s (some may have gone there before a None)."""
    last = elements[-1]
    image = None
    if last.tag == _IMAGE:
        image = _lone_image(last)
        if image is None:
            return None
        elements = elements[:-1]
        if not elements:
            return image
    parts = []
    for link in elements:
        if link.tag != _LINK or len(link) or link.get("rel") != "alternate":
            return None
        href = (link.get("href") or "").strip()
        code = (link.get("hreflang") or "").strip()
        parts.append('{"href":' + _json_string(href) + ',"hreflang":' + _json_string(code) + "}")
        if links is not None:
            links.owners.append(owner)
            links.hrefs.append(href)
            links.codes.append(code)
    alternates = '{"alternates":[' + ",".join(parts) + "]"
    return alternates + "}" if image is None else alternates + "," + image[1:]


def _lone_image(element: etree._Element) -> str | None:
    """What ``_any_extensions`` makes of the usual image entry, one
    ``<image:image><image:loc>URL</image:loc></image:image>``, without its dicts and encoder
    (a tenth of a document's time when every tenth URL has one); None for any other shape."""
    if len(element) != 1 or element.keys() or _not_named(element.tag, _IMAGE, "image") or (
        element.text is not None and element.text.strip()
    ):
        return None
    loc = element[0]
    text = (loc.text or "").strip()
    if len(loc) or loc.keys() or _not_named(loc.tag, _IMAGE_LOC, "loc") or not text:
        return None  # an empty loc goes the general way, to image-missing-loc
    return '{"image":[{"loc":' + _json_string(text) + "}]}"


def _not_named(tag: str, usual: str, local: str) -> bool:
    """Whether a tag is not ``local`` in any namespace (``usual``, the usual one, looked at
    first: no split)."""
    return tag != usual and _local(tag) != local


def _as_json(element: etree._Element) -> Any:
    """An element as JSON: its text, or attributes (``@name``), children and ``#text``."""
    text = (element.text or "").strip()
    if not len(element) and not element.keys():
        return text
    children = list(element)
    value: dict[str, Any] = {"@" + _local(str(k)): str(v) for k, v in element.attrib.items()}
    for child in children:
        key, item = _local(child.tag), _as_json(child)
        if key not in value:
            value[key] = item
        elif isinstance(value[key], list):
            value[key].append(item)
        else:
            value[key] = [value[key], item]
    if text:
        value["#text"] = text
    return value


def _rfc822_to_w3c(value: str) -> str:
    """An RSS pubDate as a W3C datetime; left as it is (and so invalid) when unparseable."""
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


def parse_document(data: bytes, url: str, **limits: int) -> ParsedDocument:
    """Parse a whole document held in memory (one feed, then close)."""
    parser = DocumentParser(url, **limits)
    parser.feed(data)
    return parser.close()
