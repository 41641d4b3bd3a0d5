"""A re-read document against its stored entry set: only what differs is validated (pure).

The usual re-read document (a child of an index whose bytes changed) lists the stored locs in
the stored order, and most of its entries are as they were. Their verdicts are then the stored
ones: a rule looks at the entry's own fields and the document's URL, which are the same, and
at the check's time only for ``lastmod-future``, which a later check can only lift, and for
``news-too-old``, which it can only raise. So this validates just the entries whose fields
differ, those stored as ``lastmod-future`` and those with news (of a batch in which only
lastmods moved and the stored set has no verdict, just the lastmods), takes
every other verdict from the stored set, and builds the new entry set's columns from the
entries directly, without an EntryState per entry. The result equals ``validate_document``
followed by ``entryset.columns`` and the diff (tests/test_reread.py holds it to that).

A stored set whose verdicts come from other rules (``model.RULES_VERSION`` differs), or whose
locs differ from the document's, is not reused: ``reread`` returns None and the caller
validates the whole document. A clock set back between two checks could leave a
``lastmod-future`` warning unraised until the entry changes; nothing else depends on time.

The loop that builds the changes also counts the lastmods it compares and finds those that
went back (``lastmod-regressed``: a verdict about two versions, kept as the entry's
stored verdict while its lastmod stays, so that the equality above still holds for the rest).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, count, repeat
from operator import add, itemgetter, ne
from typing import cast

from monitor.codec import changepacks, changerows, columnstream, entryset, packedlocs
from monitor.codec.fingerprints import loc_hashes
from monitor.core.model import (
    RULES_VERSION,
    Change,
    Entry,
    Issue,
    change_kind,
    entry_state,
    invalid_rule,
)
from monitor.core.rules import RuleId, rule_id
from monitor.read import diff as diffing
from monitor.read import validate

__all__ = ["Reread", "Rereader", "reread"]

_UNSET = "\x01"  # an unset value in a stored column (monitor.codec.entryset)

_FUTURE = RuleId.LASTMOD_FUTURE
_INVALID = RuleId.LASTMOD_INVALID
# A verdict of the whole target (monitor.check.reciprocity), not of the entry: a document is
# digested without it, and the check adds it back where it still holds.
_TARGET_RULES = frozenset({RuleId.HREFLANG_NOT_RECIPROCAL})


# A batch's lastmods, in order, and the positions at which they differ from the stored ones
_Lastmods = tuple[Sequence[str | None], list[int]]


@dataclass(slots=True)
class Reread:
    """What ``validate_document`` and ``entryset.columns`` would have made of the document,
    with its changes against the stored set (all of them have a before and an after: the
    locs are the stored ones), as the rows to store (``monitor.codec.changerows``)."""

    columns: entryset.Columns
    counts: dict[str, int]  # every issue's rule, counted
    issues: list[Issue]  # the first ``examples`` issues, in document order
    invalid: int  # invalid entries
    rows: bytes  # the ``invalid`` changes, as ``changerows.encode`` gives them
    # the ``changed`` ones, at their positions in ``columns`` and in the stored set
    packs: list[changepacks.Packed]
    row_counts: dict[str, int]  # the changes by kind
    row_examples: list[Change]  # the first ``examples`` changes
    moved: list[int]  # the positions whose fields changed, in order
    # entries with a valid lastmod here and in the stored set, and those of them
    # whose lastmod changed
    lastmod_compared: int = 0
    lastmod_changed: int = 0
    # The hreflang balance (monitor.read.alternates.balance) when the extensions are the stored
    # ones, and so is the stored set's (its locs are the document's); None: work it out
    balance: int | None = None
    # The locs' fingerprints (fingerprints.loc_hashes) as ``Digest.hashes`` holds them, worked
    # out a batch at a time where the reader was asked for them
    hashes: bytes | None = None

    @property
    def locs(self) -> list[str]:
        """The locs, in order (the stored ones)."""
        return self.columns.locs()


def reread(entries: list[Entry], before: entryset.Columns, url: str, *, now: datetime,
           examples: int, fingerprints: bool = False) -> Reread | None:
    """The document's verdicts, columns and changes, or None when the stored set cannot serve
    (other locs, another order, duplicates, or verdicts of other rules)."""
    reader = Rereader(before, url, now=now, examples=examples, fingerprints=fingerprints)
    if not reader.add(entries):
        return None
    return reader.finish()


class _Column:
    """One stored column read in step with the document: where its next value starts."""

    __slots__ = ("absent", "offset", "parts", "set", "text", "width")

    def __init__(self, text: str, absent: bool, size: int) -> None:
        self.text, self.absent = text, absent
        self.offset = 0
        self.width = len(text) // max(size, 1) + 1  # a value and its separator, on average
        # The new column's text, a batch at a time; none while every batch is the stored
        # text's (the stored text is then the new one so far: a 50,000-URL child's, with hreflang
        # and images, extensions, 18 MB, are not held twice, nor joined again, where only its
        # lastmods moved).
        self.parts: list[str] = []
        self.set = False  # whether the new column has a value set

    def keep(self, new: str, start: int, same: bool) -> None:
        """Keep a batch's text (``new``), which began at ``start`` in the stored text and was
        or was not the same as the stored values there."""
        if same and not self.parts:
            return
        if not self.parts and start > 0:  # the batches before, all the same: as stored
            self.parts.append(self.text[: start - 1])
        self.parts.append(new)

    def same(self, new: str, last: bool) -> bool:
        """Whether the stored values from ``offset`` on begin with these (``new``: their text
        with unset values as \x01); if so, they are taken (the offset moves past them)."""
        text, end = self.text, self.offset + len(new)
        if self.absent:
            return False
        if not text.startswith(new, self.offset) or (
                end != len(text) if last else text[end : end + 1] != "\x00"):
            return False
        self.offset = end + 1
        return True

    def take(self, n: int) -> list[str | None]:
        """The next ``n`` stored values (an absent column's are all unset)."""
        if self.absent:
            return [None] * n
        text, start = self.text, self.offset
        window = self.width * n + 64  # a little more than the n values, as a rule
        while True:
            chunk = text[start : start + window]
            values = chunk.split("\x00", n)
            if len(values) > n or start + window >= len(text):
                break
            window *= 4
        if len(values) < n:
            raise ValueError(f"a stored column of fewer values than its {n} entries")
        if len(values) > n:  # the rest of the chunk, after the n values
            self.offset = start + len(chunk) - len(values.pop())
        else:
            self.offset = start + len(chunk) + 1
        if _UNSET in chunk:
            return [None if v == _UNSET else v for v in values]
        return cast("list[str | None]", values)

    def text_of(self) -> tuple[str, bool]:
        """The new column's stored text and whether it is absent (``entryset.field_texts``)."""
        if not self.set:
            return "", True
        if not self.parts:  # every batch was the same as stored
            return self.text, False
        return "\x00".join(self.parts), False


class _Digested:
    """Stored locs as format 2 stores them (monitor.codec.packedlocs), read in step with the
    document as a ``_Column`` is: compared with the locs' digests, never inflated."""

    __slots__ = ("digests", "packed", "started")

    def __init__(self, packed: packedlocs.PackedLocs) -> None:
        self.packed, self.digests, self.started = packed, packedlocs.Digests(packed), False

    def same(self, new: str, last: bool) -> bool:
        """Whether the stored locs from where the batches so far ended on begin with these
        (``new``: their text), and with the ``last`` batch end with them."""
        if self.started:
            self.digests.update(b"\x00")
        self.started = True
        self.digests.update(new.encode("utf-8", "surrogatepass"))
        return self.digests.ok and (not last or self.digests.matches(self.packed))


class Rereader:
    """``reread`` a batch of entries at a time (as the parser yields them), so that a
    document's parsed entries, its changes and their states are never all held at once: the
    stored columns are compared with each batch's text where they stand (the locs of a set
    stored in format 2 with their digests, monitor.codec.packedlocs: never inflated, and copied into
    the new version as they are stored), a batch whose text is the same costs a comparison in
    C, and only a batch that differs is split and looked at entry by entry. The new columns,
    verdicts and change rows are built as the batches come, and with ``fingerprints`` the
    locs' fingerprints too: from each batch's locs, which the parser made anyway, not from the
    stored locs column split again at the end."""

    def __init__(self, before: entryset.Columns, url: str, *, now: datetime,
                 examples: int, fingerprints: bool = False) -> None:
        self.before, self.url, self.now, self.examples = before, url, now, examples
        self.size = before.size
        self.ok = bool(self.size) and before.header.get("verdicts") == RULES_VERSION
        self.position = 0
        # Stored locs (monitor.codec.packedlocs) are compared by their digests and never inflated;
        # a version 1 set's, or ones inflated already, as text.
        self.locs: _Column | _Digested = (
            _Digested(before.packed) if before.packed is not None and before.pending
            else _Column(before.loc_text(), False, self.size))
        self.fields = [_Column(before.texts[i], before.absent(i), self.size)
                       for i in range(1, 5)]
        old_rules = cast("dict[str, str]", before.header.get("rules") or {})
        self.old_rules = {int(i): ids for i, ids in old_rules.items()}
        self.old_bad = _positions(self.old_rules, _INVALID)
        self.old_regressed = _positions(self.old_rules, diffing.REGRESSED)
        self.old_invalid = before.invalid()
        # The same positions in order, so that a batch finds its own by bisection: a pass
        # over all of them at every batch would cost the document's size times its batches.
        self.ordered = {
            "rules": sorted(self.old_rules),
            "future": sorted(_positions(self.old_rules, _FUTURE)),
            "invalid": sorted(self.old_invalid),
            "bad": sorted(self.old_bad),
        }
        self.strip = any(rule in ids for ids in self.old_rules.values()
                         for rule in _TARGET_RULES)
        self.rules: dict[int, str] = {}
        self.invalid: list[int] = []
        self.counts: dict[str, int] = {}
        self.issues: list[Issue] = []
        self.rows = changerows.Writer()
        self.packer = changepacks.Packer(positional=True)  # the stored set is the one before
        self.packs: list[changepacks.Packed] = []
        self.row_counts: dict[str, int] = {}
        self.row_examples: list[Change] = []
        self.lastmods = self.bad = self.fresh = self.both = 0
        self.moved: list[int] = []
        self.clean = validate.CleanDocument(url, now=now)
        self.hashes: array[int] | None = array("Q") if fingerprints else None

    def add(self, entries: list[Entry]) -> bool:
        """Take the next entries of the document; False when the stored set cannot serve."""
        if not self.ok:
            return False
        if not entries:
            return True
        n, start = len(entries), self.position
        if start + n > self.size:
            self.ok = False
            return False
        last = start + n == self.size
        locs, *fields = zip(*entries, strict=True)
        if not self.locs.same("\x00".join(locs), last):  # stored locs are unique: no duplicate
            self.ok = False
            return False
        self.position += n
        if self.hashes is not None:
            self.hashes += array("Q", loc_hashes(locs))
        self.lastmods += n - fields[0].count(None)
        old_columns: list[Sequence[str | None]] = list(fields)
        changed: set[int] = set()
        text = ""
        lastmods_only = True  # no column but the lastmods differs from the stored one
        lastmods_moved: list[int] = []  # the positions whose lastmod differs, in order
        for index, (column, values) in enumerate(zip(self.fields, fields, strict=True)):
            has_unset = None in values
            text = columnstream.joined(values)
            column.set = column.set or not has_unset or values.count(None) != n
            at = column.offset
            same = column.same(text, last)
            column.keep(text, at, same)
            if same:
                continue
            old = old_columns[index] = column.take(n)
            differ = list(compress(count(), map(ne, old, values)))
            changed.update(differ)
            lastmods_only = lastmods_only and not (index and differ)
            if not index:
                lastmods_moved = differ
        # The last text is the extensions'.
        self._judge(entries, start, old_columns, changed, text, lastmods_only=lastmods_only,
                    lastmods=(fields[0], lastmods_moved))
        return True

    def _judge(self, entries: list[Entry], start: int,
               old_columns: list[Sequence[str | None]], changed: set[int],
               extensions: str, *, lastmods_only: bool, lastmods: _Lastmods) -> None:
        """The verdicts and changes of one batch (positions in it; ``start`` is the first's
        in the document; ``extensions``, the text of its extensions; ``lastmods_only``, no
        column but the lastmods differs from the stored one; ``lastmods``, the batch's
        lastmods and the positions where they differ from the stored ones)."""
        end = start + len(entries)
        recheck = set(changed)
        recheck.update(i - start for i in self._within("future", start, end))
        news = '"news":' in extensions
        if news:  # news-too-old looks at the time, and rises
            recheck.update(i for i, entry in enumerate(entries)
                           if entry.extensions and '"news":' in entry.extensions)
        rules: dict[int, str] = {}
        old_rules = self._within("rules", start, end)
        for i in old_rules:
            ids = self.old_rules[i]
            if i - start not in recheck:
                if self.strip:
                    ids = " ".join(r for r in ids.split() if r not in _TARGET_RULES)
                if ids:
                    rules[i - start] = ids
        invalid = {i - start for i in self._within("invalid", start, end)} - recheck
        order = sorted(recheck)
        subset = entries if len(order) == len(entries) else [entries[i] for i in order]
        # The document's one CleanDocument (what it learnt of its dates stays) says whether an
        # entry may have an issue (the usual batch has none); the locs are the stored ones,
        # each once. Where only lastmods moved (a CMS that stamps "now") and the stored set
        # has no verdict in the batch (an invalid entry has one too), the rest of each entry
        # is as it was, without an issue: its lastmod is all there is to look at.
        if not subset:
            usual = True
        elif lastmods_only and not (old_rules or news):
            usual = self.clean.lastmods_ok(map(itemgetter(1), subset))
        else:
            usual = self.clean.check(subset)
        if not usual:
            checked = validate.validate_document(subset, self.url, now=self.now, messages=False)
            position = {entries[i].loc: i for i in order}
            rules.update((position[loc], ids) for loc, ids in checked.rules.items())
            invalid.update(position[loc] for loc, state in checked.entries.items()
                           if not state.valid)
        new_bad = _positions(rules, _INVALID)
        moved = order if len(order) == len(changed) else sorted(changed)  # recheck has them
        self.moved.extend(map(add, moved, repeat(start)))
        regressed = self._changes(entries, start, old_columns, moved, invalid, new_bad,
                                  lastmods)
        if self.old_regressed:  # those that went back before and keep their lastmod
            old_lastmods = old_columns[0]
            regressed.extend(i for i in order if start + i in self.old_regressed
                             and old_lastmods[i] == entries[i][1])
        for i in regressed:
            rules[i] = f"{rules[i]} {diffing.REGRESSED}" if i in rules else diffing.REGRESSED
        self.bad += len(new_bad)
        self.invalid.extend(start + i for i in sorted(invalid))
        for i, ids in sorted(rules.items()):
            self.rules[start + i] = ids
            for rule in ids.split():
                self.counts[rule] = self.counts.get(rule, 0) + 1
                if len(self.issues) < self.examples:
                    self.issues.append(validate.issue(rule_id(rule), entries[i], self.url))

    def _within(self, name: str, start: int, end: int) -> list[int]:
        """The stored positions of ``ordered[name]`` from ``start`` up to ``end``."""
        ordered = self.ordered[name]
        return ordered[bisect_left(ordered, start) : bisect_left(ordered, end)]

    def _changes(self, entries: list[Entry], start: int,
                 old_columns: list[Sequence[str | None]], order: list[int],
                 invalid: set[int], new_bad: set[int], new_lastmods: _Lastmods) -> list[int]:
        """The changes at these positions of the batch (``order``, ascending): ``changed``
        ones packed at their positions (the new columns and the stored ones hold the rest),
        those that made a valid entry invalid as rows, each counted and the first
        ``examples`` kept; returns the positions whose lastmod went back."""
        lastmods, changefreqs, priorities, extensions = old_columns
        spoilt: list[int] = []  # valid before, invalid now: the usual batch has none
        if invalid:
            spoilt = [i for i in order if i in invalid and start + i not in self.old_invalid]
        packed = order
        if spoilt:
            gone = set(spoilt)
            packed = [i for i in order if i not in gone]
        self.packs += self.packer.extend(list(map(add, packed, repeat(start))),
                                         lambda k: entries[packed[k]][0])
        rows = []
        for i in spoilt:
            loc, lastmod, changefreq, priority, extension = entries[i]
            was = changerows.state_json(lastmods[i], changefreqs[i], priorities[i],
                                        extensions[i], True)
            now = changerows.state_json(lastmod, changefreq, priority, extension, False)
            rows.append(("invalid", loc, was, now, invalid_rule(loc)))
        self.rows.add(rows)
        for counted, n in (("changed", len(packed)), ("invalid", len(spoilt))):
            if n:
                self.row_counts[counted] = self.row_counts.get(counted, 0) + n
        for i in order[: max(self.examples - len(self.row_examples), 0)]:
            loc, lastmod, changefreq, priority, extension = entries[i]
            was_valid, now_valid = start + i not in self.old_invalid, i not in invalid
            self.row_examples.append(Change(
                change_kind(was_valid, now_valid), loc,
                entry_state(lastmods[i], changefreqs[i], priorities[i], extensions[i],
                            was_valid),
                entry_state(lastmod, changefreq, priority, extension, now_valid)))
        return self._regressed(entries, start, lastmods, order, new_bad, new_lastmods)

    def _regressed(self, entries: list[Entry], start: int, lastmods: Sequence[str | None],
                   order: list[int], new_bad: set[int], new_lastmods: _Lastmods) -> list[int]:
        """Count the changed positions whose lastmod moved to a valid one, and those of them
        whose lastmod before was valid too; the positions whose lastmod went back. A column
        at a time: a re-read in which every lastmod moved has 50,000 of them a document."""
        afters: Sequence[str | None]
        if len(order) == len(entries):  # every entry of the batch changed: as ``add`` found
            afters, befores = new_lastmods[0], lastmods
            fresh = new_lastmods[1]
        else:
            afters, befores = [entries[i][1] for i in order], [lastmods[i] for i in order]
            fresh = list(compress(range(len(order)), map(ne, afters, befores)))
        if None in afters or new_bad:
            fresh = [k for k in fresh if afters[k] is not None and order[k] not in new_bad]
        self.fresh += len(fresh)
        both = fresh
        if None in befores or self._within("bad", start, start + len(entries)):
            both = [k for k in fresh
                    if befores[k] is not None and start + order[k] not in self.old_bad]
        self.both += len(both)
        if len(both) == len(order):  # every one (a CMS that stamps "now"): no subset to make
            return list(compress(order, diffing.lastmods_earlier(
                cast("list[str]", afters), cast("list[str]", befores))))
        pairs = (cast("list[str]", [afters[k] for k in both]),
                 cast("list[str]", [befores[k] for k in both]))
        return list(compress([order[k] for k in both], diffing.lastmods_earlier(*pairs)))

    def finish(self) -> Reread | None:
        """The document's result, or None when the stored set could not serve it."""
        if not self.ok or self.position != self.size:
            return None
        texts, absent = [], []
        extensions = self.fields[-1]
        same = not extensions.absent and not extensions.parts  # every batch was as stored
        for name, column in zip(entryset.FIELDS, self.fields, strict=True):
            text, gone = column.text_of()
            texts.append(text)
            if gone:
                absent.append(name)
        columns = entryset.assemble(self.size, [self.before.texts[0], *texts], absent,
                                    self.invalid, self.rules, self.before.packed,
                                    self.before.tail)
        # Entries with a valid lastmod now, but for those whose lastmod changed, plus those of
        # them whose lastmod was valid before too: an unchanged lastmod is as valid as it was.
        compared = self.lastmods - self.bad - self.fresh + self.both
        self.packs.extend(self.packer.finish())
        return Reread(columns, self.counts, self.issues, len(self.invalid), self.rows.finish(),
                      self.packs, self.row_counts, self.row_examples, self.moved, compared,
                      self.both, self.before.balance() if same else None,
                      None if self.hashes is None else self.hashes.tobytes())


def _positions(rules: Mapping[int, str] | Mapping[str, str], rule: str) -> set[int]:
    """The positions whose rule ids include ``rule`` (keys as ints)."""
    return {int(i) for i, ids in rules.items() if rule in ids.split()}
