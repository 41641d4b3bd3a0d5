"""The steps of a check that judge the whole target once its documents are read (pure).

A check reads a target document by document; a few verdicts need all of them: a URL that left
one child and joined another moved (it is neither removed nor added), and the lastmod churn
compares this re-check's share of changed lastmods with the one before. These functions take
what the walk gathered and return the verdict; ``check.pipeline`` calls them and writes the
results.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from monitor.core.model import Change, EntryState, Issue, addition_kind, change_kind
from monitor.core.rules import RuleId
from monitor.read import validate

__all__ = ["CHURN_MIN", "CHURN_PERCENT", "Moves", "churn_issue", "churning", "settle_moves"]

CHURN_PERCENT = 80
CHURN_MIN = 20
CHURN_EXAMPLES = 3


@dataclass(frozen=True, slots=True)
class Moves:
    """The held-back additions and removals of a re-check, resolved.

    ``changes``: true additions, true removals, and a ``changed`` (or ``invalid``) change for a
    URL that moved between documents with other fields; ``compared``/``changed``: the lastmods
    of the URLs that moved, for the churn ratio (each document's digest counted such a URL
    as removed from one document and added to the other, so it compared nothing).
    """

    changes: list[Change]
    compared: int
    changed: int


def settle_moves(added: Mapping[str, EntryState], removed: Mapping[str, EntryState]) -> Moves:
    """Resolve held-back changes: a loc both added and removed moved, and is no removal."""
    changes: list[Change] = []
    compared = changed = 0
    for loc, after in added.items():
        before = removed.get(loc)
        if before is None:
            changes.append(Change(addition_kind(after.valid), loc, None, after))
            continue
        if (before.lastmod is not None and after.lastmod is not None
                and validate.lastmod_valid(before.lastmod)
                and validate.lastmod_valid(after.lastmod)):
            compared += 1
            changed += before.lastmod != after.lastmod
        if before != after:
            changes.append(Change(change_kind(before.valid, after.valid), loc, before, after))
    changes.extend(Change("removed", loc, before, None)
                   for loc, before in removed.items() if loc not in added)
    return Moves(changes, compared, changed)


def churning(compared: int, changed: int) -> bool:
    """Whether a re-check's lastmods churned: at least ``CHURN_PERCENT`` of at least
    ``CHURN_MIN`` compared lastmods changed."""
    return compared >= CHURN_MIN and changed * 100 >= compared * CHURN_PERCENT


def churn_issue(previous: tuple[int, int] | None, now: tuple[int, int],
                changes: Iterable[Change], url: str) -> Issue | None:
    """``lastmod-churn`` when this re-check (``now``: compared, changed) and the one before it
    both churned, with a few of this check's changed lastmods as examples; else None."""
    if previous is None or not (churning(*previous) and churning(*now)):
        return None
    examples = [c.loc for c in changes if c.kind == "changed"
                and c.before is not None and c.after is not None
                and c.before.lastmod != c.after.lastmod][:CHURN_EXAMPLES]
    return Issue(RuleId.LASTMOD_CHURN, (
        f"{_share(*now)} changed their lastmod on this re-check, {_share(*previous)} on "
        "the one before: a lastmod that changes at every check (the time of the request, "
        "say) is one search engines learn to ignore"
        + (f"; for example {', '.join(examples)}" if examples else "")), document=url)


def _share(compared: int, changed: int) -> str:
    return f"{changed:,} of {compared:,} URLs ({changed / compared:.1%})"
