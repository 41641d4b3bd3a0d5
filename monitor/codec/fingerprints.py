"""Which pages a check's documents list: 60-bit fingerprints of locs, and an index of every
fingerprint a check has read (pure).

A check finds a URL that two of its documents list (``loc-duplicate``) and the alternates
that a target's URLs do not answer (monitor.read.alternates) by fingerprints, not by the locs
themselves: 8 bytes a loc against a string's 60 or more, equal in every process (the worker
processes' too). A fingerprint names a page (``model.page``), so that two locs that differ only
by a ``#fragment`` or the case of an escape are one; every hit is confirmed against the real
locs, so a chance collision costs time, never a wrong answer.
"""

from __future__ import annotations

import zlib
from array import array
from bisect import bisect_left
from collections.abc import Collection, Iterable
from itertools import pairwise, repeat
from operator import rshift

from monitor.codec import entryset
from monitor.core.model import own_pages, page

__all__ = ["Fingerprints", "fingerprints", "loc_hash", "loc_hashes", "pages_listed"]


def pages_listed(blob: bytes, new: Collection[str]) -> set[str]:
    """The locs among ``new`` whose page a stored document version lists (as its loc, or with
    another #fragment or escapes in another case): how a re-read document's new locs are
    found in a document that was not read again."""
    by_page: dict[str, list[str]] = {}
    for loc in new:
        by_page.setdefault(page(loc), []).append(loc)
    listed = entryset.locs(blob)
    pages = listed if own_pages(listed) else map(page, listed)
    return {loc for found in by_page.keys() & pages for loc in by_page[found]}


def loc_hashes(locs: Iterable[str]) -> list[int]:
    """A 60-bit fingerprint of the page each loc names (CRC-32 and Adler-32 of
    ``model.page(loc)``), equal in every process.

    ``hash()`` is salted per process. Duplicates across a target's documents are found by these
    fingerprints (``Fingerprints``: 8 bytes a loc, a fraction of the locs' memory) and every
    hit is confirmed against the real locs' pages, so a chance collision costs time, never a
    wrong answer. Of the page, not the loc: two locs that differ only by a ``#fragment`` or by
    the case of a percent-escape are one page, whichever documents list them. 60 bits, not 64:
    an int below 2**60 has two 30-bit digits and takes 32 bytes, not 40; and ``Fingerprints``
    buckets them by their top 10 bits.
    """
    crc, adler = zlib.crc32, zlib.adler32
    listed = locs if isinstance(locs, list) else list(locs)
    if not own_pages(listed):
        listed = list(map(page, listed))
    return [crc(b) << 28 ^ adler(b)
            for b in (loc.encode("utf-8", "surrogatepass") for loc in listed)]


class Fingerprints:
    """The fingerprints (``loc_hashes``) of every loc a check has read, to find which locs of a
    document name a page an earlier document listed: 8 bytes each, however many documents.

    As one set, 500,000 fingerprints would take 32 MB (an int object and two slots each); as
    the arrays they arrive in, 4 MB. The latest ``arrays`` documents' are held as those arrays
    (an index of up to that many documents holds nothing else), and a new document's, as a set
    of its own size, is looked for in each of them in C: O(the fingerprints held) per
    document, ~0.02 s more in all than one set for an index of 10 x 50,000 URLs. One more, and
    they are folded into a sorted run: ``_BUCKETS`` sorted arrays by the fingerprints' top
    bits, in which a document's fingerprints are looked for by bisection, O(its own size x
    log of the bucket's). A run not more than twice the size of the next is merged with it,
    bucket by bucket (so that merging never holds more than a bucket twice): each run is more
    than twice the next, and a document meets only a few of them. Fingerprints are below 2**60,
    as ``loc_hashes`` makes them.
    """

    def __init__(self, arrays: int = 16) -> None:
        self._most = arrays
        self._arrays: list[array[int]] = []
        self._runs: list[list[array[int]]] = []  # largest first; see _run
        self._sizes: list[int] = []  # fingerprints in each run
        self._later: list[bytes] = []  # entry sets whose fingerprints are not worked out yet

    def __bool__(self) -> bool:
        """Whether any document's fingerprints are held (or wait in ``add_later``)."""
        return bool(self._arrays or self._later or self._runs)

    @property
    def held(self) -> int:
        """The fingerprints held, worked out (8 bytes each; not those in ``add_later``)."""
        return sum(map(len, self._arrays)) + sum(self._sizes)

    def add_later(self, entry_set: bytes) -> None:
        """Hold a document's fingerprints as its stored entry set (``encode``'s bytes): they are
        worked out only if another document is checked against them (``settle``). A check
        that reads one document alone never needs them."""
        self._later.append(entry_set)

    @property
    def unsettled(self) -> bool:
        """Whether fingerprints wait in ``add_later``."""
        return bool(self._later)

    def settle(self) -> None:
        """Work out the fingerprints held by ``add_later`` (``hits`` does it when it must; a
        caller may do it first in a thread of its own)."""
        later, self._later = self._later, []
        for entry_set in later:
            self.add(fingerprints(entry_set))

    def hits(self, hashes: array[int]) -> set[int]:
        """The fingerprints among ``hashes`` that were added before."""
        if self._later:
            self.settle()
        if not self._arrays and not self._runs:  # the first document: nothing to look in
            return set()
        new = set(hashes)
        found: set[int] = set()
        for held in self._arrays:
            if not new.isdisjoint(held):
                found |= new.intersection(held)
        for run in self._runs:
            # Each fingerprint's bucket, its place there (the sentinel ends every bucket, so
            # there is always a value at it) and that value: one of ``new`` only if it is
            # held. All in C: map, not a loop of Python.
            buckets = list(map(run.__getitem__, map(rshift, hashes, repeat(_SHIFT))))
            found |= new.intersection(map(_at, buckets, map(bisect_left, buckets, hashes)))
        return found

    def add(self, hashes: array[int]) -> None:
        """Hold a document's fingerprints (the array is kept as it is: not to be changed)."""
        self._arrays.append(hashes)
        if len(self._arrays) <= self._most:
            return
        arrays, self._arrays = self._arrays, []
        self._sizes.append(sum(map(len, arrays)))
        self._runs.append(_run(arrays))  # empties arrays as it goes
        while len(self._runs) > 1 and self._sizes[-2] <= 2 * self._sizes[-1]:
            newer, size = self._runs.pop(), self._sizes.pop()
            _merge(self._runs[-1], newer)
            self._sizes[-1] += size


_SHIFT = 50  # a fingerprint's bucket in a run: its top 10 bits (they are below 2**60)
_BUCKETS = 1 << (60 - _SHIFT)
_BOUNDS = [bucket << _SHIFT for bucket in range(_BUCKETS + 1)]
_SENTINEL = 2**64 - 1  # above every fingerprint: ends each bucket of a run
_at = array.__getitem__


def _run(arrays: list[array[int]]) -> list[array[int]]:
    """Fingerprints as a run (``Fingerprints``): per bucket, a sorted array ending in
    ``_SENTINEL``. The arrays are sorted one at a time and cut at the buckets' bounds."""
    run = [array("Q") for _ in range(_BUCKETS)]
    while arrays:
        values = array("Q", sorted(arrays.pop()))
        cuts = list(map(bisect_left, repeat(values), _BOUNDS))
        for bucket, (start, end) in zip(run, pairwise(cuts), strict=True):
            if start != end:
                bucket += values[start:end]
    for i, bucket in enumerate(run):
        run[i] = _sorted(bucket)
    return run


def _sorted(values: array[int]) -> array[int]:
    """A bucket of a run: these values sorted, then ``_SENTINEL`` (no room to spare)."""
    ordered = sorted(values)
    ordered.append(_SENTINEL)
    return array("Q", ordered)


def _merge(run: list[array[int]], other: list[array[int]]) -> None:
    """Merge ``other`` into ``run``, bucket by bucket, emptying ``other`` as it goes."""
    for i, bucket in enumerate(run):
        more = other[i]
        other[i] = _EMPTY
        if len(more) > 1:
            run[i] = _sorted(bucket[:-1] + more[:-1])


_EMPTY = array("Q")


def fingerprints(blob: bytes) -> array[int]:
    """The ``loc_hashes`` of a stored document version's locs, as ``Fingerprints`` holds them."""
    return array("Q", loc_hashes(entryset.locs(blob)))


def loc_hash(loc: str) -> int:
    """The fingerprint of the page one loc names (see ``loc_hashes``)."""
    return loc_hashes((loc,))[0]
