"""When a flood of connections to the port has ended, its memory is returned once.

The whole flood against a real daemon is in tests/daemon/test_port_timeouts.py; here, when the
return starts, on a loop that only records what it is asked to run.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from monitor.read import process
from monitor.serve import port


class _Loop:
    """Records the functions given to its executor; their futures stay pending until set."""

    def __init__(self) -> None:
        self.runs: list[Callable[[], Any]] = []
        self.futures: list[asyncio.Future[Any]] = []
        self._loop = asyncio.new_event_loop()

    def run_in_executor(self, _executor: None, function: Callable[[], Any]) -> asyncio.Future[Any]:
        self.runs.append(function)
        self.futures.append(self._loop.create_future())
        return self.futures[-1]

    def close(self) -> None:
        self._loop.close()


def _flood(flood: port.Flood, loop: _Loop, up_to: int, down_to: int) -> None:
    for count in range(1, up_to + 1):
        flood.opened(count)
    for count in range(up_to - 1, down_to - 1, -1):
        flood.closed(count, loop)  # type: ignore[arg-type]


def test_memory_is_returned_once_when_a_flood_has_ended() -> None:
    loop = _Loop()
    try:
        flood = port.Flood()
        _flood(flood, loop, 999, 0)  # not a flood
        assert loop.runs == []
        _flood(flood, loop, 10_500, 106)  # 106 of 10,500 left: not ended yet
        assert loop.runs == []
        flood.closed(105, loop)  # type: ignore[arg-type]
        assert loop.runs == [process.return_freed_memory]
        _flood(flood, loop, 105, 0)  # the rest closes: nothing more
        assert len(loop.runs) == 1
        loop.futures[0].set_result(process.Returned(1, None, None, 0.0))
        _flood(flood, loop, 1_000, 100)  # the next flood, with 100 real clients staying
        assert len(loop.runs) == 2
    finally:
        loop.close()


def test_a_flood_that_ends_while_memory_is_being_returned_does_not_start_another() -> None:
    loop = _Loop()
    try:
        flood = port.Flood()
        _flood(flood, loop, 2_000, 0)
        _flood(flood, loop, 2_000, 0)
        assert len(loop.runs) == 1
    finally:
        loop.close()


def test_returning_memory_frees_what_cycles_keep() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    cycles = [Cycle() for _ in range(1_000)]
    del cycles  # each is kept by itself alone now: only a collection frees it
    returned = process.return_freed_memory()
    assert returned.objects >= 1_000
    if sys.platform.startswith("linux"):
        assert returned.resident_before is not None
        assert returned.resident_after is not None
