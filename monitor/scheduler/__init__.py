"""WHEN checks run: due times in the database, claimed in batches by each replica, graceful stop.

The due times live in the database (``targets.next_due_at``), not in every replica: replicas do
not all schedule all targets. Each replica has one dispatcher, an APScheduler job that wakes at
the earliest due time of all free targets (read from the database after a claim that left
slots free, so every replica sees due work at the same time, not only the one whose check set
that due time), when a concurrency slot frees, and at least every ``POLL`` seconds (a dead
replica's targets). A wake for a due time comes a random share of ``SPREAD`` late and at least
``BATCH`` after the last claim, on every replica alike: which replica claims first is a draw,
so each gets a fair share of the work, and the targets that come due in between are claimed
together. It claims, in one statement (``store.targets.claim_due``), as many due, free targets
as it has free slots, the longest-due first: a busy replica leaves the work to the others, and
replicas claiming at once take different targets instead of racing for the same ones (on
PostgreSQL ``FOR UPDATE SKIP LOCKED``). Each due check runs once across replicas. A check gives
the lease back in its own transaction, with the target's next due time (its claim plus the
interval plus jitter); a check that raises or is cancelled gives it back on its own. A check
that raises is logged with its exception and pushed one interval on; it never stops the other
targets. ``stop`` lets in-flight checks finish within a grace period and cancels the rest; a
cancelled check writes nothing because the pipeline commits atomically, and its target is due
again at once, for any replica.

The modules, each over the ones below it: ``dispatcher`` (``Scheduler``: the claiming loop and
each run, from its claim to its lease given back) over ``claims`` (the database: register,
claim, keep and give back leases), ``runs`` (the slots), ``report`` (a check's log line and
metrics, the summary of late starts), over ``timing`` (when to wake and when a target is next
due; pure).
"""

from monitor.core.model import utcnow
from monitor.scheduler.dispatcher import CheckFn, Scheduler
from monitor.scheduler.timing import POLL, Clock

__all__ = ["POLL", "CheckFn", "Clock", "Scheduler", "utcnow"]
