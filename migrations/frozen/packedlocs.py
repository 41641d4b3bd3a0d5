"""The locs column of a stored entry set as its own deflate stream, with digests (pure).

A re-read document (monitor.read.reread) usually lists the stored locs in the stored order, and its
new entry set stores them again. Held as text, the stored locs were inflated at every re-read
only to be compared and deflated once more: on the every-lastmod re-check of a 500,000-URL index,
~60 M instructions a child to inflate them and ~150 M to deflate them, against a first check that
does neither. In an entry set of version 2 (monitor.codec.entryset) the locs are a deflate stream
of their own, which a new version copies as it is, and the header holds their digests, against
which a document's locs are compared as they come without reading the stored ones at all.

The digests are a chain of BLAKE2b over the locs' text (UTF-8, \x00 between), ``GROUP`` bytes
at a time, each keyed with the one before: the first 8 bytes of each full group's, and the last
(partial) group's whole 16 bytes, which stand for all of the text. A document whose locs differ
is found out at the first group that differs (a re-read then validates it whole), and the last
digest makes a collision as hard as BLAKE2b's: a document is never taken for another's locs by
chance. CRC-32 would cost a third as much, but anyone can make two texts with the same CRC.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from hashlib import blake2b

__all__ = ["GROUP", "Digests", "PackedLocs", "pack"]

GROUP = 1 << 16  # bytes of the locs' text a digest covers
_LEVEL = 1  # as monitor.codec.entryset's columns
_SEP = b"\x02"  # the stream holds the locs and the separator after them (monitor.codec.entryset)
_SLICE = 1 << 20  # characters encoded at once


@dataclass(slots=True, frozen=True)
class PackedLocs:
    """A stored locs column: its raw deflate stream (``LOCS \x02``, flushed to a byte
    boundary, not final) and what the header says of it."""

    data: bytes
    check: int  # the Adler-32 of the stream's text
    length: int  # the bytes of that text
    digests: str  # hex, 8 bytes for each full group of the locs' text (``Digests``)
    digest: str  # hex, the last group's 16 bytes (``Digests``)

    def describe(self) -> dict[str, object]:
        """What the stored header says of the stream (``of`` reads it back)."""
        return {"z": len(self.data), "a": self.check, "b": self.length, "h": self.digests,
                "d": self.digest}

    def text(self) -> str:
        """The locs' text (\x00 between them), inflated and checked."""
        data = zlib.decompressobj(-zlib.MAX_WBITS).decompress(self.data)
        if len(data) != self.length or zlib.adler32(data) != self.check or data[-1:] != _SEP:
            raise ValueError("a stored locs column that does not match its checksum")
        return str(memoryview(data)[:-1], "utf-8", "surrogatepass")

    def same(self, other: PackedLocs) -> bool:
        """Whether the two hold the same locs (their digests say so)."""
        return self is other or (self.length == other.length and self.digest == other.digest
                                 and self.digests == other.digests)


def of(described: dict[str, object], data: bytes) -> PackedLocs:
    """The ``PackedLocs`` a stored header describes (``describe``), its stream ``data``."""
    if not isinstance(described, dict) or len(data) != described.get("z"):
        raise ValueError("a stored locs column that is not where its header says")
    check, length = described.get("a"), described.get("b")
    digests, digest = described.get("h"), described.get("d")
    if not (isinstance(check, int) and isinstance(length, int) and isinstance(digests, str)
            and isinstance(digest, str)):
        raise ValueError("a stored locs column that its header does not describe")
    return PackedLocs(data, check, length, digests, digest)


def pack(text: str) -> PackedLocs:
    """The locs' text (\x00 between them) as a stream and its digests."""
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    out, check, length, digests = [], zlib.adler32(b""), 0, Digests()
    for start in range(0, len(text), _SLICE):
        data = text[start : start + _SLICE].encode("utf-8", "surrogatepass")
        digests.update(data)
        out.append(packer.compress(data))
        check, length = zlib.adler32(data, check), length + len(data)
    out.append(packer.compress(_SEP))
    out.append(packer.flush(zlib.Z_SYNC_FLUSH))
    check, length = zlib.adler32(_SEP, check), length + 1
    listed, last = digests.finish()
    return PackedLocs(b"".join(out), check, length, listed, last)


class Digests:
    """The chain of digests of a locs text, fed in pieces of any size. With ``expected`` (the
    stored locs'), each full group's digest is compared as it is made: ``ok`` turns False at
    the first that differs, and ``matches`` says at the end whether the whole text is the
    same."""

    __slots__ = ("_done", "_expected", "_filled", "_hasher", "_listed", "ok")

    def __init__(self, expected: PackedLocs | None = None) -> None:
        self._hasher = blake2b(digest_size=16)
        self._filled = 0  # bytes of the current group
        self._listed: list[bytes] = []
        self._done = 0  # full groups
        self._expected = None if expected is None else bytes.fromhex(expected.digests)
        self.ok = True

    def update(self, data: bytes) -> None:
        start = 0
        while len(data) - start >= GROUP - self._filled:
            end = start + GROUP - self._filled
            self._hasher.update(data[start:end])
            digest = self._hasher.digest()
            self._hasher = blake2b(digest_size=16, key=digest)
            self._filled, start = 0, end
            if self._expected is None:
                self._listed.append(digest[:8])
            elif self._expected[self._done * 8 : self._done * 8 + 8] != digest[:8]:
                self.ok = False
            self._done += 1
        if start < len(data):
            self._hasher.update(data[start:] if start else data)
            self._filled += len(data) - start

    def finish(self) -> tuple[str, str]:
        """The full groups' digests (hex, 8 bytes each) and the last group's (hex)."""
        return b"".join(self._listed).hex(), self._hasher.hexdigest()

    def matches(self, expected: PackedLocs) -> bool:
        """Whether the text fed is the one ``expected`` holds (all of it fed)."""
        return (self.ok and self._done * 8 == len(expected.digests) // 2
                and self._hasher.hexdigest() == expected.digest)
