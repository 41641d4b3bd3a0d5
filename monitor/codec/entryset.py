"""One document's entries as one compressed value: how entry versions are stored (pure).

A document of 50,000 URLs is one row of the ``entry_sets`` table, not 50,000 rows: writing a
row per URL was half of a first check's time. The value is zlib-compressed UTF-8 text in
columns, so that encoding and decoding are a few joins and splits in C:

    HEADER \x02 LASTMODS \x02 CHANGEFREQS \x02 PRIORITIES \x02 LOCS \x02 EXTENSIONS

HEADER is JSON: ``{"v": 2, "verdicts": RULES_VERSION, "n": entries, "invalid": [positions],
"absent": [names of columns without any value], "rules": {"position": "rule ids"},
"locs": {the locs' stream, monitor.codec.packedlocs}, "e": bytes of the extensions' stream}``; sets
stored before "verdicts" was written lack it (their verdicts are not reused, monitor.read.reread).
What the document itself said goes with its entries, where there is any (``annotate``):
"issues" (its parse issues, ``{rule, message, loc}``), "dropped" (rule -> parse issues counted
past those kept) and "duplicates" (the locs of the occurrences dropped as ``loc-duplicate``), so
that a listing of the issues at any snapshot reads them back without the document.
Each column is its values' text (monitor.codec.columnstream: joined by \x00, an unset value
being \x01). Not pickle or marshal: the database is not trusted to run code, and any tool can
read the history.

The zlib value holds three deflate streams end to end (``pack``): everything up to the \x02
before LOCS, flushed to a byte boundary; LOCS and the \x02 after them, on their own and
flushed, so that a new version with the same locs copies the stream as it is, and a re-read
compares a document's locs with the stored ones by their digests (monitor.codec.packedlocs) without
inflating them; then EXTENSIONS on their own, so that a new document's extensions can be
compressed while it is parsed (``columnstream.Stream``). Any zlib reader reads it as one value.
``unpack`` reads the first and the last stream, and checks the value's Adler-32 from theirs and
the one the header holds of the locs': the locs are inflated only when asked for
(``Columns.loc_text``).

Version 1 (``"v": 1``, still read) had the locs first, in the first stream:
HEADER \x02 LOCS \x02 LASTMODS \x02 CHANGEFREQS \x02 PRIORITIES \x02 EXTENSIONS.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter
from typing import cast

from monitor.codec import packedlocs
from monitor.codec.columnstream import (
    LEVEL,
    SLICE,
    UNSET,
    PackedText,
    Stream,
    adler32_combine,
    joined,
    slices,
    split,
)
from monitor.codec.packedlocs import PackedLocs
from monitor.core.model import RULES_VERSION, EntryState, entry_state

__all__ = ["FIELDS", "VERSION", "Columns", "EntrySet", "Row", "annotate", "assemble",
           "clean_columns", "columns", "decode", "encode", "field_texts", "head", "in_version_1",
           "locs", "pack", "rows", "rows_and_rules", "same", "same_locs", "unpack"]

VERSION = 2  # what ``pack`` writes; ``unpack`` reads 1 too
_VERSIONS = (1, 2)
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode
FIELDS = ("lastmod", "changefreq", "priority", "extensions")  # the columns after the locs
_GETTERS = tuple(attrgetter(name) for name in FIELDS)
_SEP = "\x02"  # between the header and the columns
_SEP_BYTES = _SEP.encode()


@dataclass(slots=True)
class EntrySet:
    """The entries of one document version: loc -> state, and loc -> rule ids where any."""

    states: dict[str, EntryState]
    rules: dict[str, str]


@dataclass(slots=True, eq=False)
class Columns:
    """An entry set before compression: its header and its column texts, locs first. Equal
    to another that holds the same (however its locs are held)."""

    header: dict[str, object]
    # locs, lastmods, changefreqs, priorities, extensions; the locs' is "" while ``pending``
    texts: list[str]
    # The locs as stored (version 2), which ``pack`` copies: ``unpack`` gives them so, and a
    # re-read's new columns take them (monitor.read.reread); None: ``pack`` compresses texts[0]
    packed: PackedLocs | None = None
    pending: bool = False  # texts[0] not inflated from ``packed`` yet (``loc_text``)
    # The extensions as stored (version 2), which ``pack`` copies while texts[4] is its text
    tail: PackedText | None = None

    @property
    def size(self) -> int:
        return cast("int", self.header["n"])

    def absent(self, index: int) -> bool:
        """Whether column ``index`` (1-4) holds no value at all (its text is then empty)."""
        return FIELDS[index - 1] in cast("list[str]", self.header.get("absent") or [])

    def column(self, index: int) -> list[str | None]:
        """The values of column ``index`` (1-4), None where unset."""
        return split(self.texts[index], self.size, self.absent(index))

    def present(self, index: int) -> int:
        """How many entries set a value in column ``index`` (1-4), counted in C."""
        if not self.size or self.absent(index):
            return 0
        return self.size - self.texts[index].count(UNSET)

    def invalid(self) -> set[int]:
        """The positions of the invalid entries."""
        return set(cast("list[int]", self.header["invalid"]))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Columns):
            return NotImplemented
        return (self.header == other.header and self.texts[1:] == other.texts[1:]
                and self.loc_text() == other.loc_text())

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq is

    def loc_text(self) -> str:
        """The locs' text (\x00 between them), inflated the first time it is asked for."""
        if self.pending:
            assert self.packed is not None
            self.texts[0], self.pending = self.packed.text(), False
        return self.texts[0]

    def locs(self) -> list[str]:
        """The locs, in order."""
        return self.loc_text().split("\x00") if self.size else []

    def rules(self) -> dict[int, str]:
        """The rule ids (joined by spaces) of the entries that have any, by position."""
        raw = cast("dict[str, str]", self.header.get("rules") or {})
        return {int(i): ids for i, ids in raw.items()}

    def document_issues(self) -> list[dict[str, str | None]]:
        """The document's own parse issues (``annotate``)."""
        return cast("list[dict[str, str | None]]", self.header.get("issues") or [])

    def dropped(self) -> dict[str, int]:
        """Rule -> parse issues counted but not kept (``annotate``)."""
        return cast("dict[str, int]", self.header.get("dropped") or {})

    def balance(self) -> int:
        """The document's hreflang balance (``annotate``; monitor.read.alternates.balance)."""
        return cast("int", self.header.get("balance") or 0)

    def duplicates(self) -> list[str]:
        """The locs of the occurrences dropped as ``loc-duplicate`` (``annotate``)."""
        return cast("list[str]", self.header.get("duplicates") or [])


def encode(states: Mapping[str, EntryState], rules: Mapping[str, str]) -> bytes:
    """The stored form of one document's entries (in their order)."""
    return pack(columns(states, rules))


def columns(states: Mapping[str, EntryState], rules: Mapping[str, str]) -> Columns:
    """One document's entries as columns (``encode`` before compression)."""
    values = list(states.values())
    texts, absent = field_texts(list(map(getter, values)) for getter in _GETTERS)
    by_position: dict[int, str] = {}
    if rules:
        position = {loc: i for i, loc in enumerate(states)}
        # in document order, whatever the order they were given in (diff_stored adds some)
        by_position = dict(sorted((position[loc], ids) for loc, ids in rules.items()
                                  if loc in position))
    return assemble(len(values), ["\x00".join(states), *texts], absent,
                    [i for i, state in enumerate(values) if not state.valid], by_position)


def clean_columns(locs: list[str], fields: Sequence[list[str | None]],
                  extensions: Stream | None = None) -> Columns:
    """``columns`` of entries that are all valid and without an issue, given as the column of
    their locs and those of their ``FIELDS``; or of the first three, and the extensions as a
    ``Stream`` (which ``pack`` is then given: the last text is left empty)."""
    if extensions is None:
        texts, absent = field_texts(fields)
    else:
        texts, absent = field_texts([*fields[:3], []])
        if extensions.absent:
            absent.append(FIELDS[3])
    return assemble(len(locs), ["\x00".join(locs), *texts], absent, [], {})


def field_texts(fields: Iterable[Sequence[str | None]]) -> tuple[list[str], list[str]]:
    """The stored texts of the columns after the locs (their values in ``FIELDS`` order), and
    the names of those without any value (whose text is then "")."""
    texts, absent = [], []
    for name, values in zip(FIELDS, fields, strict=True):
        if values and values.count(None) == len(values):
            texts.append("")
            absent.append(name)
        else:
            texts.append(joined(values))
    return texts, absent


def assemble(size: int, texts: list[str], absent: list[str], invalid: list[int],
             rules: Mapping[int, str], packed: PackedLocs | None = None,
             tail: PackedText | None = None) -> Columns:
    """An entry set's columns from its parts: the texts (locs first), the names of the absent
    columns, the invalid positions and the rule ids by position, both in document order.
    ``packed``: the locs as stored, with the first text or in its place (it is then "");
    ``tail``: the extensions as stored, if any (``pack`` copies them while they are the last
    text)."""
    header: dict[str, object] = {"v": VERSION, "verdicts": RULES_VERSION, "n": size,
                                 "invalid": invalid}
    if absent:  # a column without any value (extensions, usually) is not stored at all
        header["absent"] = absent
    if rules:
        header["rules"] = {str(i): ids for i, ids in rules.items()}
    return Columns(header, texts, packed, packed is not None and not texts[0], tail)


def annotate(columns: Columns, *, issues: Sequence[Mapping[str, str | None]],
             dropped: Mapping[str, int], duplicates: Sequence[str], balance: int = 0) -> None:
    """Keep with the entries the document's parse issues, the count of those not kept, the
    locs dropped as duplicates and its hreflang balance (each only where there is any: the
    usual header is unchanged). The balance goes right after "n", where ``head`` finds it in
    the first bytes of the stored set."""
    header = columns.header
    header.pop("balance", None)
    if balance:
        first: dict[str, object] = {key: header.pop(key) for key in ("v", "verdicts", "n")
                                    if key in header}
        rest = dict(header)
        header.clear()
        header.update(first, balance=balance, **rest)
    for key, value in (("issues", list(issues)), ("dropped", dict(dropped)),
                       ("duplicates", list(duplicates))):
        if value:
            header[key] = value
        else:
            header.pop(key, None)


_HEAD = re.compile(r'\{"v":[12],"verdicts":([0-9]+),"n":[0-9]+,(?:"balance":([0-9]+))?')


def head(prefix: bytes) -> tuple[int, int] | None:
    """The verdicts version and hreflang balance of a stored set, from its first bytes
    (``store.checkreads.load_set_heads``); None when they do not say."""
    if prefix[:1] == b"D":  # a version stored as a delta (monitor.codec.entrydelta): its header too
        prefix = prefix[1:]
    try:
        text = zlib.decompressobj().decompress(prefix, 4096).decode("utf-8", "replace")
    except zlib.error:
        return None
    match = _HEAD.match(text)
    return None if match is None else (int(match.group(1)), int(match.group(2) or 0))


def same(one: Columns, other: Columns) -> bool:
    """Whether the two pack into the same bytes (``pack`` of their texts, the extensions as
    text): their headers as stored and their texts, compared without packing either (the
    locs by their digests where both are stored ones)."""
    return (one.texts[1:] == other.texts[1:] and _encode(one.header) == _encode(other.header)
            and same_locs(one, other))


def same_locs(one: Columns, other: Columns) -> bool:
    """Whether the two list the same locs in the same order."""
    if one.packed is not None and other.packed is not None:
        return one.packed.same(other.packed)
    return one.loc_text() == other.loc_text()


def pack(columns: Columns, extensions: Stream | None = None) -> bytes:
    """Compress an entry set's columns into its stored form, of the version its header says
    (2 as ``assemble`` makes it; 1 for a set read from version 1 and written back, as a
    downgrade does: migration 0014). ``extensions``: the last column as it was compressed
    while it came (``Stream``), in place of ``columns.texts[4]``.

    One zlib value, in three deflate streams: the header and the lastmods, changefreqs and
    priorities, flushed to a byte boundary; the locs (``columns.packed`` as it is, where they
    are stored ones); then the extensions column on its own, so that the bytes are the same
    whether it came as a ``Stream`` or as text."""
    if columns.header.get("v") == 1:
        return _pack_v1(columns, extensions)
    locs = columns.packed if columns.packed is not None else packedlocs.pack(columns.texts[0])
    kept = columns.tail
    if extensions is None and kept is not None and kept.text is columns.texts[4]:
        tail, tail_check, tail_length = kept.data, kept.check, kept.length
    else:
        if extensions is None:
            extensions = Stream()
            extensions.add_text(columns.texts[4])
        tail, tail_check, tail_length = _EMPTY_STREAM, zlib.adler32(b""), 0
        if not extensions.absent and extensions.length:
            tail, tail_check, tail_length = (extensions.finish(), extensions.check,
                                             extensions.length)
    header = dict(columns.header, locs=locs.describe(), e=len(tail))
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    out, check = [_ZLIB_HEADER], zlib.adler32(b"")
    for data in _pieces(header, columns.texts[1:4]):
        out.append(packer.compress(data))
        check = zlib.adler32(data, check)
    out.append(packer.flush(zlib.Z_SYNC_FLUSH))
    del packer  # its 256 KB of state, before the next stream's
    out += (locs.data, tail)
    check = adler32_combine(check, locs.check, locs.length)
    check = adler32_combine(check, tail_check, tail_length)
    out.append(check.to_bytes(4, "big"))
    return b"".join(out)


def in_version_1(blob: bytes) -> bytes | None:
    """A stored full version written back in version 1, which releases before version 2
    read (migration 0014's downgrade); None when it is of version 1 already."""
    columns = unpack(blob)
    if columns.header.get("v") == 1:
        return None
    columns.header["v"] = 1
    return pack(columns)


def _pack_v1(columns: Columns, extensions: Stream | None) -> bytes:
    """Version 1 of the stored form, in one deflate stream (which version 1 reads as well as
    its own two): for sets that stay readable by releases before version 2."""
    last = columns.texts[4] if extensions is None else joined(extensions.values())
    texts = [columns.loc_text(), *columns.texts[1:4], last]
    text = _SEP.join([_encode(columns.header), *texts])
    return zlib.compress(text.encode("utf-8", "surrogatepass"), LEVEL)


def _pieces(header: dict[str, object], texts: list[str]) -> Iterator[bytes]:
    """The bytes of the header and the columns before the locs, each after a separator, and
    the separator before the locs: a slice at a time (a column's text whole, encoded, would be
    a copy of it), and each dropped once compressed."""
    yield _encode(header).encode("utf-8", "surrogatepass")
    for text in texts:
        yield _SEP_BYTES
        yield from slices(text)
    yield _SEP_BYTES


_ZLIB_HEADER = b"\x78\x01"  # deflate, 32 KB window, level 1: what zlib.compressobj(1) writes
_EMPTY_STREAM = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS).flush()  # b"\x03\x00"
def unpack(blob: bytes) -> Columns:
    """The columns of a stored entry set; of version 2, the locs left compressed until they are
    asked for (``Columns.loc_text``). Each column is decoded from the decompressed bytes where
    it lies: the whole text decoded, then split, held the value three times over at once
    (69 MB for a 50,000-URL child's, with hreflang and images, 23 MB)."""
    header, data, locs, tail_start = _lead(blob)
    if locs is None:
        return _unpack_v1(blob)
    cuts = _cuts(data, 5)
    if len(cuts) != 5:
        raise ValueError(f"not an entry set of version {VERSION}")
    data = data[: cuts[-1] + 1]  # the inflated text may run into the locs' (a small value)
    stream = blob[tail_start:-4]
    tail = zlib.decompressobj(-zlib.MAX_WBITS).decompress(stream)
    tail_check = zlib.adler32(tail)
    check = adler32_combine(zlib.adler32(data), locs.check, locs.length)
    check = adler32_combine(check, tail_check, len(tail))
    if check != int.from_bytes(blob[-4:], "big"):
        raise ValueError("a stored entry set that does not match its checksum")
    with memoryview(data) as view:
        texts = [str(view[start + 1 : end], "utf-8", "surrogatepass")
                 for start, end in pairwise(cuts[1:])]
    text = str(tail, "utf-8", "surrogatepass")
    kept = PackedText(stream, tail_check, len(tail), text) if tail else None
    return Columns(header, ["", *texts, text], locs, True, kept)


def _unpack_v1(blob: bytes) -> Columns:
    data = zlib.decompress(blob)
    cuts = _cuts(data, 7)
    if len(cuts) != 6:
        raise ValueError(f"not an entry set of version {VERSION}")
    cuts.append(len(data))
    with memoryview(data) as view:
        header_text, *texts = [str(view[start + 1 : end], "utf-8", "surrogatepass")
                               for start, end in pairwise(cuts)]
    return Columns(_header(header_text), texts)


def _cuts(data: bytes, most: int) -> list[int]:
    """-1 and the positions of the first separators in ``data``, up to ``most`` of both."""
    cuts = [-1]
    while len(cuts) < most and (cut := data.find(_SEP_BYTES, cuts[-1] + 1)) >= 0:
        cuts.append(cut)
    return cuts


def _tail(blob: bytes, size: object) -> int:
    """Where the extensions' stream of a version 2 value starts (``size``: the header's "e")."""
    if not isinstance(size, int) or not 0 < size <= len(blob) - 6:
        raise ValueError("a stored entry set whose streams are not where its header says")
    return len(blob) - 4 - size


_LEAD = 4096  # compressed bytes inflated at a time while the header is read


def _lead(blob: bytes, first: bool = True,
          ) -> tuple[dict[str, object], bytes, PackedLocs | None, int]:
    """A stored set's header (without what it says of the streams), and of version 2 the
    first stream's text (inflated; with ``first`` False, only as far as the header), its locs
    as stored and where its extensions' stream starts; of version 1, the header, the inflated
    start of the value, None and 0."""
    unpacker = zlib.decompressobj()
    parts: list[bytes] = []
    at = 0
    while True:
        part = unpacker.decompress(blob[at : at + _LEAD])
        at += _LEAD
        parts.append(part)
        if _SEP_BYTES in part or at >= len(blob):
            break
    data = b"".join(parts)
    del parts
    header_end = data.find(_SEP_BYTES)
    if header_end < 0:
        raise ValueError(f"not an entry set of version {VERSION}")
    header = _header(data[:header_end])
    if header["v"] == 1:
        return header, data, None, 0
    described = header.pop("locs", None)
    end = _tail(blob, header.pop("e", None))
    start = end - cast("int", described.get("z") if isinstance(described, dict) else -1)
    if not 2 <= start <= end:
        raise ValueError("a stored entry set whose streams are not where its header says")
    locs = packedlocs.of(cast("dict[str, object]", described), blob[start:end])
    if first and at < start:
        data += unpacker.decompress(memoryview(blob)[at:start])
    return header, data, locs, end


Row = tuple[str | None, str | None, str | None, str | None, bool]


def _rows(stored: Columns) -> tuple[list[str], list[Row], dict[str, str]]:
    """The locs, their rows (lastmod, changefreq, priority, extensions, valid), the rules."""
    size = stored.size
    loc = stored.locs()
    lastmods, changefreqs, priorities, extensionss = (stored.column(i) for i in range(1, 5))
    invalid = stored.invalid()
    valid = [i not in invalid for i in range(size)]
    found = list(zip(lastmods, changefreqs, priorities, extensionss, valid, strict=True))
    raw_rules = cast("dict[str, str]", stored.header.get("rules") or {})
    return loc, found, {loc[int(i)]: ids for i, ids in raw_rules.items()}


def decode(blob: bytes) -> EntrySet:
    """The entries of a stored document version."""
    loc, found, rules = _rows(unpack(blob))
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


def rows(stored: Columns) -> dict[str, Row]:
    """loc -> (lastmod, changefreq, priority, extensions, valid) of a stored version (as
    ``unpack`` gives it), in order: plain tuples, built in C, for comparing without an
    EntryState per entry."""
    return rows_and_rules(stored)[0]


def rows_and_rules(stored: Columns) -> tuple[dict[str, Row], dict[str, str]]:
    """``rows``, and loc -> rule ids of the entries that have any."""
    loc, found, rules = _rows(stored)
    return dict(zip(loc, found, strict=True)), rules


def _header(text: str | bytes) -> dict[str, object]:
    """A stored set's header, from its JSON; ValueError when it is not of a version read."""
    header = json.loads(text)
    if not isinstance(header, dict) or header.get("v") not in _VERSIONS:
        raise ValueError(f"not an entry set of version {VERSION}")
    return header


def locs(blob: bytes) -> list[str]:
    """Just the locs of a stored document version (valid or not), in order: of version 2, the
    header and the locs' own stream alone are inflated; of version 1, the value as far as the
    end of its locs column. The columns after it are most of it where entries carry extensions
    (18 of 23 MB for a child with hreflang and images), and a check reads the locs of every
    document it fingerprints."""
    header, _, packed, _ = _lead(blob, first=False)
    if packed is not None:
        text = packed.text()
        return text.split("\x00") if header.get("n") else []
    return _locs_v1(blob)


def _locs_v1(blob: bytes) -> list[str]:
    unpacker = zlib.decompressobj()
    parts: list[bytes] = []
    separators, tail = 0, blob
    while separators < 2:
        part = unpacker.decompress(tail, SLICE)
        tail = unpacker.unconsumed_tail
        parts.append(part)
        separators += part.count(_SEP_BYTES)
        if not tail and len(part) < SLICE:
            break
    data = b"".join(parts)
    del parts
    header_end = data.find(_SEP_BYTES)
    locs_end = data.find(_SEP_BYTES, header_end + 1)
    if header_end < 0 or locs_end < 0:
        raise ValueError(f"not an entry set of version {VERSION}")
    if not _header(data[:header_end]).get("n"):
        return []
    with memoryview(data) as view:
        text = str(view[header_end + 1 : locs_end], "utf-8", "surrogatepass")
    del data
    return text.split("\x00")
