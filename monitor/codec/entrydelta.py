"""An entry-set version stored as what differs from a full one (pure).

A re-check in which 1% of a 50,000-URL document's lastmods moved stored the whole new version
again: ~1 MB for 500 changes, 2,100 bytes a change. A version that lists the same locs in the
same order as a full version (its base) is stored instead as its header and the values of the
positions where any field differs from the base:

    "D" zlib( HEADER \x02 GAPS \x02 LASTMODS \x02 CHANGEFREQS \x02 PRIORITIES \x02 EXTENSIONS )

HEADER is the version's header (``monitor.codec.entryset``) as what differs from the base's: its
first keys as they are (so the first bytes say what a full version's say: ``entryset.head``
reads both), ``"base"`` (the base's row id), the order of its keys, the values that differ,
and of the rule ids the positions whose ids differ (a document with a warning on every entry
has 50,000 of them, the same at every check). GAPS are
the positions, each less the one before (the first less -1); each field column holds the
version's values at those positions (\x01 unset), \x00 between them. A base is always a full
version, so a read is the base and at most one delta: the next version of a document is again a
delta against the same base while that stays smaller than half of a full version, and a full
version (the next base) once it does not.

What a version holds never depends on how it is stored: ``apply`` gives back the full value.
"""

from __future__ import annotations

import json
import zlib
from itertools import compress, count
from operator import ne
from typing import cast

from monitor.codec import columnstream, entryset

__all__ = ["MARK", "Base", "apply", "base_of", "compose", "in_version_1", "is_delta", "make",
           "resolve"]

MARK = b"D"  # a full version is zlib (its first byte 0x78), never this
_LEVEL = 6  # written once, a few KB: level 6 costs nothing here
_SEP = "\x02"
_UNSET = "\x01"
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode


def is_delta(data: bytes) -> bool:
    return data[:1] == MARK


def base_of(delta: bytes) -> int:
    """The row id of the full version a delta is against."""
    header, _rest = _parts(delta)
    return int(cast("int", header["base"]))


# What a delta's read needs of its base besides the value: the base's row id and header, and
# the positions at which the version differs from it (``resolve``; read.digest makes the next
# delta from them without reading the base again).
Base = tuple[int, dict[str, object], list[int]]


def make(base: bytes, new: bytes, base_id: int) -> bytes | None:
    """``new`` (a full version) as a delta against ``base`` (a full version, row ``base_id``),
    or None when it lists other locs or a delta would not be at most half its size."""
    old, now = entryset.unpack(base), entryset.unpack(new)
    if not now.size or old.size != now.size or not entryset.same_locs(old, now):
        return None
    positions: set[int] = set()
    for index in range(1, 5):
        if old.texts[index] != now.texts[index] or old.absent(index) != now.absent(index):
            positions.update(compress(count(), map(ne, old.column(index), now.column(index))))
        if len(positions) * 4 > now.size:  # a quarter moved: the delta would not pay
            return None
    return compose(old.header, now, sorted(positions), base_id, len(new))


def compose(base_header: dict[str, object], now: entryset.Columns, order: list[int],
            base_id: int, size: int) -> bytes | None:
    """The delta of ``now`` (whose stored value is ``size`` bytes) against the full version
    ``base_id`` with that header, from which it differs at most at the positions ``order``
    (ascending; a position of equal values costs its bytes, nothing else); None when it would
    not be at most half of ``size``, or a quarter of the entries differ."""
    if not now.size or len(order) * 4 > now.size:
        return None
    gaps = [str(b - a) for a, b in zip([-1, *order], order, strict=False)]
    texts = []
    for index in range(1, 5):
        values = now.column(index)
        texts.append(columnstream.joined([values[i] for i in order]))
    header = _header_delta(base_header, now.header, base_id)
    text = _SEP.join([_encode(header), "\x00".join(gaps), *texts])
    delta = MARK + zlib.compress(text.encode("utf-8", "surrogatepass"), _LEVEL)
    return delta if len(delta) * 2 <= size else None


def in_version_1(delta: bytes) -> bytes | None:
    """A delta whose header says version 2 (monitor.codec.entryset), saying version 1, so that it
    applies to its base written back in version 1 (migration 0014's downgrade); None when it
    says 1 already."""
    header, rest = _parts(delta)
    if header.get("v") != 2:
        return None
    header["v"] = 1
    text = _SEP.join([_encode(header), *rest])
    return MARK + zlib.compress(text.encode("utf-8", "surrogatepass"), _LEVEL)


def apply(base: bytes, delta: bytes) -> bytes:
    """The full value of the version ``delta`` stands for, given its base's."""
    return entryset.pack(resolve(base, delta)[0])


def resolve(base: bytes, delta: bytes) -> tuple[entryset.Columns, Base]:
    """The columns of the version ``delta`` stands for, as ``entryset.unpack`` of its full
    value gives them (a reader that unpacks what it reads need not pack it first), and
    ``Base``."""
    delta_header, (gaps, *texts) = _parts(delta)
    old = entryset.unpack(base)
    header = _header_of(old.header, delta_header)
    size = old.size
    if header.get("n") != size:
        raise ValueError("a delta against another base: its size differs")
    order: list[int] = []
    position = -1
    for gap in gaps.split("\x00") if gaps else ():
        position += int(gap)
        order.append(position)
    out, absent = [], []
    for index, (name, text) in enumerate(zip(entryset.FIELDS, texts, strict=True), 1):
        # The values as stored (unset ones as _UNSET): a column whose values at the delta's
        # positions are the base's keeps the base's text (the usual delta moves lastmods only)
        values = text.split("\x00") if order else []
        was, gone = old.texts[index], old.absent(index)
        parts = [_UNSET] * size if gone else was.split("\x00")
        if [parts[i] for i in order] != values:
            for i, value in zip(order, values, strict=True):
                parts[i] = value
            gone = parts.count(_UNSET) == size
            was = "" if gone else "\x00".join(parts)
        out.append(was)
        if gone:
            absent.append(name)
    if sorted(absent) != sorted(cast("list[str]", header.get("absent") or [])):
        raise ValueError("a delta whose absent columns are not what it gives")
    base_id = int(cast("int", delta_header["base"]))
    columns = entryset.Columns(header, [old.texts[0], *out], old.packed, old.pending, old.tail)
    return columns, (base_id, old.header, order)


_FIRST = ("v", "verdicts", "n", "balance")  # what entryset.head reads, at the start


def _header_delta(old: dict[str, object], new: dict[str, object], base_id: int,
                  ) -> dict[str, object]:
    """The new header as what differs from the base's: the keys in their order, the values
    that differ, and of the rule ids (one per entry with a warning: often most entries) the
    positions whose ids differ."""
    out: dict[str, object] = {key: new[key] for key in _FIRST if key in new}
    out["base"] = base_id
    out["keys"] = list(new)
    out["set"] = {key: value for key, value in new.items()
                  if key not in _FIRST and key != "rules" and old.get(key) != value}
    rules = cast("dict[str, str]", new.get("rules") or {})
    before = cast("dict[str, str]", old.get("rules") or {})
    if list(rules) != sorted(rules, key=int):  # not in position order: kept whole
        cast("dict[str, object]", out["set"])["rules"] = rules
    elif rules != before:
        out["rules"] = {i: ids for i, ids in rules.items() if before.get(i) != ids}
        out["gone"] = [i for i in before if i not in rules]
    return out


def _header_of(old: dict[str, object], delta: dict[str, object]) -> dict[str, object]:
    """``_header_delta``'s header, given the base's."""
    changed = cast("dict[str, object]", delta["set"])
    rules = cast("dict[str, str]", old.get("rules") or {})
    if "rules" in delta:
        gone = set(cast("list[str]", delta["gone"]))
        merged = {i: ids for i, ids in rules.items() if i not in gone}
        merged.update(cast("dict[str, str]", delta["rules"]))
        rules = dict(sorted(merged.items(), key=lambda item: int(item[0])))
    header: dict[str, object] = {}
    for key in cast("list[str]", delta["keys"]):
        if key in _FIRST:
            header[key] = delta[key]
        elif key in changed:
            header[key] = changed[key]
        elif key == "rules":
            header[key] = rules
        else:
            header[key] = old[key]
    return header


def _parts(delta: bytes) -> tuple[dict[str, object], list[str]]:
    if not is_delta(delta):
        raise ValueError("not a delta of an entry set")
    header_text, *rest = zlib.decompress(delta[1:]).decode("utf-8", "surrogatepass").split(_SEP)
    header = json.loads(header_text)
    if not isinstance(header, dict) or "base" not in header or len(rest) != 5:
        raise ValueError("not a delta of an entry set")
    return header, rest
