"""One GET of a web page, lean: h11 over asyncio streams, connections kept alive per host.

The URL checks send one small GET per listed page, and at 50,000 pages the cost of
a request through httpx and httpcore (a connection pool of AnyIO locks and cancel scopes, each
asking which async library runs) was two thirds of a check's CPU. A page's
answer needs less: the status, the headers and the first bytes of the body, no redirects
followed (the caller judges each hop), no cookies, no proxy. ``Pages`` sends it with h11 (the
HTTP/1.1 state machine httpcore itself uses) on asyncio's streams and keeps the connection for
the next page of the same host when the answer was read to its end; a body longer than the
caller wants closes its connection instead of being read. What the fetch stage decides stays
there (``Fetcher.probe``): the address policy of each hop, the per-host slots, the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import h11

from monitor.core.errors import FetchError
from monitor.net.inflate import Body, layers

__all__ = ["Answered", "Pages"]

READ_BYTES = 64 * 1024
DRAIN_LIMIT = 64 * 1024  # the body of an answer not wanted is read this far to keep its connection
IDLE_PER_HOST = 16
_UNBOUNDED = 2**62


@dataclass(frozen=True, slots=True)
class Answered:
    """A page's answer: status, headers (names in lower case, in order) and body's first bytes."""

    status: int
    headers: list[tuple[str, str]]
    head: bytes
    truncated: bool = False  # the body went on past ``body_limit``: ``head`` is its start


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=64 * 1024)
        self.peer: str | None = None
        peer = writer.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            self.peer = str(peer[0])

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Pages:
    """Keep-alive HTTP/1.1 connections for GETs of pages, per (scheme, host, port)."""

    def __init__(self, tls: Callable[[], ssl.SSLContext]) -> None:
        self._tls = tls
        self._context: ssl.SSLContext | None = None
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

    async def get(self, url: str, scheme: str, host: str, port: int, target: bytes,
                  headers: list[tuple[str, str]], addresses: Sequence[str], *,
                  connect_timeout: float, read_timeout: float, body_limit: int,
                  check_peer: Callable[[str], None]) -> Answered:
        """GET ``target`` from the host, connecting to one of ``addresses`` (the vetted ones;
        ``host`` is never resolved again) or reusing a kept-alive connection whose peer
        ``check_peer`` lets through; the first ``body_limit`` decompressed bytes of a 2xx
        body. Raises ``FetchError`` as a fetch does (timeout, connect, protocol)."""
        key = (scheme, host, port)
        idle = self._idle.get(key, [])
        while idle:
            conn = idle.pop()
            if not conn.usable() or not _allowed(conn, check_peer):
                conn.close()  # gone, or made for a target whose policy is looser
                continue
            try:
                return await self._exchange(conn, key, url, target, headers, read_timeout,
                                            body_limit, reused=True)
            except _Stale:
                conn.close()  # closed by the server while idle: a new connection
        conn = await self._connect(url, scheme, host, addresses, port, connect_timeout)
        if conn.peer is not None:
            try:
                check_peer(conn.peer)
            except FetchError:
                conn.close()
                raise
        try:
            return await self._exchange(conn, key, url, target, headers, read_timeout,
                                        body_limit, reused=False)
        except _Stale:
            conn.close()
            raise FetchError("protocol", f"{url}: the server closed the connection without "
                             "an answer") from None

    async def _connect(self, url: str, scheme: str, host: str, addresses: Sequence[str],
                       port: int, connect_timeout: float) -> _Connection:
        context = None
        if scheme == "https":
            if self._context is None:
                self._context = self._tls()
            context = self._context
        reason = "no address"
        for ip in addresses:
            try:
                async with asyncio.timeout(connect_timeout):
                    # The address, not the name; the name goes in the handshake (SNI and the
                    # certificate's check) and in the Host header.
                    reader, writer = await asyncio.open_connection(
                        ip, port, ssl=context, server_hostname=host if context else None,
                        limit=READ_BYTES)
            except TimeoutError:
                raise FetchError("timeout", f"connect timeout fetching {url}") from None
            except ssl.SSLError as exc:
                raise FetchError("tls", f"TLS error fetching {url}: {exc}") from None
            except OSError as exc:  # the next address may answer
                reason = exc.strerror or str(exc) or type(exc).__name__
                continue
            return _Connection(reader, writer)
        raise FetchError("connect", f"cannot connect to fetch {url}: {reason}")

    async def _exchange(self, conn: _Connection, key: tuple[str, str, int], url: str,
                        target: bytes, headers: list[tuple[str, str]],
                        read_timeout: float, body_limit: int, *, reused: bool) -> Answered:
        h = conn.h11
        try:
            conn.writer.write(h.send(h11.Request(method="GET", target=target, headers=headers))
                              + (h.send(h11.EndOfMessage()) or b""))
            response = await self._next(conn, url, read_timeout, reused=reused)
            if not isinstance(response, h11.Response):
                raise FetchError("protocol", f"unexpected answer from {url}")
            answer_headers = [(name.decode("latin-1").lower(), value.decode("latin-1"))
                              for name, value in response.headers]
            status = response.status_code
            wanted = body_limit if 200 <= status < 300 else 0
            encoding = ",".join(v for k, v in answer_headers if k == "content-encoding")
            # Inflated in pieces of at most 64 KiB, and no piece is asked for past ``wanted``:
            # the Body's own bound (a sitemap's) never stops a page.
            body = Body(layers(encoding, url), url, _UNBOUNDED) if wanted else None
            parts: list[bytes] = []
            size = drained = 0
            while True:
                event = await self._next(conn, url, read_timeout, reused=False)
                if isinstance(event, h11.EndOfMessage):
                    if body is not None and size < wanted:
                        _take(body, None, parts, size, wanted)
                    break
                if not isinstance(event, h11.Data):
                    raise FetchError("protocol", f"unexpected answer from {url}")
                if body is not None and size < wanted:
                    size = _take(body, bytes(event.data), parts, size, wanted)
                    continue
                drained += len(event.data)
                if size >= wanted and (body is not None or drained > DRAIN_LIMIT):
                    conn.close()  # the rest is not wanted: not read, the connection goes
                    return Answered(status, answer_headers, b"".join(parts)[:body_limit],
                                    truncated=body is not None)
        except (h11.ProtocolError, ConnectionError, OSError) as exc:
            conn.close()
            if reused and isinstance(exc, ConnectionError):
                raise _Stale from None
            raise FetchError("protocol", f"HTTP protocol error fetching {url}: {exc}") from None
        except BaseException:
            conn.close()
            raise
        self._keep(conn, key)
        return Answered(status, answer_headers, b"".join(parts)[:body_limit],
                        truncated=bool(wanted) and size >= wanted)

    async def _next(self, conn: _Connection, url: str, read_timeout: float, *,
                    reused: bool) -> object:
        h = conn.h11
        while True:
            event = h.next_event()
            if event is not h11.NEED_DATA:
                if isinstance(event, h11.ConnectionClosed):
                    if reused:
                        raise _Stale
                    raise FetchError("protocol", f"{url}: the connection closed mid-answer")
                return event
            try:
                async with asyncio.timeout(read_timeout):
                    data = await conn.reader.read(READ_BYTES)
            except TimeoutError:
                raise FetchError("timeout", f"read timeout fetching {url}") from None
            if not data and reused and h.their_state is h11.SEND_RESPONSE:
                raise _Stale
            h.receive_data(data)

    def _keep(self, conn: _Connection, key: tuple[str, str, int]) -> None:
        h = conn.h11
        if h.our_state is h11.DONE and h.their_state is h11.DONE:
            h.start_next_cycle()
            idle = self._idle.setdefault(key, [])
            if len(idle) < IDLE_PER_HOST:
                idle.append(conn)
                return
        conn.close()


def _allowed(conn: _Connection, check_peer: Callable[[str], None]) -> bool:
    if conn.peer is None:
        return False
    try:
        check_peer(conn.peer)
    except FetchError:
        return False
    return True


def _take(body: Body, data: bytes | None, parts: list[bytes], size: int, wanted: int) -> int:
    """Decompress the next piece (None: the end) into ``parts`` until ``wanted`` bytes are
    there; return the size taken."""
    for out in body.feed(data) if data is not None else body.finish():
        parts.append(out)
        size += len(out)
        if size >= wanted:
            break
    return size


class _Stale(Exception):
    """A kept-alive connection the server had closed: the request goes on a new one."""
