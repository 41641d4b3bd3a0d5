"""The daemon's pruning: every ``scheduler.prune_interval`` (an hour), each target's
history past its retention is deleted, a few snapshots a transaction, in a worker thread, so
that the checks go on meanwhile (monitor.store.retention). A target the configuration no
longer names keeps its history until the defaults' retention removes it. Every replica
prunes: the deletes are the same whoever runs them, and each takes off the counts only what
it deleted itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

import structlog
from sqlalchemy import Engine

from monitor import config
from monitor.observe.metrics import Metrics
from monitor.store.retention import (
    NO_VACUUM,
    Pruned,
    database_bytes,
    give_back,
    prune_target,
    target_ids,
)

__all__ = ["Pruner"]

# The log name of the pruning lines (the `logger` field), kept as it was for log queries.
logger = structlog.get_logger("monitor.pruning")
_FIRST = 60.0  # seconds after start-up: the first round waits for the checks to begin


class Pruner:
    """Prunes every target's history on an interval until ``stop``."""

    def __init__(self, engine: Engine, current: Callable[[], config.Config], metrics: Metrics,
                 *, first: float = _FIRST) -> None:
        self._engine = engine
        self._metrics = metrics
        self._current = current  # the configuration now (a reload replaces it)
        self._first = first
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._said_no_vacuum = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop after the transaction in progress."""
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _loop(self) -> None:
        wait = min(self._first, self._current().scheduler.prune_interval)
        while not await self._stopped_within(wait):
            try:
                await self.round()
            except Exception as exc:  # noqa: BLE001 - a failed round is retried next interval
                logger.warning("pruning failed; trying again next interval", error=str(exc))
            wait = self._current().scheduler.prune_interval

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self._stop.is_set()

    async def refresh_size(self) -> None:
        """Update the database_bytes gauge (before each scrape)."""
        try:
            size = await asyncio.to_thread(database_bytes, self._engine)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail on an outage
            logger.warning("cannot read the database's size", error=str(exc))
            return
        self._metrics.set_database_bytes(size)

    async def round(self) -> list[tuple[str, Pruned]]:
        """Prune every target once; return what went, by target (those where anything did)."""
        cfg = self._current()
        now = datetime.now(UTC)
        found = []
        for name, target_id in await asyncio.to_thread(target_ids, self._engine):
            if self._stop.is_set():
                break
            keep = cfg.retention(name)
            pruned = await asyncio.to_thread(
                prune_target, self._engine, target_id, max_age=keep.snapshots,
                keep_last=keep.keep_last, now=now, max_bytes=keep.max_bytes)
            if pruned.deleted:
                found.append((name, pruned))
                logger.info("history pruned", target=name, snapshots=pruned.snapshots,
                            changes=pruned.changes, entry_sets=pruned.entry_sets,
                            kept_from_snapshot=pruned.boundary,
                            robots_files=pruned.robots_files)
        if found and not self._stop.is_set():
            await self._give_back()
        return found

    async def _give_back(self) -> None:
        """SQLite: the pages the round freed, back to the file system."""
        given = await asyncio.to_thread(give_back, self._engine)
        if given:
            logger.info("database space given back", bytes=given)
        elif given is None and not self._said_no_vacuum:
            self._said_no_vacuum = True
            logger.warning(NO_VACUUM)
