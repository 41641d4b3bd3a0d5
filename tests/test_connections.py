"""monitor.net.connections: the streams of httpx's pool, over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import typing
from collections.abc import Iterator

import httpcore
import httpx
import pytest
from httpserver import Reply, TestServer

from monitor import config
from monitor.net import connections
from monitor.read.fetch import Fetcher

pytestmark = pytest.mark.anyio

SETTINGS = config.Defaults(timeout=5, connect_timeout=2, read_timeout=2)
NO_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class OneShotServer:
    """Answers each connection's first request with 200 and then closes it, without saying
    so (no ``Connection: close``): the client's pool sees a kept-alive connection that the
    server has since closed, as a server's keep-alive timeout leaves it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.connections = 0
        self.closed = threading.Event()  # set after each close
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                self.connections += 1
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = conn.recv(65536)
                    if not piece:
                        break
                    data += piece
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            self.closed.set()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def one_shot() -> Iterator[OneShotServer]:
    server = OneShotServer()
    yield server
    server.close()


async def test_a_connection_the_server_closed_while_idle_is_not_used_again(
    one_shot: OneShotServer,
) -> None:
    """The pool asks an idle connection whether its socket is readable (the server's FIN):
    answered wrongly, the second request would go out on the dead connection and fail."""
    fetcher = Fetcher()
    url = f"http://127.0.0.1:{one_shot.port}/s.xml"
    try:
        for _ in range(3):
            one_shot.closed.clear()
            async with fetcher.fetch(url, SETTINGS, allow_private=True) as response:
                assert response.status == 200
                assert b"".join([c async for c in response.chunks()]) == b"ok"
            assert await asyncio.to_thread(one_shot.closed.wait, 5)
            await asyncio.sleep(0.05)  # the FIN reaches this side
    finally:
        await fetcher.aclose()
    assert one_shot.connections == 3


async def test_a_stream_knows_its_peer_and_whether_a_read_would_return() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stream = await connections.Backend().connect_tcp("127.0.0.1", port, timeout=5)
    peer, _ = listener.accept()
    try:
        assert isinstance(stream, connections.Stream)
        assert stream.get_extra_info("server_addr") == ("127.0.0.1", port)
        assert stream.get_extra_info("client_addr")[0] == "127.0.0.1"  # anyio's, as before
        assert stream.get_extra_info("is_readable") is False  # idle: nothing to read
        peer.sendall(b"x")
        await asyncio.sleep(0.05)
        assert stream.get_extra_info("is_readable") is True
        assert await stream.read(10, timeout=5) == b"x"
        assert stream.get_extra_info("is_readable") is False
        await stream.write(b"ping", timeout=5)
        assert peer.recv(10) == b"ping"
        peer.close()
        await asyncio.sleep(0.05)
        assert stream.get_extra_info("is_readable") is True  # the b"" of a closed peer
    finally:
        await stream.aclose()
        listener.close()
        with contextlib.suppress(OSError):
            peer.close()


async def test_a_read_asks_for_at_least_read_bytes_and_loses_nothing() -> None:
    """httpcore asks for 64 KiB; a stream hands over as much as asyncio read off the socket."""
    listener = socket.create_server(("127.0.0.1", 0))
    stream = await connections.Backend().connect_tcp("127.0.0.1", listener.getsockname()[1],
                                                     timeout=5)
    peer, _ = listener.accept()
    data = bytes(range(256)) * 4096  # 1 MiB, every byte's position visible
    try:
        threading.Thread(target=peer.sendall, args=(data,), daemon=True).start()
        await asyncio.sleep(0.2)  # all of it waits in the socket's buffers
        got = [await stream.read(65536, timeout=5)]
        assert 65536 < len(got[0]) <= connections.READ_BYTES
        while sum(map(len, got)) < len(data):
            got.append(await stream.read(65536, timeout=5))
        assert b"".join(got) == data
    finally:
        await stream.aclose()
        listener.close()
        peer.close()


async def test_big_bodies_keep_their_framing_on_a_kept_alive_connection(
    http_server: TestServer,
) -> None:
    """Reads past 64 KiB never take bytes of the next response: h11 frames each one."""
    bodies = {f"/{n}.xml": bytes([n]) * (3 * 2**20 + n) for n in range(1, 4)}
    for path, body in bodies.items():
        http_server.route(path, Reply(body=body))
    transport = connections.transport(httpx.Limits(), NO_TLS)
    async with httpx.AsyncClient(transport=transport) as client:
        for path, body in [*bodies.items(), *bodies.items()]:
            response = await client.get(http_server.url(path))
            assert response.content == body
    assert len({r.client for r in http_server.requests}) == 1


def test_a_socket_that_is_gone_counts_as_readable() -> None:
    a, b = socket.socketpair()
    with b:
        assert connections.readable(a) is False
        a.close()
        assert connections.readable(a) is True  # fileno() is -1 now
    assert connections.readable(None) is True


async def test_the_fetchers_connections_are_these_streams(http_server: TestServer) -> None:
    """httpx takes no pool and no network backend: the transport's pool is replaced after the
    fact. Should a release of httpx move it, this fails (the fetcher would work, only slower)."""
    http_server.route("/s.xml", Reply(body=b"<urlset/>"))
    transport = connections.transport(httpx.Limits(), NO_TLS)
    assert isinstance(transport._pool, connections.Pool)
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(2):
            response = await client.get(http_server.url("/s.xml"))
            assert response.status_code == 200
            assert isinstance(response.extensions["network_stream"], connections.Stream)
    assert len({r.client for r in http_server.requests}) == 1  # kept alive, reused


# -- the pool ------------------------------------------------------------------------------


def _pool(**limits: typing.Any) -> connections.Pool:
    return connections.Pool(ssl_context=NO_TLS, network_backend=connections.Backend(), **limits)


async def _get(pool: connections.Pool, url: str) -> int:
    response = await pool.request("GET", url)
    return response.status


async def test_the_pool_reuses_a_kept_alive_connection_and_keeps_at_most_its_limit(
    http_server: TestServer,
) -> None:
    http_server.route("/slow", Reply(body=b"ok", delay=0.2))
    http_server.route("/fast", Reply(body=b"ok"))
    pool = _pool(max_connections=10, max_keepalive_connections=2)
    async with pool:
        statuses = await asyncio.gather(*(_get(pool, http_server.url("/slow")) for _ in range(5)))
        assert statuses == [200] * 5
        assert len({r.client for r in http_server.requests}) == 5  # five at once: five
        # httpcore's rule: idle connections beyond the keep-alive limit are closed.
        assert len(pool.connections) == 2
        for _ in range(3):
            assert await _get(pool, http_server.url("/fast")) == 200
        assert len(pool.connections) == 2
    assert len({r.client for r in http_server.requests}) == 5  # the kept ones were reused


async def test_the_pool_opens_at_most_max_connections_and_queues_the_rest(
    http_server: TestServer,
) -> None:
    http_server.route("/slow", Reply(body=b"ok", delay=0.2))
    pool = _pool(max_connections=2, max_keepalive_connections=2)
    async with pool:
        statuses = await asyncio.gather(*(_get(pool, http_server.url("/slow")) for _ in range(6)))
    assert statuses == [200] * 6
    assert len({r.client for r in http_server.requests}) == 2


async def test_a_full_pool_closes_an_idle_connection_to_make_room_for_another_origin(
    http_server: TestServer,
) -> None:
    http_server.route("/s.xml", Reply(body=b"ok"))
    other = f"http://localhost:{http_server.port}/s.xml"  # another origin, the same server
    pool = _pool(max_connections=1, max_keepalive_connections=1)
    async with pool:
        assert await _get(pool, http_server.url("/s.xml")) == 200
        first = pool.connections[0]
        assert await _get(pool, other) == 200
        assert first.is_closed()
        assert pool.connections != [first]


async def test_a_connection_past_its_keep_alive_is_not_reused(http_server: TestServer) -> None:
    http_server.route("/s.xml", Reply(body=b"ok"))
    pool = _pool(keepalive_expiry=0.1)
    async with pool:
        assert await _get(pool, http_server.url("/s.xml")) == 200
        await asyncio.sleep(0.3)
        assert await _get(pool, http_server.url("/s.xml")) == 200
    assert len({r.client for r in http_server.requests}) == 2


async def test_the_sweep_closes_idle_connections_the_server_closed(
    one_shot: OneShotServer, http_server: TestServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle connection to a host the daemon does not ask again is closed by the sweep, not
    kept (its socket in CLOSE_WAIT) until that host's next check."""
    monkeypatch.setattr(connections, "SWEEP_SECONDS", 0.2)
    http_server.route("/s.xml", Reply(body=b"ok"))
    pool = _pool()
    async with pool:
        assert await _get(pool, f"http://127.0.0.1:{one_shot.port}/s.xml") == 200
        assert await asyncio.to_thread(one_shot.closed.wait, 5)
        dead = [c for c in pool.connections if c.can_handle_request(
            httpcore.URL(f"http://127.0.0.1:{one_shot.port}/").origin)]
        assert len(dead) == 1
        await asyncio.sleep(0.3)
        assert await _get(pool, http_server.url("/s.xml")) == 200
        assert dead[0] not in pool.connections
        assert dead[0].is_closed()
