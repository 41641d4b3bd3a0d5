"""The daemon's HTTP server: uvicorn on a socket of its own, bounded in time and connections.

``bind`` opens the port before anything else starts (a taken port is a configuration error),
and ``make_server`` builds the server that answers on it with the port's limits (``http:``)
and TLS (``web:``). What is answered is ``api``'s; this module only holds connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Iterator
from typing import ClassVar

import h11
import structlog
import uvicorn
from h11._receivebuffer import ReceiveBuffer
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from monitor import config
from monitor.core.errors import ConfigError
from monitor.serve import api
from monitor.serve import headers as webheaders
from monitor.serve.port import Port

__all__ = ["Server", "bind", "make_server", "parse_listen"]

# The name its lines had when the server was wired in the daemon's app: log queries find them by it.
logger = structlog.get_logger("monitor.app")
# The kernel holds up to this many new connections until the port accepts them (capped by
# net.core.somaxconn): a burst past its queue is dropped, each client trying again 1 s, then
# 3 s later, which a kubelet probe among them reads as a failure (a flood's first second made
# 3,000 such drops with the queue at 128).
_BACKLOG = 4096


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


class _StrictHeads(ReceiveBuffer):
    """h11's receive buffer, refusing the request heads that h11 reads leniently and a proxy
    in front may read otherwise: a line ended by a bare LF (or a bare CR), a header line
    folded onto the one before (obs-fold), and a body framed both by Content-Length and by
    Transfer-Encoding. A proxy that saw such a head differently could be made to pass two
    requests where the daemon sees one, or the other way round. (h11 has no strict mode; its
    buffer is what reads a head's lines, so this is where they are seen whole.)"""

    def maybe_extract_lines(self) -> list[bytearray] | None:
        """The lines of a whole head, as h11 reads them; ``h11.RemoteProtocolError`` (a 400)
        for a head of one of those kinds."""
        data = self._data
        end = 1 if data[:1] == b"\n" else None
        if end is None:  # where h11 finds the head's end, searched as far as h11 has
            found = _HEAD_END.search(data, self._multiple_lines_search)
            end = None if found is None else found.end()
        if end is not None:
            head = bytes(data[:end])
            crlf = head.count(b"\r\n")
            if head.count(b"\n") != crlf or head.count(b"\r") != crlf:
                raise h11.RemoteProtocolError("a line not ended by CRLF", 400)
            if b"\r\n " in head or b"\r\n\t" in head:
                raise h11.RemoteProtocolError("a folded header line (obs-fold)", 400)
            names = {line.partition(b":")[0].lower() for line in head.split(b"\r\n")[1:]}
            if b"content-length" in names and b"transfer-encoding" in names:
                # h11 would go by Transfer-Encoding; a proxy by Content-Length, maybe
                raise h11.RemoteProtocolError("both Content-Length and Transfer-Encoding", 400)
        return super().maybe_extract_lines()


# The end of a request head as h11 finds it (h11._receivebuffer.blank_line_regex).
_HEAD_END = re.compile(b"\n\r?\n", re.MULTILINE)


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
    - uvicorn's own answer to a malformed request carries the security headers too, and a
      head with a bare LF, a folded header line or a double framing is such a request
      (``_StrictHeads``).
    - A client that half-closes after its request (sends all it will, then waits) gets its
      answer, then the connection closes; asyncio and uvicorn closed it at once, unanswered.

    A connection comes to it once it has sent a byte (``port.Port`` accepts and holds it
    until then); how many are open, which are idle, and a flood's end are the ``port``'s.
    """

    write_timeout: float = 30.0
    security_headers: tuple[tuple[bytes, bytes], ...] = ()
    # The connections of one server (``make_server`` makes a subclass with its own).
    port: ClassVar[Port]
    # When the connection opened, on the loop's clock (set as the port hands it over).
    opened: float
    _held: asyncio.TimerHandle | None = None
    _half_closed = False
    _head_timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Go on with the clock of the first request's head, started when it opened."""
        super().connection_made(transport)  # type: ignore[arg-type]
        self.conn._receive_buffer = _StrictHeads()  # still empty: no byte is read yet
        self._head_timer = self.loop.call_at(self.opened + self.port.head_timeout,
                                             self._head_too_slow)
        self.port.idle[self] = None

    def data_received(self, data: bytes) -> None:
        """Read as uvicorn does; the first byte of a request starts its head's clock, its
        whole head stops it."""
        waiting = self.conn.their_state is h11.IDLE
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.port.head_timeout,
                                                    self._head_too_slow)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self.port.idle.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio's own type
        """The client sent all it will (a half-close): answer the request it made, if any,
        then close (True keeps the transport open for the answer); otherwise close now.
        asyncio keeps no TLS connection half open: there, too, it closes now."""
        if (self.cycle is not None and not self.cycle.response_complete
                and self.scheme != "https"):
            self._half_closed = True
            return True
        return None

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
        if self._half_closed and not self.transport.is_closing() and (
                self.cycle.response_complete):  # no request of the client's left to answer
            self.transport.close()
            return
        if body_pending and not self.transport.is_closing():
            self._unset_keepalive_if_required()
            self.transport.close()
            return
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.port.idle[self] = None
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
        """Forget the timers of a connection that is gone; count it out."""
        for timer in (self._held, self._head_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._held = self._head_timer = self._write_timer = None
        super().connection_lost(exc)
        self.port.closed(self, self.loop)


class Server(uvicorn.Server):
    """uvicorn without its own signal handling (the daemon handles SIGTERM itself), whose
    ``port`` accepts the connections and holds each until it sends a byte."""

    def __init__(self, config: uvicorn.Config, port: Port) -> None:
        super().__init__(config)
        self.port = port
        port.active = self.server_state.connections

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup, with the port accepting on ``sockets`` instead of asyncio."""
        await super().startup(sockets=[])
        protocol: type[_Protocol] = self.config.http_protocol_class  # type: ignore[assignment]

        def make(opened: float) -> _Protocol:
            made = protocol(config=self.config, server_state=self.server_state,
                            app_state=self.lifespan.state)
            made.opened = opened
            return made

        for sock in sockets or ():
            self.port.serve(sock, make, self.config.ssl)
        self.servers = [self.port]  # type: ignore[list-item]  # closed as asyncio's would be


def make_server(app: ASGIApp, http: config.Http, web: config.Web) -> Server:
    """The server of ``app`` with the port's limits; ``serve(sockets=[bind(...)])`` runs it."""
    port = Port(max_connections=http.max_connections, head_timeout=http.head_timeout)
    protocol = type("_Protocol", (_Protocol,), {
        "write_timeout": http.write_timeout, "port": port,
        "security_headers": tuple(webheaders.headers(tls=web.tls_cert_file is not None))})
    return Server(uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=3,
        http=protocol, proxy_headers=False,
        timeout_keep_alive=http.keep_alive,  # type: ignore[arg-type]
        ssl_certfile=web.tls_cert_file, ssl_keyfile=web.tls_key_file), port)
