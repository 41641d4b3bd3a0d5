"""``Fetcher.probe`` over ``net.pageclient`` against a real HTTP/1.1 server on 127.0.0.1: one GET
a hop, kept-alive connections, the body's first bytes only, the address policy per hop."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from httpserver import Reply, TestServer, closed_port, gzip_bytes

from monitor.config import Defaults
from monitor.core.errors import FetchError
from monitor.read.fetch import Fetcher

SETTINGS = Defaults(timeout=5, connect_timeout=2, read_timeout=2)


def probe(url: str, *, body_limit: int = 1024, times: int = 1,
          allow_private: bool = True) -> list[object]:
    async def go() -> list[object]:
        fetcher = Fetcher()
        try:
            return [await fetcher.probe(url, SETTINGS, body_limit=body_limit,
                                        allow_private=allow_private) for _ in range(times)]
        finally:
            await fetcher.aclose()

    return asyncio.run(go())


def test_connections_are_kept_alive_between_pages(http_server: TestServer) -> None:
    http_server.route("/p", Reply(body=b"<html>page</html>", headers={"Content-Type": "text/html"}))
    answers = probe(http_server.url("/p"), times=20)
    assert [(a.status, a.head) for a in answers] == [(200, b"<html>page</html>")] * 20
    assert len({r.client for r in http_server.requests}) == 1  # one connection
    first = http_server.requests[0]
    assert first.headers["host"] == http_server.url("").split("//")[1]
    assert first.headers["user-agent"].startswith("sitemap-monitor/")
    assert first.headers["accept"].startswith("text/html")


def test_only_the_first_bytes_of_a_big_page_are_read(http_server: TestServer) -> None:
    big = b"<html><head><title>x</title></head><body>" + b"y" * 5_000_000 + b"</body></html>"
    http_server.route("/big", Reply(body=big, headers={"Content-Type": "text/html"}))
    http_server.route("/small", Reply(body=b"ok"))
    answer = probe(http_server.url("/big"), body_limit=1000)[0]
    assert answer.head == big[:1000]
    assert answer.truncated  # the answer says it was cut
    # the big body was not read: its connection went, and the next page has a new one
    small = probe(http_server.url("/small"))[0]
    assert (small.head, small.truncated) == (b"ok", False)


def test_a_gzip_page_is_decompressed(http_server: TestServer) -> None:
    page = b"<html><head><meta name='robots' content='noindex'></head></html>" * 50
    http_server.route("/z", Reply(body=gzip_bytes(page), headers={
        "Content-Type": "text/html", "Content-Encoding": "gzip"}))
    whole = probe(http_server.url("/z"), body_limit=100_000)[0]
    assert (whole.head, whole.truncated) == (page, False)
    # a compressed page far over the limit is only read to the limit
    huge = b"a" * 10_000_000
    http_server.route("/bomb", Reply(body=gzip_bytes(huge), headers={
        "Content-Type": "text/html", "Content-Encoding": "gzip"}))
    assert probe(http_server.url("/bomb"), body_limit=2000)[0].head == huge[:2000]


def test_redirects_and_errors_are_answers_not_followed(http_server: TestServer) -> None:
    http_server.route("/moved", Reply(301, b"moved", headers={"Location": "/there"}))
    http_server.route("/gone", Reply(410, b"gone" * 1000))
    moved, gone = probe(http_server.url("/moved"))[0], probe(http_server.url("/gone"))[0]
    assert (moved.status, moved.location, moved.head) == (301, http_server.url("/there"), b"")
    assert (gone.status, gone.head) == (410, b"")
    assert not http_server.requests_to("/there")


def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    """A server that answers one request per connection, then closes it without saying so."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    connections = []

    def serve() -> None:
        for _ in range(3):
            conn, _ = listener.accept()
            connections.append(conn)
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    answers = probe(f"http://127.0.0.1:{port}/p", times=3)
    thread.join(5)
    listener.close()
    assert [a.head for a in answers] == [b"ok"] * 3
    assert len(connections) == 3


def test_no_answer_is_a_fetch_error() -> None:
    with pytest.raises(FetchError) as refused:
        probe(f"http://127.0.0.1:{closed_port()}/p")
    assert refused.value.kind == "connect"
    with pytest.raises(FetchError) as blocked:
        probe("http://169.254.169.254/latest/meta-data/")
    assert "169.254.169.254" in str(blocked.value)


def test_a_private_address_needs_the_targets_leave(http_server: TestServer) -> None:
    http_server.route("/p", Reply(body=b"ok"))
    with pytest.raises(FetchError):
        probe(http_server.url("/p"), allow_private=False)
    assert not http_server.requests_to("/p")
