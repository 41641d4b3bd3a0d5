"""The slots of one replica: the runs of the targets it claimed, one per target, at most
``concurrency``, and the tasks it must see end before it stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

__all__ = ["Runs"]


class Runs:
    """The claimed targets' runs by name, and which of them are checking now.

    A run begins when its target is claimed and ends when the lease is back; between the two,
    while its check runs, it is ``checking``: what ``stop`` waits for within its grace.
    """

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._checking: set[asyncio.Task[Any]] = set()  # the runs whose check is running
        self._tasks: set[asyncio.Task[Any]] = set()  # runs and releases: what stop waits for

    @property
    def free(self) -> int:
        """How many more targets may be claimed now."""
        return self._concurrency - len(self._runs)

    @property
    def checking(self) -> int:
        """How many claimed checks are running now."""
        return len(self._checking)

    def __contains__(self, name: str) -> bool:
        return name in self._runs

    def start(self, name: str, run: Awaitable[None]) -> None:
        """Run the check of a claimed target in a slot of its own."""
        self._runs[name] = self.spawn(run)

    def ended(self, name: str) -> None:
        """A run gave its slot back."""
        self._runs.pop(name, None)

    def spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        """Run ``work`` as a task that ``wait`` waits for."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def check_began(self, task: asyncio.Task[Any]) -> None:
        """The run ``task`` is checking its target now."""
        self._checking.add(task)

    def check_ended(self, task: asyncio.Task[Any]) -> None:
        """The run ``task`` has stopped checking (stored, failed or cancelled)."""
        self._checking.discard(task)

    async def finish_checks(self, grace: float) -> int:
        """Wait ``grace`` seconds for the running checks, cancel the rest; how many were."""
        checking = set(self._checking)
        if not checking:
            return 0
        _done, pending = await asyncio.wait(checking, timeout=grace)
        for task in pending:
            task.cancel()
        return len(pending)

    async def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for every task spawned to end."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=seconds)
