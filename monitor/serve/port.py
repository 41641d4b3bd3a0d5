"""The connections one port holds: how many are open, which wait for a request, a flood's end.

A new connection is held by a ``Waiting`` protocol until its first byte arrives; only then
does the server's HTTP protocol (uvicorn's, ~2.4 KiB of objects a connection) take it over.
A socket opened and left silent costs the transport and ~200 bytes more, and a flood of them
leaves less of Python's allocator behind once it has ended (see ``Flood``).
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

import structlog

from monitor.read import process

__all__ = ["Flood", "Port", "Waiting"]

logger = structlog.get_logger("monitor.app")
# A flood: this many connections open at once. It has ended when at most a hundredth of them
# (or FLOOD_LEFT, if more) are left: its silent sockets closed, a few real clients may stay.
FLOOD = 1_000
FLOOD_LEFT = 100


class _Closable(Protocol):
    @property
    def transport(self) -> asyncio.BaseTransport: ...


class Flood:
    """The most connections a port had open at once since its last flood ended. When a flood
    ends, the memory its connections held goes back to the system, once, in a thread
    (``process.return_freed_memory``): left to itself, a flood of 10,500 idle connections kept
    all it took until Python's next full collection."""

    def __init__(self) -> None:
        self.peak = 0
        self._returning: asyncio.Future[process.Returned] | None = None

    def opened(self, count: int) -> None:
        """``count`` connections are open, one more than before."""
        self.peak = max(self.peak, count)

    def closed(self, count: int, loop: asyncio.AbstractEventLoop) -> None:
        """``count`` connections are left open, one fewer than before."""
        if self.peak < FLOOD or count > max(FLOOD_LEFT, self.peak // 100):
            return
        peak, self.peak = self.peak, count
        if self._returning is not None and not self._returning.done():
            return
        try:
            self._returning = loop.run_in_executor(None, process.return_freed_memory)
        except RuntimeError:  # the executor is shut down: the daemon is stopping
            return
        self._returning.add_done_callback(functools.partial(_returned, peak))


def _returned(peak: int, done: asyncio.Future[process.Returned]) -> None:
    if done.cancelled():
        return
    if (exc := done.exception()) is not None:
        logger.warning("cannot return memory after a connection flood", error=str(exc))
        return
    returned = done.result()
    logger.info("connection flood over; memory returned", connections=peak,
                objects_freed=returned.objects, rss_before_bytes=returned.resident_before,
                rss_after_bytes=returned.resident_after, seconds=returned.seconds)


class Port:
    """One server's connections: those still ``waiting`` for their first byte, those the HTTP
    protocol holds (``active``, uvicorn's own set), and, oldest first, the ``idle`` ones that
    wait for a request, whichever protocol holds them.

    Past ``max_connections``, a new connection closes the oldest idle one: sockets opened and
    left silent, faster than ``head_timeout`` closes them, take the place of each other and
    not of the clients that send requests.
    """

    def __init__(self, max_connections: int, head_timeout: float) -> None:
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.waiting = 0
        self.active: set[object] = set()
        self.idle: OrderedDict[_Closable, None] = OrderedDict()
        self.flood = Flood()

    def open_connections(self) -> int:
        """Every connection open on the port."""
        return self.waiting + len(self.active)

    def opened(self, connection: _Closable) -> None:
        """``connection`` is new and waits for a request; make room past the limit."""
        self.idle[connection] = None
        count = self.open_connections()
        self.flood.opened(count)
        if count > self.max_connections:
            oldest = next(iter(self.idle))
            if oldest is not connection:
                del self.idle[oldest]
                oldest.transport.close()

    def closed(self, connection: _Closable, loop: asyncio.AbstractEventLoop) -> None:
        """``connection`` is gone (and out of ``waiting`` or ``active`` already)."""
        self.idle.pop(connection, None)
        self.flood.closed(self.open_connections(), loop)

    def close_waiting(self) -> None:
        """Close the connections that have sent nothing (the server is stopping)."""
        for connection in [c for c in self.idle if isinstance(c, Waiting)]:
            connection.transport.close()


class Waiting(asyncio.Protocol):
    """A connection that has sent nothing yet. Its first byte hands it, with that byte, to
    the protocol ``make`` builds; it is closed if nothing comes within the port's
    ``head_timeout`` (which the HTTP protocol goes on counting from ``opened``)."""

    __slots__ = ("_make", "_port", "_timer", "opened", "transport")

    def __init__(self, make: Callable[[], asyncio.Protocol], port: Port) -> None:
        self._make = make
        self._port = port
        self._timer: asyncio.TimerHandle | None = None
        self.opened = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Count the connection in and start its clock."""
        self.transport = transport
        loop = asyncio.get_running_loop()
        self.opened = loop.time()
        self._timer = loop.call_at(self.opened + self._port.head_timeout, transport.close)
        self._port.waiting += 1
        self._port.opened(self)

    def data_received(self, data: bytes) -> None:
        """Hand the connection and its first bytes over to the HTTP protocol."""
        self._forget()
        self._port.idle.pop(self, None)
        protocol = self._make()
        protocol.opened = self.opened  # type: ignore[attr-defined]
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        protocol.data_received(data)

    def eof_received(self) -> None:
        """The client closed its side before a byte: close ours."""

    def connection_lost(self, exc: Exception | None) -> None:
        """Count the connection out."""
        self._forget()
        self._port.closed(self, asyncio.get_running_loop())

    def _forget(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._port.waiting -= 1
