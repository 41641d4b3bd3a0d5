"""A document's changes as the rows the ``changes`` table stores, in one compact value (pure).

A re-check in which every lastmod of a 50,000-URL document moved has 50,000 ``changed``
changes. As ``Change`` objects, two ``EntryState`` each, they took ~25 MB in the process that
digested the document, were pickled to the check's process (frozen dataclasses unpickle slowly)
and held there, a few documents at once, until written; each state was turned into its JSON
there, on the check's one thread. Now the digest turns them into rows where it runs (a worker
process, for a big document) and hands over one zlib-compressed text: 50,000 rows are ~2 MB.

    ROW \x01 ROW \x01 ...      ROW = KIND \x00 LOC \x00 BEFORE \x00 AFTER \x00 RULE

BEFORE and AFTER are the states' JSON (``state_json``), RULE the rule id of an ``invalid``
change (``model.invalid_rule``); an unset value is \x02. None of \x00-\x02 can occur in a loc
(XML text; the parser replaces them in text sitemaps) nor in JSON, which escapes them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from json.encoder import encode_basestring_ascii as _quote

from monitor.core.model import Change, EntryState, invalid_rule

__all__ = ["Row", "Writer", "decode", "encode", "of", "row", "state_json"]

Row = tuple[str, str, str | None, str | None, str | None]  # kind, loc, before, after, rule
_LEVEL = 1
_UNSET = "\x02"
_SLICE = 64 * 1024  # compressed bytes decompressed at once


def state_json(lastmod: str | None, changefreq: str | None, priority: str | None,
               extensions: str | None, valid: bool) -> str:
    """An entry state as compact JSON, leaving out what is unset (``valid`` only when false):
    what ``json.dumps`` with ``separators=(",", ":")`` makes of that dict, built directly."""
    parts = []
    if lastmod is not None:
        parts.append('"lastmod":' + _quote(lastmod))
    if changefreq is not None:
        parts.append('"changefreq":' + _quote(changefreq))
    if priority is not None:
        parts.append('"priority":' + _quote(priority))
    if extensions is not None:
        parts.append('"extensions":' + _quote(extensions))
    if not valid:
        parts.append('"valid":false')
    return "{" + ",".join(parts) + "}"


def _json(state: EntryState | None) -> str | None:
    if state is None:
        return None
    return state_json(state.lastmod, state.changefreq, state.priority, state.extensions,
                      state.valid)


def row(change: Change) -> Row:
    """The stored row of a change."""
    return (change.kind, change.loc, _json(change.before), _json(change.after),
            invalid_rule(change.loc) if change.kind == "invalid" else None)


def of(changes: Iterable[Change]) -> Iterator[Row]:
    """The stored rows of these changes, in order."""
    return map(row, changes)


def encode(rows: Iterable[Row]) -> bytes:
    """The compact value of these rows (b"" for none)."""
    writer = Writer()
    writer.add(rows)
    return writer.finish()


class Writer:
    """``encode`` a batch of rows at a time: only the compressed value is held."""

    def __init__(self) -> None:
        self._packer = zlib.compressobj(_LEVEL)
        self._out: list[bytes] = []
        self._any = False

    def add(self, rows: Iterable[Row]) -> None:
        """The next rows, in order."""
        text = "\x01".join("\x00".join(_UNSET if v is None else v for v in r) for r in rows)
        if text:
            self._out.append(self._packer.compress(
                (("\x01" if self._any else "") + text).encode()))
            self._any = True

    def finish(self) -> bytes:
        """The value of every row added (b"" for none)."""
        if not self._any:
            return b""
        self._out.append(self._packer.flush())
        return b"".join(self._out)


def decode(data: bytes) -> Iterator[Row]:
    """The rows of ``encode``'s value, in order, decompressed a slice at a time (the rows of
    50,000 changes are ~12 MB of text)."""
    if not data:
        return
    unpacker = zlib.decompressobj()
    pending = b""  # a row begun in one slice, ended in the next (UTF-8 has no \x01 inside)
    for start in range(0, len(data), _SLICE):
        pending += unpacker.decompress(data[start : start + _SLICE])
        lines = pending.split(b"\x01")
        pending = lines.pop()
        yield from map(_row, lines)
    pending += unpacker.flush()
    yield from map(_row, pending.split(b"\x01"))


def _row(line: bytes) -> Row:
    kind, loc, before, after, rule = line.decode().split("\x00")
    return (kind, loc, None if before == _UNSET else before,
            None if after == _UNSET else after, None if rule == _UNSET else rule)
