"""A re-check's ``changed`` changes as packs: one ``changes`` row per up to ``MEMBERS`` of
them, holding only what the new entry set cannot give back (pure).

A CMS that stamps "now" on every lastmod makes 500,000 ``changed`` changes at every check of a
500,000-URL index. As one row each (loc, the state before and after as JSON) they were ~320 bytes a
change on SQLite, 162 MB a check, and writing them was half of the check's time. Yet the loc and the
state after are in the entry-set version the same check stores for that document: a member of
a pack is the entry's position in that version and the state before (or nothing else, when
the version before holds it at the same position).

    PACK = zlib( GAP \x00 GAP \x00 ... [ \x02 BEFORE \x01 BEFORE \x01 ... ] )

GAP is a member's position less the previous member's (the first's less -1), in decimal,
BEFORE its state's JSON (``changerows.state_json``), in the members' order. A re-read
document's locs are the stored ones, at the same positions: its packs hold no BEFORE, which
is the state at the same position of the version the new one replaced (the row's
``before_set_id``). A change the version does not give back exactly (its loc is not there, or
its state there is not the change's after) is not packed: it stays a row of its own, so a pack
never says anything its row would not have.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence, Set
from itertools import accumulate
from operator import sub

from monitor.codec import entryset
from monitor.codec.changerows import Row, state_json

__all__ = ["MEMBERS", "Member", "Packed", "Packer", "Version", "at_positions", "holding", "pack",
           "rows", "split", "unpack"]

MEMBERS = 5000  # per pack: a page of a listing decompresses one pack, ~100 KB of text
# Measured on the every-lastmod re-check of a 500,000-URL index, bytes a member and CPU a
# 50,000-member document: level 1 13.0 B and 18 ms, 3 10.8 B and 27 ms, 6 9.3 B and 58 ms.
_LEVEL = 3

# The position in the entry-set version, and the state before; None: the state at the same
# position of the version before (a pack of a re-read document, whose locs did not move).
Member = tuple[int, str | None]


class Version:
    """The entries of one stored entry-set version as the states a change row holds."""

    def __init__(self, data: bytes | entryset.Columns) -> None:
        stored = entryset.unpack(data) if isinstance(data, bytes) else data
        self.locs = stored.locs()
        self._fields = [stored.column(i) for i in range(1, 5)]
        self._invalid = stored.invalid()
        self._where: dict[str, int] | None = None

    def state(self, position: int) -> str:
        """The JSON of the entry at ``position``, as a change's ``after`` holds it."""
        lastmod, changefreq, priority, extensions = (f[position] for f in self._fields)
        return state_json(lastmod, changefreq, priority, extensions,
                          position not in self._invalid)

    def changes(self, members: Iterable[Member], before: Version | None = None,
                kind: str = "changed") -> list[tuple[str, str | None, str | None]]:
        """(loc, before, after) of each member of a pack of ``kind`` that points into this
        version; a ``changed`` member without its state before takes it from ``before``, the
        version this one replaced. An ``added`` member's state here is its after, a
        ``removed`` one's (this version is the one its check replaced) its before."""
        if kind == "added":
            return [(self.locs[p], None, self.state(p)) for p, _was in members]
        if kind == "removed":
            return [(self.locs[p], self.state(p), None) for p, _was in members]
        out: list[tuple[str, str | None, str | None]] = []
        for position, was in members:
            if was is None:
                if before is None:
                    raise ValueError("a pack of positions read without the version before")
                was = before.state(position)
            out.append((self.locs[position], was, self.state(position)))
        return out

    def position(self, loc: str) -> int | None:
        if self._where is None:
            self._where = {loc: i for i, loc in enumerate(self.locs)}
        return self._where.get(loc)


def holding(loc_text: str, q: str) -> list[int]:
    """The positions, in order, of the locs (``loc_text``: joined by \x00, as a version holds
    them) that hold ``q`` (lower case), case aside: one search of the whole text, not a
    ``lower()`` and a search a loc (a search of a 20,000-URL version's packs took 40,000)."""
    if not q or "\x00" in q:  # no loc holds a \x00
        return []
    text = loc_text.lower()  # a \x00 is neither cased nor case-ignorable: each loc as alone
    found: list[int] = []
    position, counted = 0, 0
    at = text.find(q)
    while at >= 0:
        position += text.count("\x00", counted, at)
        found.append(position)
        end = text.find("\x00", at + len(q))  # the end of this loc: its other hits count once
        if end < 0:
            break
        counted, at = end, text.find(q, end + 1)
    return found


def split(rows: Iterable[Row], data: bytes) -> Iterator[Row | Packed]:
    """The rows in order, each ``changed`` one that the entry-set version ``data`` gives back
    folded into a pack; a pack comes out when it is full, and the last one at the end. The
    version is read only if a ``changed`` row comes."""
    version: Version | None = None
    packer = Packer()
    for row in rows:
        kind, loc, before, after, rule = row
        if kind != "changed" or rule is not None:
            yield row
            continue
        if version is None:
            version = Version(data)
        position = version.position(loc)
        if position is None or after != version.state(position):
            yield row
        elif (full := packer.add(position, loc, before)) is not None:
            yield full
    yield from packer.finish()


# A pack as stored: its first member's loc, its members, its value, and whether its members
# take their states before from the version before (``Member``).
Packed = tuple[str, int, bytes, bool]


class Packer:
    """Members a change at a time, packed ``MEMBERS`` at a time; ``positional``: members
    without their states before (``Member``). The positions and the states before are held as
    two lists, not a tuple a member (a re-read in which every lastmod moved packs 50,000 of
    them a document)."""

    __slots__ = ("_befores", "_first", "_positional", "_positions")

    def __init__(self, *, positional: bool = False) -> None:
        self._first = ""
        self._positions: list[int] = []
        self._befores: list[str | None] = []  # empty when positional
        self._positional = positional

    def add(self, position: int, loc: str, before: str | None) -> Packed | None:
        """The next member; the pack it fills, if it fills one."""
        if not self._positions:
            self._first = loc
        self._positions.append(position)
        if not self._positional:
            self._befores.append(before)
        return self._take() if len(self._positions) == MEMBERS else None

    def extend(self, positions: Sequence[int], loc: Callable[[int], str]) -> list[Packed]:
        """``add`` of positional members, without their states before: the packs they fill.
        ``loc(k)`` is the ``k``-th member's loc (a pack keeps its first member's only)."""
        assert self._positional
        filled, done = [], 0
        while done < len(positions):
            if not self._positions:
                self._first = loc(done)
            room = MEMBERS - len(self._positions)
            self._positions += positions[done : done + room]
            done += room
            if len(self._positions) == MEMBERS:
                filled.append(self._take())
        return filled

    def finish(self) -> list[Packed]:
        """The last pack, if any members are left."""
        return [self._take()] if self._positions else []

    def _take(self) -> Packed:
        positions, befores = self._positions, self._befores
        self._positions, self._befores = [], []
        return self._first, len(positions), _pack(positions, befores), self._positional


def rows(packs: Iterable[Packed], data: bytes, before: bytes | None = None) -> Iterator[Row]:
    """The rows that packs pointing into the entry-set version ``data`` stand for, in order
    (``before``: the version it replaced, for positional packs)."""
    version = Version(data)
    previous = None if before is None else Version(before)
    for _loc, _members, value, _positional in packs:
        for loc, was, after in version.changes(unpack(value), previous):
            yield "changed", loc, was, after, None


def pack(members: list[Member]) -> bytes:
    """The stored value of a pack's members: their gaps, then (unless every member lacks it)
    their states before."""
    return _pack([position for position, _before in members],
                 [before for _position, before in members])


def _pack(positions: list[int], befores: list[str | None]) -> bytes:
    """``pack`` of the members at ``positions`` with these states before (none: all lack it)."""
    n = len(positions)
    if n > 1 and positions == list(range(positions[0], positions[0] + n)):
        # A run (a re-read in which every entry changed): the same gaps, without a string a
        # member (3.6 ms of a 50,000-member document)
        text = f"{positions[0] + 1}" + "\x001" * (n - 1)
    else:
        text = "\x00".join(map(str, map(sub, positions, [-1, *positions])))
    if befores.count(None) != len(befores):
        text += "\x02" + "\x01".join([before or "" for before in befores])
    return zlib.compress(text.encode(), _LEVEL)


def at_positions(data: bytes, positions: Set[int]) -> dict[int, Member]:
    """``unpack``'s members at these positions, by their places in the pack: a search lists a
    few members of a pack, and a pack of additions or removals is mostly a run of positions,
    whose places need no member built (a tuple a member was most of a search's time)."""
    gaps, *befores = zlib.decompress(data).decode().split("\x02")
    if not gaps:
        return {}
    if not befores:
        first, _, rest = gaps.partition("\x00")
        start, size = int(first) - 1, rest.count("\x00") + 1 + (first != gaps)
        if size > 1 and rest == "1" + "\x001" * (size - 2):  # as ``_pack`` writes a run
            return {p - start: (p, None) for p in positions if start <= p < start + size}
    found: dict[int, Member] = {}
    places = accumulate(map(int, gaps.split("\x00")), initial=-1)
    next(places)
    states = befores[0].split("\x01") if befores else None
    for place, position in enumerate(places):
        if position in positions:
            found[place] = (position, None if states is None else states[place] or None)
    return found


def unpack(data: bytes) -> list[Member]:
    """``pack``'s members, in order."""
    gaps, *befores = zlib.decompress(data).decode().split("\x02")
    if not gaps:
        return []
    positions = accumulate(map(int, gaps.split("\x00")), initial=-1)
    next(positions)
    if not befores:
        return [(position, None) for position in positions]
    return [(position, before or None)
            for position, before in zip(positions, befores[0].split("\x01"), strict=True)]
