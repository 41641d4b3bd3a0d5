"""One document's entries as one compressed value: how entry versions are stored (pure).

A document of 50,000 URLs is one row of the ``entry_sets`` table, not 50,000 rows: writing a
row per URL was half of a first check's time. The value is zlib-compressed JSON in columns
(one list per attribute, in document order), so that encoding and decoding stay in C:

    {"v": 1, "loc": [...], "lastmod": [...], "changefreq": [...], "priority": [...],
     "extensions": [...], "invalid": [positions], "rules": {"position": "rule ids"}}

JSON rather than pickle or marshal: the database is not trusted to run code, and any tool can
read the history (``zlib.decompress`` then ``json.loads``).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from hashlib import blake2b
from operator import attrgetter
from typing import cast

from monitor.model import EntryState

__all__ = ["EntrySet", "decode", "encode", "loc_hash", "locs"]

VERSION = 1
_LEVEL = 1  # zlib: level 1 compresses a sitemap's JSON 5x at ~250 MB/s; 6 is 3x slower for 15%
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode
_FIELDS = ("lastmod", "changefreq", "priority", "extensions")
_GETTERS = tuple(attrgetter(name) for name in _FIELDS)

# EntryState is a frozen dataclass; setting its slots directly is ~3x cheaper than its __init__.
_new = object.__new__
_SLOTS = vars(EntryState)
_set_lastmod = _SLOTS["lastmod"].__set__
_set_changefreq = _SLOTS["changefreq"].__set__
_set_priority = _SLOTS["priority"].__set__
_set_extensions = _SLOTS["extensions"].__set__
_set_valid = _SLOTS["valid"].__set__


@dataclass(slots=True)
class EntrySet:
    """The entries of one document version: loc -> state, and loc -> rule ids where any."""

    states: dict[str, EntryState]
    rules: dict[str, str]


def encode(states: Mapping[str, EntryState], rules: Mapping[str, str]) -> bytes:
    """The stored form of one document's entries (in their order)."""
    values = list(states.values())
    data: dict[str, object] = {"v": VERSION, "loc": list(states)}
    for name, getter in zip(_FIELDS, _GETTERS, strict=True):
        column = list(map(getter, values))
        # A column without any value (extensions, usually) is stored as null, not N nulls.
        data[name] = column if any(v is not None for v in column) else None
    data["invalid"] = [i for i, state in enumerate(values) if not state.valid]
    if rules:
        position = {loc: i for i, loc in enumerate(states)}
        data["rules"] = {str(position[loc]): ids for loc, ids in rules.items() if loc in position}
    return zlib.compress(_encode(data).encode("utf-8"), _LEVEL)


def _load(blob: bytes) -> dict[str, object]:
    data = json.loads(zlib.decompress(blob))
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise ValueError(f"not an entry set of version {VERSION}")
    return data


def decode(blob: bytes) -> EntrySet:
    """The entries of a stored document version."""
    data = _load(blob)
    loc: list[str] = data["loc"]  # type: ignore[assignment]
    size = len(loc)
    none: list[str | None] = [None] * size
    lastmods, changefreqs, priorities, extensionss = (
        cast("list[str | None]", data[name] or none) for name in _FIELDS
    )
    invalid = set(cast("list[int]", data["invalid"]))
    shared: dict[tuple[object, ...], EntryState] = {}
    states: dict[str, EntryState] = {}
    for i, (key, lastmod, changefreq, priority, extensions) in enumerate(
        zip(loc, lastmods, changefreqs, priorities, extensionss, strict=True)
    ):
        valid = i not in invalid
        attrs = (lastmod, changefreq, priority, extensions, valid)
        state = shared.get(attrs)
        if state is None:
            state = _new(EntryState)
            _set_lastmod(state, lastmod)
            _set_changefreq(state, changefreq)
            _set_priority(state, priority)
            _set_extensions(state, extensions)
            _set_valid(state, valid)
            if len(shared) < 10_000:
                shared[attrs] = state
        states[key] = state
    raw_rules: dict[str, str] = data.get("rules") or {}  # type: ignore[assignment]
    rules = {loc[int(i)]: ids for i, ids in raw_rules.items()}
    return EntrySet(states, rules)


def locs(blob: bytes) -> list[str]:
    """Just the locs of a stored document version (valid or not), in order."""
    return cast("list[str]", _load(blob)["loc"])


def loc_hash(loc: str) -> int:
    """A 64-bit fingerprint of a loc, equal in every process (``hash()`` is salted per process).

    Duplicates across a target's documents are found by these: a set of 500,000 of them is a
    fraction of the memory of the locs themselves. Two locs share one by chance about once in
    10^7 targets of 500,000 URLs; such a pair would be reported as a duplicate.
    """
    return int.from_bytes(blake2b(loc.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")
