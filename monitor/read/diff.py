"""(previous, current) -> changes: pure, never touches the database.

Both sides map ``loc`` to ``EntryState``. The kinds:

- ``added``: a loc that was not there and is valid now;
- ``invalid``: a loc that is invalid now and was absent or valid before;
- ``changed``: a loc on both sides whose attributes or validity differ otherwise;
- ``removed``: a loc that is gone.

``apply(previous, diff(previous, current)) == current`` for any two maps (property-tested).
``diff_stored`` is the same function over a stored entry set's rows (property-tested against
this one), which also finds what a re-check needs of the lastmods (``Lastmods``).
A loc present on both sides with equal state is no change, whichever document it sits in,
so a URL that moves between two children of an index is neither added nor removed.

``lastmod_earlier`` is how a re-check tells that a URL's lastmod moved backwards
(``lastmod-regressed``); ``lastmods_earlier`` the same for two columns of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from operator import lt

from monitor.codec import entryset
from monitor.core.model import (
    RULES_VERSION,
    Change,
    EntryState,
    addition_kind,
    change_kind,
    entry_state,
)
from monitor.core.rules import RuleId

__all__ = ["INVALID", "REGRESSED", "Lastmods", "apply", "count", "diff", "diff_stored",
           "lastmod_earlier", "lastmods_earlier"]

REGRESSED: RuleId = RuleId.LASTMOD_REGRESSED  # the rule id of a lastmod that went back
INVALID: RuleId = RuleId.LASTMOD_INVALID  # the rule id of a lastmod that is no W3C Datetime


def diff(previous: Mapping[str, EntryState], current: Mapping[str, EntryState]) -> list[Change]:
    """Every change from ``previous`` to ``current``: additions first, removals last."""
    changes: list[Change] = []
    append = changes.append
    get = previous.get
    kept = 0
    for loc, after in current.items():
        before = get(loc)
        if before is None:
            append(Change(addition_kind(after.valid), loc, None, after))
            continue
        kept += 1
        if before != after:
            append(Change(change_kind(before.valid, after.valid), loc, before, after))
    if kept < len(previous):  # some loc of previous is not in current
        for loc, before in previous.items():
            if loc not in current:
                append(Change("removed", loc, before, None))
    return changes


def apply(previous: Mapping[str, EntryState], changes: Iterable[Change]) -> dict[str, EntryState]:
    """``previous`` with ``changes`` applied: the inverse of ``diff``."""
    result = dict(previous)
    for change in changes:
        if change.after is None:
            del result[change.loc]
        else:
            result[change.loc] = change.after
    return result


def count(changes: Iterable[Change]) -> Counter[str]:
    """How many changes of each kind."""
    return Counter(change.kind for change in changes)


@dataclass(slots=True)
class Lastmods:
    """What ``diff_stored`` finds of the lastmods as it diffs."""

    rules: dict[str, str]  # loc -> rule ids of the new entries: lastmod-regressed is added here
    bad: int = 0  # new entries whose lastmod is lastmod-invalid
    added: int = 0  # new locs with a valid lastmod
    fresh: int = 0  # locs listed before whose lastmod changed to a valid one
    changed: int = 0  # of those, the ones whose lastmod before was valid too
    regressed: list[str] = field(default_factory=list)  # locs given lastmod-regressed now

    @property
    def compared(self) -> int:
        """Of ``present`` entries with a lastmod, those listed before with a valid lastmod on
        both sides (an unchanged lastmod is as valid as it was)."""
        return -self.bad - self.added - self.fresh + self.changed


def diff_stored(previous: entryset.Columns, states: dict[str, EntryState],
                lastmods: Lastmods | None = None) -> list[Change]:
    """``diff.diff`` against a stored entry set, without decoding it into EntryStates: its rows
    are plain tuples, and a state is built only for what changed (the same changes, in the
    same order).

    A set stored under other rules (``model.RULES_VERSION``) is compared by what the sitemap
    says, not by what the rules made of it: a verdict, or an empty element the old rules kept
    as "", that only the new rules see otherwise is no change (an upgrade raises no flood).

    With ``lastmods`` (the new entries' rule ids), the same loop counts the lastmods it
    compares and adds ``lastmod-regressed`` to the rule ids of each entry whose lastmod went
    back, or that had it before and keeps its lastmod."""
    before, old_rules = entryset.rows_and_rules(previous)
    if previous.header.get("verdicts") != RULES_VERSION:
        before = {loc: _as_now(row, states.get(loc)) for loc, row in before.items()}
    new_bad = old_bad = frozenset[str]()
    kept: list[str] = []
    if lastmods is not None:
        new_bad = _having(lastmods.rules, INVALID)
        old_bad = _having(old_rules, INVALID)
        lastmods.bad = len(new_bad)
        kept = [loc for loc in _having(old_rules, REGRESSED)
                if loc in states and loc in before and states[loc].lastmod == before[loc][0]]
    added = fresh = both = 0
    regressed: list[str] = []
    changes: list[Change] = []
    append = changes.append
    pop = before.pop
    for loc, after in states.items():
        row = pop(loc, None)
        if row is None:
            append(Change(addition_kind(after.valid), loc, None, after))
            if after.lastmod is not None and loc not in new_bad:
                added += 1
        elif row != (after.lastmod, after.changefreq, after.priority, after.extensions,
                     after.valid):
            append(Change(change_kind(row[4], after.valid), loc, entry_state(*row), after))
            lastmod, was = after.lastmod, row[0]
            if lastmod != was and lastmod is not None and loc not in new_bad:
                fresh += 1
                if was is not None and loc not in old_bad:
                    both += 1
                    if lastmod_earlier(lastmod, was):
                        regressed.append(loc)
    for loc, row in before.items():
        append(Change("removed", loc, entry_state(*row), None))
    if lastmods is not None:
        lastmods.added, lastmods.fresh, lastmods.changed = added, fresh, both
        rules = lastmods.rules
        for loc in chain(regressed, kept):
            ids = rules.get(loc)
            if ids is None:
                rules[loc] = REGRESSED
            elif REGRESSED not in ids.split():
                rules[loc] = f"{ids} {REGRESSED}"
            else:
                continue  # already there (digest.drop_duplicates diffs its own set again)
            lastmods.regressed.append(loc)
    return changes


def _having(rules: dict[str, str], rule: str) -> frozenset[str]:
    """The locs whose rule ids include ``rule``."""
    return frozenset(loc for loc, ids in rules.items() if rule in ids.split())


def _as_now(row: entryset.Row, now: EntryState | None) -> entryset.Row:
    """A row stored under older rules as the current rules would have stored the same entry:
    empty fields unset, and the verdict of the entry as it is now when it is still listed."""
    lastmod, changefreq, priority, extensions, valid = row
    return (lastmod or None, changefreq or None, priority or None, extensions,
            valid if now is None else now.valid)


def lastmod_earlier(after: str, before: str) -> bool:
    """Whether lastmod ``after`` is earlier than ``before``, both valid W3C Datetimes.

    Two datetimes compare as instants (their timezones applied). Otherwise they compare at the
    coarser of their two precisions, as written: a date against a datetime by the datetime's
    own date, a month against a day by the month ("2024-05" is not earlier than "2024-05-31").
    """
    size = len(after)
    if size == len(before) and (size <= 10 or after[-1] == before[-1] == "Z"
                                or after[-6:] == before[-6:]):
        # The same shape and timezone designator (the usual pair): digits in the same places,
        # so the text orders as the instants do, without parsing either.
        return after < before
    if size > 10 and len(before) > 10:
        try:
            return datetime.fromisoformat(after) < datetime.fromisoformat(before)
        except ValueError:  # not valid after all: nothing to compare
            return False
    shortest = min(size, len(before), 10)
    return after[:shortest] < before[:shortest]


def lastmods_earlier(afters: Sequence[str], befores: Sequence[str]) -> Iterator[bool]:
    """``lastmod_earlier`` of each pair of these two columns (of equal length).

    Where every lastmod of both has the same length and the same timezone designator (a CMS
    that stamps "now" writes them all alike), each pair takes ``lastmod_earlier``'s first
    branch: their text orders as their instants do, and C compares them without a call a pair
    (50,000 calls were 142 M instructions of a 50,000-URL child's every-lastmod re-read).
    """
    if afters and _alike(afters, befores):
        return map(lt, afters, befores)
    # Mixed shapes: the usual pair is still of one shape and zone (every pair of a typical index),
    # which takes lastmod_earlier's first branch inline here: ~2,300 instructions a pair, where a
    # call a pair from C (map's) cost ~2,800; the rest are called.
    earlier = lastmod_earlier
    return iter([after < before if after[-6:] == before[-6:] and len(after) == len(before)
                 else earlier(after, before)
                 for after, before in zip(afters, befores, strict=True)])


def _alike(afters: Sequence[str], befores: Sequence[str]) -> bool:
    """Whether all these lastmods have one length and, past a date, one timezone designator.

    Found on each column's text joined with separators (a lastmod has none), without a new
    string a value: with one length, the separators and each value's designator fall every
    ``length + 1`` characters, and a strided slice of the text takes them all at once.
    """
    size, n = len(afters[0]), len(afters)
    step = size + 1
    designator = "" if size <= 10 else "Z" if afters[0][-1] == "Z" else afters[0][-6:]
    for column in (afters, befores):
        text = "\x00".join(column)
        if len(text) != n * step - 1 or text[size::step] != "\x00" * (n - 1):
            return False
        for k, char in enumerate(designator, size - len(designator)):
            if text[k::step] != char * n:
                return False
    return True
