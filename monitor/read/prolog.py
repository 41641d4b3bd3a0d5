"""The bytes before a document's root element: its format, encoding and root, read off the
prolog without lxml (which never sees a DOCTYPE: one is refused here)."""

from __future__ import annotations

import re

from monitor.core.model import DocumentKind
from monitor.core.rules import RuleId

__all__ = ["SITEMAP_NS", "Head", "sniff"]

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"

_ROOTS: dict[bytes, DocumentKind] = {
    b"urlset": "urlset",
    b"sitemapindex": "sitemapindex",
    b"rss": "rss",
    b"feed": "atom",
}
_PROLOG_MAX = 1 << 20  # bytes before the root element; real sitemaps need a few hundred
_WS = re.compile(rb"[ \t\r\n]*")
_NAME = re.compile(rb"[^ \t\r\n/>]*")
_ENCODING = re.compile(rb"""encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
_ATTRIBUTE = re.compile(rb"""[ \t\r\n]+([^ \t\r\n=/>]+)[ \t\r\n]*=[ \t\r\n]*("[^"]*"|'[^']*')""")
_TAG_END = re.compile(rb"[ \t\r\n]*/?>")
_HTML_PAGE = "an HTML page ({}) where a sitemap was expected: the server answered with a web page"
_SITEMAP_NS_BYTES = SITEMAP_NS.encode()
_UTF8_NAMES = {"utf-8", "utf8", "us-ascii", "ascii"}  # ASCII bytes are UTF-8 bytes


def _skip_ws(s: bytes, i: int) -> int:
    match = _WS.match(s, i)
    return match.end() if match else i


class Head:
    """What the bytes before the root element say: the format, where XML starts, the root."""

    __slots__ = ("document", "encoding", "failure", "kind", "opened", "prefix", "root", "start",
                 "xmlns")

    def __init__(self) -> None:
        self.kind: str | None = None  # "xml" or "text"; None while more bytes are needed
        self.document: DocumentKind | None = None  # "text" or the root's kind, once known
        self.start = 0  # offset of the first byte to hand on (after BOM and whitespace)
        self.prefix = b""  # a UTF-16 BOM, which lxml needs to see first
        self.root = b""  # local name of the root element
        self.encoding: str | None = None  # a non-UTF-8 encoding, for encoding-not-utf8
        self.failure: tuple[RuleId, str] | None = None
        self.xmlns: tuple[int, int] | None = None  # where the root says xmlns="SITEMAP_NS"
        self.opened: int | None = None  # just past the ">" of that root's start tag (not "/>")


def sniff(buf: bytes, eof: bool) -> Head:
    """Look at the start of a document; ``kind`` stays None when more bytes are needed, and
    ``failure`` says why one is refused (no root, a DOCTYPE, a root that is no sitemap)."""
    head = Head()
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
    if head.kind == "text":
        head.document = "text"
    elif head.kind == "xml":
        head.document = _ROOTS.get(head.root)
        if head.document is None:
            head.failure = (RuleId.ROOT_UNKNOWN, _unknown_root(head.root))
    return head


def _unknown_root(name: bytes) -> str:
    root = name.decode("utf-8", "replace")
    if root.lower() == "html":
        return _HTML_PAGE.format("an <html> root element")
    return f"root element <{root}> is not a sitemap or a feed"


def _sitemap_xmlns(s: bytes, i: int, head: Head) -> None:
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


def _declaration(s: bytes, i: int, eof: bool) -> tuple[RuleId, str] | None:
    """Why a ``<!`` declaration before the root is refused; None while its name is cut off."""
    word = s[i + 2 : i + 9].upper()
    if word == b"DOCTYPE":
        name = _NAME.match(s, _skip_ws(s, i + 9))
        assert name is not None  # _NAME matches the empty string too
        if name.end() == len(s) and not eof:
            return None
        if name.group().lower() == b"html":  # a web page, not an attack
            return (RuleId.ROOT_UNKNOWN, _HTML_PAGE.format("<!DOCTYPE html>"))
        return (RuleId.XML_DOCTYPE, "a DOCTYPE or entity declaration (refused)")
    if word.startswith(b"ENTITY"):
        return (RuleId.XML_DOCTYPE, "a DOCTYPE or entity declaration (refused)")
    return (RuleId.XML_MALFORMED, "markup declaration before the root element")


def _scan_prolog(s: bytes, eof: bool, head: Head) -> None:
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
            refused = _declaration(s, i, eof)
            if refused is None:
                break  # the DOCTYPE's name may go on in the next chunk
            head.failure = refused
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
