"""Bytes -> entries: a pure, streaming parser for sitemaps, indexes, text sitemaps and feeds.

The input is decompressed bytes, fed in chunks as they arrive. Nothing here does I/O. A document
that cannot be read completely ends in ``ParsedDocument.failure`` with no entries at all, so a
broken document never looks like a shorter one. DOCTYPE and entity declarations are
refused before lxml ever sees them.

The parts, in the order the bytes meet them: ``prolog`` tells the format from the first bytes;
this module feeds lxml (or the text reader) and holds the limits; ``urlset`` reads a urlset's
<url> elements, the hot path, and ``items`` the small formats; each writes to a ``found.Found``,
of which ``take_batch`` and ``close`` hand over the entries. ``extjson`` turns what a <url> holds
besides its four fields into JSON.
"""

from __future__ import annotations

from typing import Any

from lxml import etree

from monitor.core.model import DocumentKind, Entry, Issue, Links, ParsedDocument
from monitor.core.rules import RuleId
from monitor.read.extjson import any_extensions as _any_extensions  # noqa: F401 (tests' oracle)
from monitor.read.found import Found
from monitor.read.items import Items, TextLines
from monitor.read.prolog import SITEMAP_NS, Head, sniff
from monitor.read.urlset import EventUrls, TreeUrls

__all__ = ["SITEMAP_NS", "DocumentParser", "parse_document"]

# The repeated element of each kind; "{*}" so that a wrong namespace is still read.
_ITEMS: dict[DocumentKind, str] = {
    "urlset": "{*}url",
    "sitemapindex": "{*}sitemap",
    "rss": "{*}item",
    "atom": "{*}entry",
}
_SLICE = 64 * 1024  # lxml is fed at most this much at once, so the unread tree stays small
# Bytes fed while no item (<url>, <sitemap>, feed item) finishes: a real <url> is a few hundred
# bytes, tens of KB with a thousand images. lxml holds the unfinished element whole, at up to
# ~35 bytes a byte (one element of a million attributes: 12 MB took 404 MB), so past this the
# document fails instead.
_ITEM_MAX = 1 << 20
_MARK = b"<!---->"  # put after a urlset's start tag: its event hands over the root element


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
        self._found = Found(url)
        self._xml: _XmlStream | None = None
        self._reader: EventUrls | TreeUrls | Items | None = None  # the XML format's reader
        self._text: TextLines | None = None
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
            elif self._text is not None:
                self._text.feed(chunk)
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
        found = self._found
        entries, links = found.entries, found.links
        found.entries, found.links = [], Links()
        return entries, links

    def close(self) -> ParsedDocument:
        """End of input: finish parsing and return what the document holds."""
        if self._result is not None:
            return self._result
        try:
            if self._failure is None and self._head is not None:
                self._feed_head(b"", eof=True)
            if self._failure is None and self._xml is not None:
                self._xml.close()
            elif self._failure is None and self._text is not None:
                self._text.close()
        except (etree.LxmlError, ValueError) as exc:
            self._fail(RuleId.XML_MALFORMED, _syntax_message(exc))
        self._xml = self._text = None
        if self._failure is not None:
            self._result = ParsedDocument(kind=self._kind, failure=self._failure)
        else:
            self._result = self._found.document(self._kind, self._max_urls, self._max_children)
        return self._result

    @property
    def _root(self) -> etree._Element | None:
        """The urlset's root element when its <url>s are read off its tree (the tests look)."""
        return self._reader.root if isinstance(self._reader, TreeUrls) else None

    def _fail(self, rule: RuleId, message: str) -> None:
        # Keep nothing: a failed document must not be mistaken for a shorter one.
        self._failure = Issue(rule, message, document=self.url)
        self._xml = self._text = None
        self._head = None
        self._found = Found(self.url)

    def _feed_head(self, chunk: bytes, *, eof: bool) -> None:
        """Keep the first bytes until ``prolog.sniff`` tells the format, then hand them on."""
        assert self._head is not None
        self._head += chunk
        if not eof and len(self._head) < self._next_sniff:
            return
        buf = bytes(self._head)
        head = sniff(buf, eof)
        if head.failure is not None:
            self._fail(*head.failure)
            return
        if head.document is None:
            self._next_sniff = 2 * len(buf)
            return
        self._head = None
        self._kind = head.document
        if head.document == "text":
            self._text = TextLines(self._found)
            self._text.feed(buf[head.start :])
            return
        if head.encoding is not None:
            self._found.issue(RuleId.ENCODING_NOT_UTF8,
                              f"the document is encoded as {head.encoding}")
        self._xml, first = _open_xml(head, head.document, buf, self._found)
        self._reader = self._xml.reader
        self._feed_xml(first)

    def _feed_xml(self, chunk: bytes) -> None:
        assert self._xml is not None
        refused = self._xml.feed(chunk)
        if refused is not None:
            self._fail(RuleId.SIZE_TOO_LARGE, refused)


class _XmlStream:
    """lxml fed in slices, the items each slice finishes handed to the format's reader."""

    __slots__ = ("_found", "_namespaced", "_unread", "_xml", "reader")

    def __init__(self, xml: etree.XMLPullParser, reader: EventUrls | TreeUrls | Items,
                 found: Found, *, namespaced: bool) -> None:
        self._xml = xml
        self.reader = reader
        self._found = found
        self._namespaced = namespaced  # whether the root must be in the sitemap namespace
        self._unread = 0  # bytes fed since an item last finished (_ITEM_MAX)

    def feed(self, chunk: bytes) -> str | None:
        """Feed a chunk; why the document is refused, if it is."""
        xml, read, found = self._xml, self.reader.read, self._found
        for start in range(0, len(chunk), _SLICE):
            piece = chunk[start : start + _SLICE] if len(chunk) > _SLICE else chunk
            before = found.progress()
            xml.feed(piece)
            read(xml, False)
            if found.progress() != before:
                self._unread = 0
            else:
                self._unread += len(piece)
                if self._unread > _ITEM_MAX:
                    return (f"more than {_ITEM_MAX} bytes without the end of a <url>, <sitemap> "
                            "or feed item (an element that big is refused)")
        return None

    def close(self) -> None:
        """End of input: read the last items, and judge the root's namespace."""
        root = self._xml.close()
        self.reader.read(self._xml, True)
        if not self._namespaced:
            return
        tag = root.tag
        namespace = tag[1 : tag.find("}")] if tag[:1] == "{" else None
        if namespace != SITEMAP_NS:
            found = "no namespace" if namespace is None else f"namespace {namespace!r}"
            self._found.issue(RuleId.NAMESPACE_WRONG,
                              f"root element has {found}, not {SITEMAP_NS!r}")


def _open_xml(head: Head, kind: DocumentKind, buf: bytes, found: Found,
              ) -> tuple[_XmlStream, bytes]:
    """The XML stream of a document of this kind, and the first bytes to feed it."""
    reader: EventUrls | TreeUrls | Items = (
        EventUrls(found) if kind == "urlset" else Items(found, kind))
    events: dict[str, Any] = {"events": ("end",), "tag": _ITEMS[kind], "remove_comments": True}
    namespaced = kind in ("urlset", "sitemapindex")
    if head.xmlns is not None and namespaced:
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
            reader = TreeUrls(found)
        else:
            buf = buf[:first] + b" " * (stop - first) + buf[stop:]
        namespaced = False  # it was the sitemap namespace, now blanked
    # DOCTYPEs never get here; these settings are the second line of defence.
    xml = etree.XMLPullParser(
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
    return _XmlStream(xml, reader, found, namespaced=namespaced), head.prefix + buf[head.start :]


def _syntax_message(exc: Exception) -> str:
    message = str(exc).strip() or type(exc).__name__
    return f"not well-formed XML, or truncated: {message}"[:500]


def parse_document(data: bytes, url: str, **limits: int) -> ParsedDocument:
    """Parse a whole document held in memory (one feed, then close)."""
    parser = DocumentParser(url, **limits)
    parser.feed(data)
    return parser.close()
