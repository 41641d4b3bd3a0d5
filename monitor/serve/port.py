"""The connections one port holds: accepting them, how many are open, which wait for a
request, a flood's end.

A new connection is held as a bare socket until its first byte arrives; only then does it
become an asyncio transport with the server's HTTP protocol: together ~4.6 KiB of Python
objects a connection, where a socket opened and left silent costs ~0.6 KiB. A flood of
them takes that much less memory, and leaves that much less of Python's allocator behind
once it has ended (see ``Flood``).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import socket
import ssl
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Protocol

import structlog

from monitor.read import process

__all__ = ["Flood", "Port"]

logger = structlog.get_logger("monitor.app")
# A flood: this many connections open at once. It has ended when at most a hundredth of them
# (or FLOOD_LEFT, if more) are left: its silent sockets closed, a few real clients may stay.
FLOOD = 1_000
FLOOD_LEFT = 100
# Connections accepted at a time, each time the listening socket is readable (asyncio's own
# server takes its listen backlog for that).
_ACCEPT_BATCH = 128
# accept() errors that a moment may cure: asyncio's server stops accepting for a second.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


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
    """One server's connections, and the accepting of them.

    A new connection is held as a bare socket (``waiting``) until its first byte arrives;
    only then is it made an asyncio transport with the server's HTTP protocol (``make``),
    which is told when it ``opened``. Those the HTTP protocol holds are ``active`` (uvicorn's
    own set); ``idle``, oldest first, are those among them that wait for their next request.

    - A waiting socket that sends nothing within ``head_timeout`` is closed (one timer for
      all, at the oldest one's deadline).
    - Past ``max_connections``, a new connection closes the oldest waiting socket, or else the
      oldest idle connection: sockets opened and left silent, faster than ``head_timeout``
      closes them, take the place of each other and not of the clients that send requests.
    - When a flood of connections has ended, the memory it held is returned (``flood``).
    """

    def __init__(self, max_connections: int, head_timeout: float) -> None:
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.waiting: OrderedDict[socket.socket, float] = OrderedDict()
        self.active: Collection[object] = ()
        self.idle: OrderedDict[_Closable, None] = OrderedDict()
        self.flood = Flood()
        self._listening: list[socket.socket] = []
        self._expiry: asyncio.TimerHandle | None = None
        self._handing: set[asyncio.Task[None]] = set()
        self._make: Callable[[float], asyncio.Protocol] | None = None
        self._ssl: ssl.SSLContext | None = None

    def open_connections(self) -> int:
        """Every connection open on the port."""
        return len(self.waiting) + len(self.active)

    def serve(self, sock: socket.socket, make: Callable[[float], asyncio.Protocol],
              tls: ssl.SSLContext | None) -> None:
        """Accept on the listening ``sock``; hand each connection, once it has sent a byte, to
        the protocol ``make(opened)`` builds, under ``tls`` when given."""
        self._make, self._ssl = make, tls
        self._listening.append(sock)
        asyncio.get_running_loop().add_reader(sock.fileno(), self._accept, sock)

    def closed(self, connection: _Closable, loop: asyncio.AbstractEventLoop) -> None:
        """``connection``, which the HTTP protocol held, is gone (and out of ``active``)."""
        self.idle.pop(connection, None)
        self.flood.closed(self.open_connections(), loop)

    def close(self) -> None:
        """Stop accepting, and close the sockets that have sent nothing (as ``asyncio.Server``
        does, for uvicorn's shutdown)."""
        loop = asyncio.get_running_loop()
        for sock in self._listening:
            loop.remove_reader(sock.fileno())
        self._listening.clear()
        for conn in list(self.waiting):
            self._forget(conn, loop)
            conn.close()
        for task in self._handing:
            task.cancel()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    async def wait_closed(self) -> None:
        """Nothing to wait for once ``close`` has run (``asyncio.Server``'s counterpart)."""

    def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _address = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise  # the event loop logs it and goes on
                logger.warning("cannot accept a connection; trying again in 1 s",
                               error=exc.strerror)
                loop.remove_reader(sock.fileno())
                loop.call_later(1.0, self._resume, sock)
                return
            conn.setblocking(False)
            opened = loop.time()
            self.waiting[conn] = opened
            loop.add_reader(conn.fileno(), self._readable, conn)
            if self._expiry is None:
                self._expiry = loop.call_at(opened + self.head_timeout, self._expire)
            count = self.open_connections()
            self.flood.opened(count)
            if count > self.max_connections:
                self._make_room(conn, loop)

    def _resume(self, sock: socket.socket) -> None:
        if sock in self._listening:
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept, sock)

    def _make_room(self, new: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        oldest = next(iter(self.waiting))
        if oldest is not new:
            self._drop(oldest, loop)
        elif self.idle:
            idle = next(iter(self.idle))
            del self.idle[idle]
            idle.transport.close()

    def _readable(self, conn: socket.socket) -> None:
        """The first byte (or the end): hand the connection over, or close it."""
        try:
            first = conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):  # not readable after all: wait on
            return
        except OSError:  # reset by the client
            first = b""
        loop = asyncio.get_running_loop()
        if not first:
            self._drop(conn, loop)
            return
        task = loop.create_task(self._hand_over(conn, self._forget(conn, loop)))
        self._handing.add(task)
        task.add_done_callback(self._handing.discard)

    async def _hand_over(self, conn: socket.socket, opened: float) -> None:
        assert self._make is not None
        make = functools.partial(self._make, opened)
        loop = asyncio.get_running_loop()
        try:
            if self._ssl is None:
                await loop.connect_accepted_socket(make, conn)
            else:  # the handshake, too, within the time a request head has
                await loop.connect_accepted_socket(make, conn, ssl=self._ssl,
                                                   ssl_handshake_timeout=self.head_timeout)
        except OSError:  # a reset, no TLS, a handshake out of time: nothing to answer
            conn.close()
        except asyncio.CancelledError:  # the server is stopping
            conn.close()
            raise

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        self._expiry = None
        now = loop.time()
        while self.waiting:
            conn, opened = next(iter(self.waiting.items()))
            if opened + self.head_timeout > now:
                self._expiry = loop.call_at(opened + self.head_timeout, self._expire)
                return
            self._drop(conn, loop)

    def _drop(self, conn: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self._forget(conn, loop)
        conn.close()
        self.flood.closed(self.open_connections(), loop)

    def _forget(self, conn: socket.socket, loop: asyncio.AbstractEventLoop) -> float:
        loop.remove_reader(conn.fileno())
        return self.waiting.pop(conn)
