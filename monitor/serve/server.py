"""The daemon's HTTP server: uvicorn on a socket of its own, bounded in time and connections.

``bind`` opens the port before anything else starts (a taken port is a configuration error),
and ``make_server`` builds the server that answers on it with the port's limits (``http:``)
and TLS (``web:``). What is answered is ``api``'s; this module only holds connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections import OrderedDict
from collections.abc import Iterator
from typing import ClassVar

import h11
import structlog
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from monitor import config
from monitor.errors import ConfigError
from monitor.read import process
from monitor.serve import api
from monitor.serve import headers as webheaders

__all__ = ["bind", "make_server", "parse_listen"]

# The name its lines had when the server was wired in monitor.app: log queries find them by it.
logger = structlog.get_logger("monitor.app")
# The event loop accepts up to this many connections at a time (asyncio takes the listen
# backlog for that too)...
_BACKLOG = 128
# ... and the kernel holds up to this many until it does (capped by net.core.somaxconn): a
# burst of new connections past its queue is dropped, each client trying again 1 s, then 3 s
# later, which a kubelet probe among them reads as a failure (a flood's first second made 3,000
# such drops with the queue at 128).
_KERNEL_BACKLOG = 4096
# A flood: this many connections open at once. It has ended when at most a hundredth of them
# (or _FLOOD_LEFT, if more) are left: its silent sockets closed, a few real clients may stay.
_FLOOD = 1_000
_FLOOD_LEFT = 100


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``:port`` -> (host, port)."""
    try:
        return config.split_listen(listen)
    except ValueError as exc:
        raise ConfigError(f"listen: {exc}") from None


def bind(listen: str) -> socket.socket:
    """A listening, non-blocking socket on ``listen``; ``ConfigError`` when it cannot be."""
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only for sockets
    # made so, and uvicorn writes a response's head and body apart: without it every answer
    # on a kept-alive connection waited ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"listen: cannot listen on {listen}: {exc.strerror}") from None
    sock.listen(_BACKLOG)
    sock.setblocking(False)
    return sock


class _Flood:
    """The most connections a server had open at once since its last flood ended. When a
    flood ends, the memory its connections held goes back to the system, once, in a thread
    (``process.return_freed_memory``): left to itself, a flood of 10,500 idle connections kept
    all it took (~45 MiB) until Python's next full collection."""

    def __init__(self) -> None:
        self.peak = 0
        self._returning: asyncio.Future[process.Returned] | None = None

    def opened(self, count: int) -> None:
        """``count`` connections are open, one more than before."""
        self.peak = max(self.peak, count)

    def closed(self, count: int, loop: asyncio.AbstractEventLoop) -> None:
        """``count`` connections are left open, one fewer than before."""
        if self.peak < _FLOOD or count > max(_FLOOD_LEFT, self.peak // 100):
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


class _Protocol(H11Protocol):
    """uvicorn's HTTP/1.1, bounded in time where uvicorn waits on the client for ever.

    - A connection must send a whole request head within ``head_timeout`` of its opening, or
      of the first byte of its next request; uvicorn itself never closes a connection that
      sends nothing, or a header line every few seconds, and each holds memory and a slot of
      ``max_connections``.
    - A client that reads nothing of an answer for ``write_timeout`` is dropped: its request
      holds an admission slot (and, for an export, a database connection) until then.
    - The rest of a request body, once the answer is sent, is not waited for: the port is
      read-only and a body dripped after the answer would keep the connection for ever.
    - A connection whose request the admission gate refused is not read again until its
      ``Retry-After`` has passed (``api.HOLD`` in the request's scope): a client that
      retries at once costs the event loop nothing meanwhile.
    - uvicorn's own answer to a malformed request carries the security headers too.
    - Past ``max_connections``, a new connection closes the oldest one that waits for a
      request (``idle``): sockets opened and left silent, faster than ``head_timeout`` closes
      them, take the place of each other and not of the clients that send requests.
    - When a flood of connections has ended, the memory it held is returned (``flood``).
    """

    head_timeout: float = 5.0
    write_timeout: float = 30.0
    max_connections: int = 10_000
    security_headers: tuple[tuple[bytes, bytes], ...] = ()
    # The connections of this server waiting for a request, oldest first (one dict a server:
    # ``_serve`` makes a subclass with its own).
    idle: ClassVar[OrderedDict[_Protocol, None]] = OrderedDict()
    flood: ClassVar[_Flood] = _Flood()
    _held: asyncio.TimerHandle | None = None
    _head_timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the clock for the first request's head."""
        super().connection_made(transport)  # type: ignore[arg-type]
        self.flood.opened(len(self.connections))
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)
        self.idle[self] = None
        if len(self.connections) > self.max_connections:
            oldest = next(iter(self.idle))
            if oldest is not self:
                del self.idle[oldest]
                oldest.transport.close()

    def data_received(self, data: bytes) -> None:
        """Read as uvicorn does; the first byte of a request starts its head's clock, its
        whole head stops it."""
        waiting = self.conn.their_state is h11.IDLE
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self.idle.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()

    def pause_writing(self) -> None:
        """The client stopped reading: drop it unless it reads again in ``write_timeout``."""
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout, self._reads_nothing)

    def _reads_nothing(self) -> None:
        self._write_timer = None
        logger.info("HTTP client dropped: it read nothing of an answer in time",
                    seconds=self.write_timeout, path=self.scope.get("path") if self.scope else None)
        self.transport.abort()

    def resume_writing(self) -> None:
        """The client reads again."""
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().resume_writing()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's 400, with the headers every answer carries."""
        reason = STATUS_PHRASES[400]
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                   *self.security_headers]
        self.transport.write(self.conn.send(h11.Response(
            status_code=400, headers=headers, reason=reason)) or b"")
        self.transport.write(self.conn.send(h11.Data(data=msg.encode("ascii"))) or b"")
        self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        self.transport.close()

    def on_response_complete(self) -> None:
        """Hold the connection after a refusal; close it when its body is still coming;
        otherwise as uvicorn does."""
        scope = self.scope
        body_pending = self.conn.their_state is h11.SEND_BODY
        super().on_response_complete()
        if body_pending and not self.transport.is_closing():
            self._unset_keepalive_if_required()
            self.transport.close()
            return
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.idle[self] = None
        hold = scope.get(api.HOLD) if scope is not None else None
        if (not isinstance(hold, int) or self.transport.is_closing()
                or self.cycle.scope is not scope):
            return
        # The keep-alive timer would close a held connection; it starts again on release.
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        self.flow.pause_reading()
        self._held = self.loop.call_later(hold, self._release)

    def _release(self) -> None:
        self._held = None
        if self.transport.is_closing():
            return
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler)
        self.flow.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the timers of a connection that is gone; count it out of a flood."""
        for timer in (self._held, self._head_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._held = self._head_timer = self._write_timer = None
        self.idle.pop(self, None)
        super().connection_lost(exc)
        self.flood.closed(len(self.connections), self.loop)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (the daemon handles SIGTERM itself), and with a
    kernel queue of new connections longer than the batch the loop accepts at a time."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        for sock in sockets or ():
            sock.listen(_KERNEL_BACKLOG)  # after asyncio's listen(_BACKLOG): only the queue grows


def make_server(app: ASGIApp, http: config.Http, web: config.Web) -> uvicorn.Server:
    """The server of ``app`` with the port's limits; ``serve(sockets=[bind(...)])`` runs it."""
    protocol = type("_Protocol", (_Protocol,), {
        "head_timeout": http.head_timeout, "write_timeout": http.write_timeout,
        "max_connections": http.max_connections, "idle": OrderedDict(), "flood": _Flood(),
        "security_headers": tuple(webheaders.headers(tls=web.tls_cert_file is not None))})
    return _Server(uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=3,
        backlog=_BACKLOG, http=protocol, proxy_headers=False,
        timeout_keep_alive=http.keep_alive,  # type: ignore[arg-type]
        ssl_certfile=web.tls_cert_file, ssl_keyfile=web.tls_key_file))
