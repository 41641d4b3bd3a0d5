"""Waiting for an event, not for a time: ask a probe again until it holds, up to a deadline.

A test that sleeps a fixed time and then looks bets that the machine was fast enough; on a busy
machine it loses now and then. These helpers return as soon as the probe holds, and the
deadline is generous (a failure only says the event never came), so the suite passes at any
load and is not slower when the machine is idle.

    row = until(lambda: read_row(engine), what="the snapshot row")
    await until_async(lambda: server.requests, what="a request at the server")
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["DEADLINE", "until", "until_async"]

T = TypeVar("T")

# Long enough for any event of the suite on a 2-core machine at load 8; only a failure waits it.
DEADLINE = 60.0


def until(
    probe: Callable[[], T], *, within: float = DEADLINE, every: float = 0.05,
    what: str = "the condition",
) -> T:
    """The probe's first truthy answer, asked every ``every`` seconds; AssertionError naming
    ``what`` and the last answer if none comes within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {within:g} s (last: {found!r})")
        time.sleep(every)


async def until_async(
    probe: Callable[[], T], *, within: float = DEADLINE, every: float = 0.02,
    what: str = "the condition",
) -> T:
    """``until`` for a test on the event loop: the loop runs between two asks."""
    deadline = time.monotonic() + within
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {within:g} s (last: {found!r})")
        await asyncio.sleep(every)
