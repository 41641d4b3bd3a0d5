"""What every stage of one check shares: the target, its stored state as the check began,
the store's reads, the writes held for the end, and the tally of what was found.

Reads go through ``Reads``: each in a short connection of its own, so no transaction (and on
SQLite no lock) is held while the check waits on the network. A document whose new entry set
this check has recorded is read back from the check's own writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Engine

from monitor.check.tally import Tally
from monitor.codec.states import StoredSet, TargetState
from monitor.config import Defaults, Target
from monitor.read.fetch import Fetcher
from monitor.read.workers import DigestPool
from monitor.robots import reader as robots_reader
from monitor.store import checkreads
from monitor.store import robotsversions as robots_versions
from monitor.store.checkplan import CheckWrites
from monitor.store.retry import transaction

__all__ = ["Context", "Loaded", "Reads", "load"]

T = TypeVar("T")
# the robots.txt versions in force: url -> (text, etag, last_modified)
RobotsVersions = dict[str, tuple[str | None, str | None, str | None]]


@dataclass(frozen=True, slots=True)
class Loaded:
    """The target's stored state as a check begins."""

    state: TargetState
    robots: RobotsVersions


def load(engine: Engine, target: Target, now: datetime) -> Loaded:
    """Read (and on first sight create) the target's state, in one short transaction."""
    def read(conn: Any) -> Loaded:
        state = checkreads.load_state(conn, target.name, target.url, now)
        return Loaded(state, robots_versions.current(conn, state.target_id))

    return transaction(engine, read)


class Reads:
    """The check's reads of the store, each in a connection of its own (see the module)."""

    def __init__(self, engine: Engine, target_id: int, writes: CheckWrites) -> None:
        self.engine = engine
        self.target_id = target_id
        self.writes = writes

    async def call(self, fn: Callable[..., T], *args: Any, **options: Any) -> T:
        return await asyncio.to_thread(self._once, fn, args, options)

    def _once(self, fn: Callable[..., T], args: tuple[Any, ...], options: dict[str, Any]) -> T:
        with self.engine.connect() as conn:
            return fn(conn, *args, **options)

    async def stored(self, urls: Collection[str], *, whole: bool = True,
                     ) -> dict[str, StoredSet]:
        """The entry sets stored for these documents before this check."""
        return await self.call(checkreads.load_entry_sets, self.target_id, urls, whole=whole)

    async def current(self, url: str) -> StoredSet | None:
        """A document's entry set as this check leaves it: recorded now, else stored."""
        if self.writes.recorded(url):
            return await self.call(self._recorded, url)
        return (await self.stored([url])).get(url)

    def _recorded(self, conn: Any, url: str) -> StoredSet | None:
        return self.writes.pending(url, lambda set_id: checkreads.stored_value(conn, set_id))


@dataclass(slots=True)
class Context:
    """One check's shared parts (see the module)."""

    target: Target
    fetcher: Fetcher
    digests: DigestPool
    started: datetime
    loaded: Loaded
    reads: Reads
    writes: CheckWrites
    tally: Tally
    robots_cache: robots_reader.RobotsCache | None = None
    allow_private: bool = False

    @property
    def settings(self) -> Defaults:
        return self.target.settings

    @property
    def state(self) -> TargetState:
        return self.loaded.state

    @property
    def target_id(self) -> int:
        return self.loaded.state.target_id

    @property
    def first(self) -> bool:
        """No documents stored before: a baseline, nothing to diff against."""
        return not self.loaded.state.documents

    def kind(self, url: str) -> str | None:
        """The kind of a document read this check, else of its stored state."""
        state = self.tally.read.get(url) or self.state.documents.get(url)
        return None if state is None else state.kind
