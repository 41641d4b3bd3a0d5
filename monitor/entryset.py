"""One document's entries as one compressed value: how entry versions are stored (pure).

A document of 50,000 URLs is one row of the ``entry_sets`` table, not 50,000 rows: writing a
row per URL was half of a first check's time. The value is zlib-compressed UTF-8 text in
columns, so that encoding and decoding are a few joins and splits in C:

    HEADER \x02 LOCS \x02 LASTMODS \x02 CHANGEFREQS \x02 PRIORITIES \x02 EXTENSIONS

HEADER is JSON: ``{"v": 1, "n": entries, "invalid": [positions], "rules": {"position": "rule
ids"}, "absent": [names of columns without any value]}``. Each column joins its values (in
document order) with \x00, an unset value being \x01. None of \x00-\x02 can occur in an XML
document's text, nor in extension data (JSON escapes them); the parser replaces them in text
sitemaps. Not pickle or marshal: the database is not trusted to run code, and any tool can read
the history.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import cast

from monitor.model import EntryState, entry_state

__all__ = ["EntrySet", "Row", "decode", "encode", "loc_hash", "loc_hashes", "locs", "rows"]

VERSION = 1
_LEVEL = 1  # zlib: level 1 compresses a sitemap's columns ~5x fast; 6 is 3x slower for 15%
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode
_FIELDS = ("lastmod", "changefreq", "priority", "extensions")
_GETTERS = tuple(attrgetter(name) for name in _FIELDS)
_SEP = "\x02"  # between the header and the columns
_SEP_BYTES = _SEP.encode()
_UNSET = "\x01"  # a value that is not set (None)



@dataclass(slots=True)
class EntrySet:
    """The entries of one document version: loc -> state, and loc -> rule ids where any."""

    states: dict[str, EntryState]
    rules: dict[str, str]


def encode(states: Mapping[str, EntryState], rules: Mapping[str, str]) -> bytes:
    """The stored form of one document's entries (in their order)."""
    values = list(states.values())
    header: dict[str, object] = {
        "v": VERSION,
        "n": len(values),
        "invalid": [i for i, state in enumerate(values) if not state.valid],
    }
    columns: list[list[str | None]] = [list(map(getter, values)) for getter in _GETTERS]
    absent = [name for name, column in zip(_FIELDS, columns, strict=True)
              if all(v is None for v in column)]
    if absent:  # a column without any value (extensions, usually) is not stored at all
        header["absent"] = absent
    if rules:
        position = {loc: i for i, loc in enumerate(states)}
        header["rules"] = {str(position[loc]): ids for loc, ids in rules.items()
                           if loc in position}
    # One column at a time into the compressor: never the whole text in memory at once.
    packer = zlib.compressobj(_LEVEL)
    out = [packer.compress(_encode(header).encode("utf-8", "surrogatepass"))]
    for text in _column_texts(states, columns, absent):
        out.append(packer.compress(_SEP_BYTES))
        out.append(packer.compress(text.encode("utf-8", "surrogatepass")))
    out.append(packer.flush())
    return b"".join(out)


def _column_texts(
    states: Mapping[str, EntryState], columns: list[list[str | None]], absent: list[str]
) -> Iterator[str]:
    yield "\x00".join(states)
    for name, column in zip(_FIELDS, columns, strict=True):
        yield "" if name in absent else "\x00".join([_UNSET if v is None else v for v in column])


def _load(blob: bytes) -> tuple[dict[str, object], list[str]]:
    header_text, *columns = zlib.decompress(blob).decode("utf-8", "surrogatepass").split(_SEP)
    header = json.loads(header_text)
    if not isinstance(header, dict) or header.get("v") != VERSION or len(columns) != 5:
        raise ValueError(f"not an entry set of version {VERSION}")
    return header, columns


def _column(text: str, size: int, absent: bool) -> list[str | None]:
    if absent or size == 0:
        return [None] * size
    return [None if v == _UNSET else v for v in text.split("\x00")]


Row = tuple[str | None, str | None, str | None, str | None, bool]


def _rows(blob: bytes) -> tuple[list[str], list[Row], dict[str, str]]:
    """The locs, their rows (lastmod, changefreq, priority, extensions, valid), the rules."""
    header, columns = _load(blob)
    size = cast("int", header["n"])
    loc = columns[0].split("\x00") if size else []
    absent = set(cast("list[str]", header.get("absent") or []))
    lastmods, changefreqs, priorities, extensionss = (
        _column(text, size, name in absent)
        for name, text in zip(_FIELDS, columns[1:], strict=True)
    )
    invalid = set(cast("list[int]", header["invalid"]))
    valid = [i not in invalid for i in range(size)]
    found = list(zip(lastmods, changefreqs, priorities, extensionss, valid, strict=True))
    raw_rules = cast("dict[str, str]", header.get("rules") or {})
    return loc, found, {loc[int(i)]: ids for i, ids in raw_rules.items()}


def decode(blob: bytes) -> EntrySet:
    """The entries of a stored document version."""
    loc, found, rules = _rows(blob)
    shared: dict[Row, EntryState] = {}
    states: dict[str, EntryState] = {}
    for key, row in zip(loc, found, strict=True):
        state = shared.get(row)
        if state is None:
            state = entry_state(*row)
            if len(shared) < 10_000:
                shared[row] = state
        states[key] = state
    return EntrySet(states, rules)


def rows(blob: bytes) -> dict[str, Row]:
    """loc -> (lastmod, changefreq, priority, extensions, valid) of a stored version, in
    order: plain tuples, built in C, for comparing without an EntryState per entry."""
    loc, found, _ = _rows(blob)
    return dict(zip(loc, found, strict=True))


def locs(blob: bytes) -> list[str]:
    """Just the locs of a stored document version (valid or not), in order."""
    header, columns = _load(blob)
    return columns[0].split("\x00") if header["n"] else []


def loc_hashes(locs: Iterable[str]) -> list[int]:
    """A 60-bit fingerprint of each loc (CRC-32 and Adler-32), equal in every process.

    ``hash()`` is salted per process. Duplicates across a target's documents are found by these
    fingerprints (a set of 500,000 of them takes a fraction of the locs' memory) and every hit
    is confirmed against the real locs, so a chance collision costs time, never a wrong answer.
    60 bits, not 64: an int below 2**60 has two 30-bit digits and takes 32 bytes, not 40.
    """
    crc, adler = zlib.crc32, zlib.adler32
    return [crc(b) << 28 ^ adler(b) for b in (loc.encode("utf-8", "surrogatepass") for loc in locs)]


def loc_hash(loc: str) -> int:
    """The fingerprint of one loc (see ``loc_hashes``)."""
    return loc_hashes((loc,))[0]
