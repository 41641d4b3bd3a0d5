"""The leased delivery loop that the alert outbox and the IndexNow submitter share.

A pass claims the due rows under a lease (the store's conditional UPDATE gives each row to one
replica at a time), delivers them together, and each delivery marks its own row: delivered,
failed, or back for a retry after ``backoff``. A delivery that raised leaves its row to the
lease, which runs out so that the row is claimed again later: nothing is lost, a send may
repeat. The loop outlives a database outage, waiting longer after each failed pass.

Use::

    leasing = deliveryloop.Leasing(owner="pod-1", lease=60.0, batch=8, poll_interval=1.0)
    await deliveryloop.run(one_pass, stop, leasing, log=log, failed="outbox pass failed")

where ``one_pass`` calls ``deliver_due`` with the store's ``claim`` and its own ``deliver``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from structlog.typing import FilteringBoundLogger

__all__ = ["Claims", "Jitter", "Leasing", "backoff", "deliver_due", "report", "run"]

_MAX_PAUSE_FACTOR = 30  # a database down for long is polled every 30 poll intervals


class Row(Protocol):
    """What the loop reads of a claimed row: its id, for the log."""

    @property
    def id(self) -> int: ...


RowT = TypeVar("RowT", bound=Row)
RowT_co = TypeVar("RowT_co", bound=Row, covariant=True)


class Claims(Protocol[RowT_co]):
    """The store side that leases due rows (``SqlOutbox``, ``SqlSubmissions``)."""

    def claim(self, owner: str, now: datetime, lease: float,
              limit: int = ...) -> Sequence[RowT_co]: ...


@dataclass(frozen=True, slots=True)
class Leasing:
    """How a loop claims: as ``owner``, up to ``batch`` rows a pass, each for ``lease`` seconds
    (past one delivery, so that a replica that died leaves its rows to the others once it runs
    out), looking again every ``poll_interval`` seconds."""

    owner: str
    lease: float
    batch: int
    poll_interval: float


class Jitter(Protocol):
    """Where a random delay is drawn from: a ``random.Random``, or the ``random`` module."""

    def uniform(self, a: float, b: float) -> float: ...


async def run(one_pass: Callable[[], Awaitable[int]], stop: asyncio.Event, leasing: Leasing, *,
              log: FilteringBoundLogger, failed: str) -> None:
    """Run ``one_pass`` until ``stop`` is set; a pass that raised is logged as ``failed``.

    ``one_pass`` returns how many rows it claimed: a full batch means more may be due right
    away, so the next pass starts at once; otherwise the loop waits the poll interval, doubled
    after each failed pass in a row.
    """
    failures = 0
    while not stop.is_set():
        try:
            claimed = await one_pass()
            failures = 0
        except Exception:  # the loop outlives a database outage
            failures += 1
            log.exception(failed, failures=failures)
            claimed = 0
        if claimed >= leasing.batch:
            continue
        pause = leasing.poll_interval * min(2**failures, _MAX_PAUSE_FACTOR)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=pause)


async def deliver_due(claims: Claims[RowT], deliver: Callable[[RowT], Awaitable[None]],
                      leasing: Leasing, now: datetime, *, log: FilteringBoundLogger,
                      unsettled: str, row_key: str) -> int:
    """One pass: claim the due rows, deliver them together; how many were claimed.

    A delivery that raised is logged as ``unsettled`` with the row's id under ``row_key``.
    """
    rows = await asyncio.to_thread(claims.claim, leasing.owner, now, leasing.lease,
                                   leasing.batch)
    outcomes = await asyncio.gather(*(deliver(row) for row in rows), return_exceptions=True)
    for row, outcome in zip(rows, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            # Most likely the database failed while marking: the lease runs out and the row
            # is delivered again later.
            log.error(unsettled, **{row_key: row.id},
                      error=f"{outcome.__class__.__name__}: {outcome}")
    return len(rows)


def backoff(attempt: int, initial: float, maximum: float, rng: Jitter) -> float:
    """Seconds before attempt ``attempt + 1``: doubling from ``initial`` up to ``maximum``.

    Drawn from the upper half of that delay (equal jitter) so that replicas do not retry in
    step, and never under ``initial``.
    """
    base = min(maximum, initial * 2 ** max(attempt - 1, 0))
    jittered = rng.uniform(base / 2, base)
    return max(initial, jittered) if base >= initial else base


def report(log: FilteringBoundLogger, hook: Callable[[], None]) -> None:
    """Call a metrics hook; one that raises is logged, never breaks delivery."""
    try:
        hook()
    except Exception:  # a metrics hook must not break delivery
        log.exception("on_result hook failed")
