"""A re-read document against its stored entry set: only what differs is validated (pure).

The usual re-read document (a child of an index whose bytes changed) lists the stored locs in
the stored order, and most of its entries are as they were. Their verdicts are then the stored
ones: a rule looks at the entry's own fields and the document's URL, which are the same, and
at the check's time only for ``lastmod-future``, which a later check can only lift, and for
``news-too-old``, which it can only raise. So this validates just the entries whose fields
differ, those stored as ``lastmod-future`` and those with news, takes
every other verdict from the stored set, and builds the new entry set's columns from the
entries directly, without an EntryState per entry. The result equals ``validate_document``
followed by ``entryset.columns`` and the diff (tests/test_reread.py holds it to that).

A stored set whose verdicts come from other rules (``model.RULES_VERSION`` differs), or whose
locs differ from the document's, is not reused: ``reread`` returns None and the caller
validates the whole document. A clock set back between two checks could leave a
``lastmod-future`` warning unraised until the entry changes; nothing else depends on time.

The loop that builds the changes also counts the lastmods it compares and finds those that
went back (``lastmod-regressed``, SPEC 12: a verdict about two versions, kept as the entry's
stored verdict while its lastmod stays, so that the equality above still holds for the rest).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, count
from operator import ne
from typing import cast

from monitor import diff as diffing
from monitor import entryset, validate
from monitor.model import RULES_VERSION, Change, ChangeKind, Entry, Issue, entry_state

__all__ = ["Reread", "reread"]

_FUTURE = "lastmod-future"
_INVALID = "lastmod-invalid"
# A verdict of the whole target (monitor.pipeline), not of the entry: a document is digested
# without it, and the check adds it back where it still holds.
_TARGET_RULES = frozenset({"hreflang-not-reciprocal"})


@dataclass(slots=True)
class Reread:
    """What ``validate_document`` and ``entryset.columns`` would have made of the document,
    with its changes against the stored set."""

    columns: entryset.Columns
    locs: Sequence[str]
    counts: dict[str, int]  # every issue's rule, counted
    issues: list[Issue]  # the first ``examples`` issues, in document order
    invalid: int  # invalid entries
    changes: list[Change]
    # SPEC 12: entries with a valid lastmod here and in the stored set, and those of them
    # whose lastmod changed
    lastmod_compared: int = 0
    lastmod_changed: int = 0


def reread(entries: list[Entry], before: entryset.Columns, url: str, *, now: datetime,
           examples: int) -> Reread | None:
    """The document's verdicts, columns and changes, or None when the stored set cannot serve
    (other locs, another order, duplicates, or verdicts of other rules)."""
    size = len(entries)
    if not size or size != before.size or before.header.get("verdicts") != RULES_VERSION:
        return None
    locs, *fields = zip(*entries, strict=True)
    loc_text = "\x00".join(locs)
    if loc_text != before.texts[0]:  # stored locs are unique: equal text, no duplicates
        return None
    texts, absent = entryset.field_texts(fields)
    recheck: set[int] = set()  # positions whose verdicts are validated again
    # Each field's values in the stored set: a column whose text is the same holds the same
    # values as now, so only a column that differs is split (a tenth of the time, each).
    old_columns: list[Sequence[str | None]] = list(fields)
    for index, (column, text, name) in enumerate(zip(fields, texts, entryset.FIELDS,
                                                     strict=True), 1):
        if text == before.texts[index] and (name in absent) == before.absent(index):
            continue
        old = old_columns[index - 1] = before.column(index)
        if len(old) != size:
            raise ValueError(f"a stored column of {len(old)} values for {size} entries")
        recheck.update(compress(count(), map(ne, old, column)))
    changed = frozenset(recheck)
    old_rules = cast("dict[str, str]", before.header.get("rules") or {})
    recheck.update(int(i) for i, ids in old_rules.items() if _FUTURE in ids.split())
    if '"news":' in texts[3]:  # news-too-old looks at the check's time too, and only rises
        recheck.update(i for i, ext in enumerate(fields[3]) if ext and '"news":' in ext)
    old_invalid = before.invalid()
    rules = {int(i): ids for i, ids in old_rules.items() if int(i) not in recheck}
    if any(rule in ids for ids in rules.values() for rule in _TARGET_RULES):
        rules = {i: kept for i, ids in rules.items()
                 if (kept := " ".join(r for r in ids.split() if r not in _TARGET_RULES))}
    invalid = old_invalid - recheck
    if recheck:
        order = sorted(recheck)
        checked = validate.validate_document([entries[i] for i in order], url, now=now)
        position = dict(zip((locs[i] for i in order), order, strict=True))
        rules.update((position[loc], ids) for loc, ids in checked.rules.items())
        invalid.update(position[loc] for loc, state in checked.entries.items() if not state.valid)
    # SPEC 12: each lastmod that changed against the stored one, in the loop that builds the
    # changes; one that moved backwards is ``lastmod-regressed``, which stays with the entry
    # (as its stored verdict) until its lastmod changes again.
    # Validity comes of error rules, which look only at the fields: it changes with them.
    new_bad = _positions(rules, _INVALID)
    changes, fresh, both, regressed = _changes(
        entries, old_columns, changed, old_invalid, invalid, _positions(old_rules, _INVALID),
        new_bad)
    old_lastmods = old_columns[0]
    regressed.extend(i for i in _positions(old_rules, diffing.REGRESSED)
                     if i in recheck and old_lastmods[i] == entries[i][1])
    for i in regressed:
        rules[i] = f"{rules[i]} {diffing.REGRESSED}" if i in rules else diffing.REGRESSED
    ordered = dict(sorted(rules.items()))
    columns = entryset.assemble(size, [loc_text, *texts], absent, sorted(invalid), ordered)
    counts: dict[str, int] = {}
    issues: list[Issue] = []
    for i, ids in ordered.items():
        for rule in ids.split():
            counts[rule] = counts.get(rule, 0) + 1
            if len(issues) < examples:
                issues.append(validate.issue(rule, entries[i], url))
    # Entries with a valid lastmod now, but for those whose lastmod changed, plus those of
    # them whose lastmod was valid before too: an unchanged lastmod is as valid as it was.
    compared = columns.present(1) - len(new_bad) - fresh + both
    return Reread(columns, locs, counts, issues, len(invalid), changes, compared, both)


def _positions(rules: Mapping[int, str] | Mapping[str, str], rule: str) -> set[int]:
    """The positions whose rule ids include ``rule`` (keys as ints)."""
    return {int(i) for i, ids in rules.items() if rule in ids.split()}


def _changes(entries: list[Entry], old_columns: list[Sequence[str | None]],
             positions: frozenset[int], old_invalid: set[int], invalid: set[int],
             old_bad: set[int], new_bad: set[int],
             ) -> tuple[list[Change], int, int, list[int]]:
    """The changes at these positions; of them, how many have a new lastmod that is valid,
    how many of those had a valid one before, and the positions whose lastmod went back."""
    if not positions:
        return [], 0, 0, []
    lastmods, changefreqs, priorities, extensions = old_columns
    changes = []
    fresh = both = 0
    regressed = []
    for i in sorted(positions):
        loc, lastmod, changefreq, priority, extension = entries[i]
        before = lastmods[i]
        was = entry_state(before, changefreqs[i], priorities[i], extensions[i],
                          i not in old_invalid)
        now = entry_state(lastmod, changefreq, priority, extension, i not in invalid)
        kind: ChangeKind = "invalid" if was.valid and not now.valid else "changed"
        changes.append(Change(kind, loc, was, now))
        if lastmod != before and lastmod is not None and i not in new_bad:
            fresh += 1
            if before is not None and i not in old_bad:
                both += 1
                if diffing.lastmod_earlier(lastmod, before):
                    regressed.append(i)
    return changes, fresh, both, regressed
