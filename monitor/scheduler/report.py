"""What the scheduler says about the checks it ran: the one line a check (and its metrics),
the result of a check that raised, and a summary of the checks that started late.
"""

from __future__ import annotations

from datetime import datetime

import structlog

from monitor import config
from monitor.core.model import CheckResult
from monitor.observe.metrics import Metrics

__all__ = ["Lateness", "failed", "report"]

log = structlog.get_logger("monitor.scheduler")
# Checks that start this late are counted, and summed up in one log line every _LATE_EVERY.
_LATE = 2.0
_LATE_EVERY = 60.0


def report(
    result: CheckResult, name: str, metrics: Metrics, *, finished_at: datetime, observe: bool
) -> None:
    """Log the check's one line and, when ``observe``, record it in the metrics."""
    # The snapshot's counts are the target's current issues by rule (what it stored).
    counts = result.issue_counts if result.snapshot_id is not None else None
    if observe:
        metrics.observe(result, name, issue_counts=counts, finished_at=finished_at)
    fields = {
        "target": name,
        "outcome": result.outcome,
        "snapshot_id": result.snapshot_id,
        "urls": result.urls,
        "invalid": result.invalid,
        "added": result.added,
        "removed": result.removed,
        "changed": result.changed,
        "invalid_new": result.invalid_new,
        "documents": len(result.documents),
        "documents_failed": sum(d.outcome == "failed" for d in result.documents),
        "issues": len(result.issues),
        "fetched_bytes": result.fetched_bytes,
        "duration_seconds": round(result.duration_seconds, 3),
    }
    if result.outcome == "failed":
        log.warning("check", **fields, error_kind=result.error_kind,
                    error=result.error_message)
    elif result.outcome == "partial":  # a warning: part of the URL set went unread
        log.warning("check", **fields, failed_documents=[
            f"{d.url}: {d.error}" for d in result.failed_documents[:5]])
    else:
        log.info("check", **fields)


def failed(target: config.Target, exc: Exception, started: datetime,
           finished: datetime) -> CheckResult:
    """The result of a check that raised: an internal error, apart from a failed check of the
    site, since this one could not be recorded."""
    return CheckResult(
        target=target.name, url=target.url, outcome="error",
        error_kind="internal", error_message=str(exc),
        duration_seconds=(finished - started).total_seconds(),
    )


class Lateness:
    """Counts the checks that start late; one summary line every ``_LATE_EVERY`` seconds
    while some do (a replica behind its schedule), not one line per check."""

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency
        self._late = (0, 0.0)  # checks that started late since the last summary, most seconds
        self._since = 0.0

    def restart(self, clock: float) -> None:
        """Count from ``clock`` (the event loop's time) on."""
        self._since = clock

    def count(self, seconds: float, clock: float) -> None:
        """A check starts ``seconds`` after its due time, at ``clock`` (the event loop's)."""
        count, most = self._late
        if seconds >= _LATE:
            count, most = count + 1, max(most, seconds)
        self._late = (count, most)
        if clock - self._since < _LATE_EVERY:
            return
        if count:
            log.warning("checks started late: due targets wait for a free slot",
                        checks=count, most_seconds=round(most, 1),
                        over_seconds=round(clock - self._since), concurrency=self._concurrency)
        self._late, self._since = (0, 0.0), clock
