"""A column of an entry set as text and as a deflate stream (pure): what
monitor.codec.entryset builds its stored form from.

A column's text joins its values (in document order) with \x00, an unset value being \x01
(``joined``, ``split``). None of \x00-\x02 can occur in an XML document's text, nor in
extension data (JSON escapes them); the parser replaces them in text sitemaps. A column that
is stored as a deflate stream of its own (the extensions) is compressed as its values come
(``Stream``) and kept with its text once read back (``PackedText``), so that a new version
copies the stream instead of compressing the same text again; the stored value's Adler-32 is
worked out from its streams' (``adler32_combine``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast

__all__ = ["LEVEL", "SLICE", "UNSET", "PackedText", "Stream", "adler32_combine", "joined",
           "slices", "split"]

LEVEL = 1  # zlib: level 1 compresses a sitemap's columns ~5x fast; 6 is 3x slower for 15%
UNSET = "\x01"  # a value that is not set (None)
SLICE = 1 << 20  # characters of a column encoded at once


@dataclass(slots=True, frozen=True)
class PackedText:
    """A column's deflate stream as stored, and the text it holds: that very object, so that a
    column whose text is still it (``is``: a str does not change) packs as the same stream
    without compressing it again (a 50,000-URL child's, with hreflang and images, extensions: 18
    MB)."""

    data: bytes
    check: int  # the Adler-32 of the text's bytes
    length: int  # the text's bytes
    text: str


def joined(values: Sequence[str | None]) -> str:
    """Values as a column's text holds them: joined by \x00, an unset one as \x01."""
    if None not in values:
        return "\x00".join(cast("Sequence[str]", values))
    return "\x00".join([UNSET if v is None else v for v in values])


def split(text: str, size: int, absent: bool) -> list[str | None]:
    """A column's values from its text (``joined``'s inverse), None where unset; ``absent``: a
    column stored without any value (its text is then "")."""
    if absent or size == 0:
        return [None] * size
    values = text.split("\x00")
    if UNSET not in text:  # every value is set (the usual lastmod column): no pass needed
        return cast("list[str | None]", values)
    return [None if v == UNSET else v for v in values]


def slices(text: str) -> Iterator[bytes]:
    """A column's text as UTF-8, ``SLICE`` characters at a time (whole, it would be a copy)."""
    for start in range(0, len(text), SLICE):
        yield text[start : start + SLICE].encode("utf-8", "surrogatepass")


_ADLER_BASE = 65521


def adler32_combine(first: int, second: int, length: int) -> int:
    """The Adler-32 of two byte strings end to end, from each one's and the second's length
    (zlib's adler32_combine, which Python does not expose)."""
    base = _ADLER_BASE
    rem = length % base
    sum1 = first & 0xFFFF
    sum2 = rem * sum1 % base
    sum1 += (second & 0xFFFF) + base - 1
    sum2 += (first >> 16) + (second >> 16) + base - rem
    return sum1 % base | (sum2 % base) << 16


class Stream:
    """The extensions column of an entry set, compressed as its values come.

    Extensions are most of a set where entries carry hreflang alternates and images (a 50,000-URL
    child with both: 18 of 23 MB of text). Held as a string each, then joined, then packed, they
    were half of a digest's peak memory; here each batch is joined and deflated as it comes (the
    child: 2 MB), and ``pack`` ends the stored value with the stream as it is, compressed once.
    Values join as ``joined`` joins them, \x01 for unset."""

    __slots__ = ("_chunks", "_packer", "check", "length", "size", "unset")

    def __init__(self) -> None:
        self._packer: zlib._Compress | None = None  # made when the first byte comes (256 KB)
        self._chunks: list[bytes] = []
        self.check = zlib.adler32(b"")  # of the text's bytes so far
        self.length = 0  # the text's bytes so far
        self.size = 0  # values added
        self.unset = 0  # of them, unset

    def add(self, values: Sequence[str | None]) -> str:
        """Add these values; their text (without the \x00 before it, after earlier values)."""
        if not values:
            return ""
        text = joined(values)
        self.size += len(values)
        self.unset += values.count(None)
        self._write((("\x00" if self.size > len(values) else "") + text).encode(
            "utf-8", "surrogatepass"))
        return text

    def add_text(self, text: str) -> None:
        """Add a column's whole text as ``joined`` makes it (``entryset.pack``'s own use)."""
        for data in slices(text):
            self._write(data)

    def _write(self, data: bytes) -> None:
        if not data:
            return
        self.check = zlib.adler32(data, self.check)
        self.length += len(data)
        if self._packer is None:
            self._packer = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        chunk = self._packer.compress(data)
        if chunk:
            self._chunks.append(chunk)

    @property
    def absent(self) -> bool:
        """Whether no value added is set (the column is then stored as absent, empty)."""
        return self.size > 0 and self.unset == self.size

    def values(self) -> list[str | None]:
        """The values added, in order (decompressed: for the rare paths that need them all)."""
        if self.absent or self._packer is None:
            return [None] * self.size if self.absent else [""] * self.size
        data = b"".join([*self._chunks, self._packer.copy().flush()])
        text = zlib.decompress(data, -zlib.MAX_WBITS).decode("utf-8", "surrogatepass")
        return split(text, self.size, False)

    def finish(self) -> bytes:
        """The deflate stream of the text (raw, ended); nothing can be added after."""
        chunks, self._chunks, packer, self._packer = self._chunks, [], self._packer, None
        if packer is not None:
            chunks.append(packer.flush())
        return b"".join(chunks)
