"""Who names whom: the hreflang alternates of entries, as the parser writes them, as
fingerprint pairs and their sums (pure).

An entry's alternates are the first key of its extensions' canonical JSON, each item exactly
``{"href":"...","hreflang":"..."}``: the patterns here read them without ``json.loads``
(monitor.read.extensions judges them by the same patterns). ``hreflang-not-reciprocal`` is the
target's (monitor.check.reciprocity): here are its pieces, the alternates of each entry as
fingerprint pairs (``edges``), their sums (``balance``), and ``Alternates``, which finds the
"A names B" that B does not answer.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Sequence
from itertools import accumulate, compress, islice
from operator import itemgetter, methodcaller, mul, ne, sub
from typing import Any

from monitor.codec.fingerprints import loc_hashes
from monitor.core.model import Links

__all__ = ["ALTERNATE", "ALTERNATES", "ENDS", "MASK", "Alternates", "balance", "balance_of",
           "edges", "edges_of", "hrefs", "links_balance", "pair_keys", "pairs_of", "unescape"]

_STRING = r'"([^"\\]*(?:\\.[^"\\]*)*)"'
_ITEM = r'\{"href":"[^"\\]*(?:\\.[^"\\]*)*","hreflang":"[^"\\]*(?:\\.[^"\\]*)*"\}'
# The alternates that open an entry's extensions (group 1: their items), and one item's href
# and hreflang, JSON-escaped: the parser's shape, each item exactly these two keys.
ALTERNATES = re.compile(r'\{"alternates":\[(' + _ITEM + "(?:," + _ITEM + r")*)\]")
ALTERNATE = re.compile(r'\{"href":' + _STRING + ',"hreflang":' + _STRING + r"\}")
MASK = (1 << 64) - 1  # balances are sums mod 2^64 (``balance``)
ENDS = methodcaller("count", "\x00")  # the entries a piece of extensions joined by \x00 ends


def unescape(text: str) -> str:
    """A string as the pattern read it, JSON escapes resolved (rare: quotes, non-ASCII)."""
    return json.loads(f'"{text}"') if "\\" in text else text


def pairs_of(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(href, hreflang) of each alternate of decoded extensions, "" for a missing one."""
    return [(str(item.get("href", "")), str(item.get("hreflang", "")))
            for item in data.get("alternates") or [] if isinstance(item, dict)]


def hrefs(ext: str) -> list[str]:
    """The distinct URLs an entry's complete alternates name, in order."""
    match = ALTERNATES.match(ext) if ext.startswith('{"alternates":') else None
    if match is not None:
        found = [unescape(href) for href, code in ALTERNATE.findall(match.group(1))
                 if href and code]
    elif '"alternates":' in ext:
        found = [href for href, code in pairs_of(json.loads(ext)) if href and code]
    else:
        return []
    return list(dict.fromkeys(found))


_BEFORE_CODE = methodcaller("partition", '","hreflang":"')
_SCAN = re.compile(r'(\x00)|\{"href":"([^"\\]*(?:\\.[^"\\]*)*)","hreflang":"(?:[^"\\]|\\.)')


def _scan(text: str) -> list[tuple[int, str]]:
    """(entry, href) of every complete alternate in extensions joined by \x00."""
    found, i = [], 0
    for end, href in _SCAN.findall(text):
        if end:
            i += 1
        elif href:
            found.append((i, href))
    return found


def edges(locs: Sequence[str], exts: Sequence[str | None],
          ) -> tuple[array[int], array[int], array[int]]:
    """Every "A names B" of a document (B another URL than A, each once): the position of A,
    and the fingerprints (``fingerprints.loc_hash``) of A and of B, as three compact arrays."""
    return edges_of(locs, "\x00".join([ext or "" for ext in exts]))


def edges_of(locs: Sequence[str], text: str, hashes: Sequence[int] | None = None,
             ) -> tuple[array[int], array[int], array[int]]:
    """``edges`` of the extensions joined by \x00 (as an entry set's column stores them),
    with the locs' fingerprints if known. Splits of the text find every complete alternate
    (an item shaped ``{"href":...,"hreflang":...}``) and where each entry ends: a few steps
    in C an alternate, no search an entry."""
    if "\\" in text:  # a JSON escape (rare): read each URL it stands for
        found = [(i, unescape(href)) for i, href in _scan(text)]
    else:  # split at each href: each piece starts with one, and holds the \x00 of the
        # entries it ends
        pieces = text.split('{"href":"')
        entry = accumulate(map(ENDS, pieces))
        parts = map(_BEFORE_CODE, islice(pieces, 1, None))
        if '"href":""' in text or '"hreflang":""' in text:  # incomplete ones: left out
            found = [(i, href) for i, (href, _, code) in zip(entry, parts, strict=False)
                     if href and code[:1] != '"']
        else:
            found = list(zip(entry, map(itemgetter(0), parts), strict=False))
    return _edges(locs, list(map(itemgetter(0), found)), list(map(itemgetter(1), found)), hashes)


def _edges(locs: Sequence[str], positions: Sequence[int], hrefs: Sequence[str],
           hashes: Sequence[int] | None) -> tuple[array[int], array[int], array[int]]:
    """``edges_of`` from the entry and URL of each complete alternate (two columns): those
    that name another URL than their entry's, each (entry, URL) once, in order."""
    others = list(map(ne, hrefs, map(locs.__getitem__, positions)))
    pairs = list(dict.fromkeys(zip(compress(positions, others), compress(hrefs, others),
                                   strict=True)))
    where = array("I", map(itemgetter(0), pairs))
    named = list(map(itemgetter(1), pairs))
    if hashes is None:
        namers = array("Q", loc_hashes(map(locs.__getitem__, where)))
    else:
        namers = array("Q", map(hashes.__getitem__, where))
    return where, namers, array("Q", loc_hashes(named))


def pair_keys(first: Sequence[int], second: Sequence[int]) -> array[int]:
    """A 64-bit fingerprint of each ordered pair (a, b): a^2 * b mod 2^64. Not symmetric, and
    not a sum of a part of a and a part of b, so ``balance``'s sums do not cancel over a
    cycle (A names B names C names A) as they would for such a part-wise function."""
    return array("Q", [a * a * b & MASK for a, b in zip(first, second, strict=True)])


def balance(locs: Sequence[str], exts: Sequence[str | None]) -> int:
    """Sum over a document's "A names B" of key(A, B) - key(B, A), mod 2^64 (``pair_keys``).

    Over a whole target the sum is 0 when every "A names B" has its "B names A" (the usual
    site): then no alternate is unanswered, and nothing more is looked at. Otherwise (or by a
    chance of about 2**-64) the target is checked pair by pair (monitor.check.reciprocity).
    """
    return balance_of(locs, "\x00".join([ext or "" for ext in exts]))


def balance_of(locs: Sequence[str], text: str, hashes: Sequence[int] | None = None, *,
               chunk: int = 5000) -> int:
    """``balance`` of the extensions joined by \x00 (``edges_of``), ``chunk`` entries at a
    time: the splits of a whole column would hold its text twice over (35 MB more at the peak
    of a 50,000-URL child with hreflang and images)."""
    if '{"href":"' not in text:
        return 0
    total, first, start, size = 0, 0, 0, len(locs)
    while first < size:
        last, end = min(first + chunk, size), start
        for _ in range(last - first):
            end = text.find("\x00", end) + 1
            if end == 0:
                end = len(text) + 1
                break
        part = text[start : end - 1]
        if '{"href":"' in part:
            _, a, b = edges_of(locs[first:last], part,
                               None if hashes is None else hashes[first:last])
            total += _balance(a, b)
        first, start = last, end
    return int(total) & MASK


def links_balance(locs: Sequence[str], links: Links, hashes: Sequence[int] | None = None,
                  ) -> int:
    """``balance`` of a batch from the parser's alternates (``Links``): what ``balance_of``
    says of the batch's extensions joined, without reading them again."""
    owners, hrefs, codes = links.owners, links.hrefs, links.codes
    if not owners:
        return 0
    if "" in hrefs or "" in codes:  # incomplete ones: left out, as edges_of does
        complete = list(map(all, zip(hrefs, codes, strict=True)))
        owners, hrefs = list(compress(owners, complete)), list(compress(hrefs, complete))
    _, a, b = _edges(locs, owners, hrefs, hashes)
    return _balance(a, b) & MASK


def _balance(namers: Sequence[int], named: Sequence[int]) -> int:
    """The sum of key(A, B) - key(B, A) over these "A names B" (``pair_keys``), unreduced:
    a^2 b - b^2 a, as a b (a - b)."""
    return int(sum(map(mul, map(mul, namers, named), map(sub, namers, named))))


class Alternates:
    """Every "A names B" of a target's documents, to find those B does not answer.

    Compact arrays, as ``fingerprints.Fingerprints`` holds locs: 8 bytes a URL (its fingerprint) and
    28 an alternate to another URL (A's position, 4; A's and B's fingerprints and the pair's
    key, 8 each). 500,000 URLs with two such alternates each: 32 MB, against ~250 MB for sets
    of the URL strings. Only documents' arrays are held, never a document's entries.
    """

    def __init__(self) -> None:
        self._locs: list[array[int]] = []
        self._keys: list[array[int]] = []
        self._docs: list[tuple[str, array[int], array[int], array[int]]] = []

    def add(self, url: str, locs: Sequence[str], exts: Sequence[str | None]) -> None:
        """Take one document's entries (its locs and extensions columns)."""
        self._locs.append(array("Q", loc_hashes(locs)))
        where, namers, named = edges(locs, exts)
        if where:
            self._docs.append((url, where, namers, named))
            self._keys.append(pair_keys(namers, named))

    def unanswered(self) -> dict[str, set[int]]:
        """Document -> positions of the entries that name a URL of the target which does not
        name them back (``hreflang-not-reciprocal``). Each document's wanted answers are a set
        of its own size, looked for in every document's keys in C (as Fingerprints.hits)."""
        found: dict[str, set[int]] = {}
        for url, where, namers, named in self._docs:
            wanted = set(named)
            listed: set[int] = set()
            for held in self._locs:
                listed |= wanted.intersection(held)
            answers = pair_keys(named, namers)
            expected = {key for key, b in zip(answers, named, strict=True) if b in listed}
            answered: set[int] = set()
            for keys in self._keys:
                answered |= expected.intersection(keys)
            positions = {i for i, key, b in zip(where, answers, named, strict=True)
                         if b in listed and key not in answered}
            if positions:
                found[url] = positions
        return found
