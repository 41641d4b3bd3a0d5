"""When the dispatcher wakes and when a target is next due: pure arithmetic on due times.

Every replica applies the same rules, so none of them wakes ahead of the others for the same
work: a wake for a due time comes at least ``BATCH`` after the replica's last claim and a
random share of ``SPREAD`` late, at once when the replica is behind; with nothing known to be
due, one ``POLL`` on.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from monitor import config

__all__ = [
    "BATCH", "GATHER", "POLL", "SPREAD", "WAITED", "Clock", "Wakes", "after",
]

# What the scheduler reads the time from: ``model.utcnow``, or a test's.
Clock = Callable[[], datetime]

# The longest a replica waits before it asks the database for due targets: how soon it sees
# what another replica released or left behind (a dead one's, once its lease has run out).
POLL = 1.0
# How long a wake-up waits for others before its claim: the targets due together, and the slots
# of checks ending together, are claimed by one statement.
GATHER = timedelta(seconds=0.005)
# A due wake comes a random share of this late, on every replica alike: replicas waking for the
# same due time claim in a random order, so each gets a fair share of the due work over time.
SPREAD = 0.1
# The least time between two claims of a replica that is not behind: the targets that come due
# meanwhile are claimed by one statement, and replicas do not race for every single target.
BATCH = timedelta(seconds=0.2)
# A target claimed this long after its due time waited for a slot (here or on other replicas):
# the replicas are behind, and a freed slot should not wait for the next poll.
WAITED = timedelta(seconds=0.25)


def _jitter(target: config.Target) -> float:
    return target.settings.interval * target.settings.jitter


def after(moment: datetime, target: config.Target, *, jittered: bool = True) -> datetime:
    """One interval after ``moment`` plus a random share of the target's jitter."""
    extra = random.uniform(0, _jitter(target)) if jittered else 0.0  # noqa: S311
    return moment + timedelta(seconds=target.settings.interval + extra)


class Wakes:
    """The due times this replica's own checks set, earliest first, and when to wake for them.

    >>> wakes = Wakes()
    >>> now = datetime(2025, 1, 1, tzinfo=UTC)
    >>> wakes.add(now + timedelta(seconds=5))
    >>> wakes.next_run(now, served=None) - now <= timedelta(seconds=POLL)  # a poll comes first
    True
    """

    def __init__(self) -> None:
        self._dues: list[datetime] = []
        self.dispatched = datetime.min.replace(tzinfo=UTC)  # when the last dispatch began
        # The last claim filled every free slot with targets that had waited: more may be due,
        # so a freed slot claims again at once.
        self.behind = False

    def add(self, due: datetime) -> None:
        """Remember a due time this replica set (its own check's)."""
        heapq.heappush(self._dues, due)

    def wake_for(self, due: datetime) -> datetime:
        """When to wake for work due at ``due``: at least ``BATCH`` after the last claim, plus
        a random share of ``SPREAD``, the same rule on every replica; at once when behind
        (a freed slot of a saturated replica)."""
        if self.behind:
            return due
        due = max(due, self.dispatched + BATCH)
        return due + timedelta(seconds=random.uniform(0, SPREAD))  # noqa: S311

    def next_run(
        self, now: datetime, served: datetime | None, upcoming: datetime | None = None
    ) -> datetime:
        """The dispatcher's next run: for the earliest due time not ``served`` yet (by a
        dispatch that began at that time), its own checks' or the ``upcoming`` one of any free
        target, or one ``POLL`` on."""
        while self._dues and served is not None and self._dues[0] <= served:
            heapq.heappop(self._dues)
        # Replicas' polls drift apart instead of asking the database in step.
        at = now + timedelta(seconds=POLL * random.uniform(0.75, 1.0))  # noqa: S311
        # One draw for the earliest due time, whoever set it: a replica that also knows it
        # from its own check must not get two draws, and so an earlier wake than the others.
        dues = [d for d in (self._dues[0] if self._dues else None, upcoming) if d is not None]
        if dues:
            at = min(at, self.wake_for(min(dues)))
        return at

    def claimed(self, now: datetime, free: int, dues: Iterable[datetime | None]) -> None:
        """After a claim at ``now`` for ``free`` slots that got targets due at ``dues``: behind
        when it filled every slot with targets that had waited."""
        got = list(dues)
        waited = min((d for d in got if d is not None), default=now)
        self.behind = len(got) == free and now - waited > WAITED
