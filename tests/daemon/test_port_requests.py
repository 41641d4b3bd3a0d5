"""What the daemon's port makes of a request's bytes, over raw sockets to a real daemon: a
client that half-closes after its request is answered; line endings other than CRLF and
folded header lines are refused with a 400 (a proxy in front that reads them otherwise could
be made to see two requests where the daemon sees one, or one where it sees two)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from harness import Daemon, write_config


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """The port of a daemon without targets."""
    tmp = tmp_path_factory.mktemp("port")
    daemon = Daemon(write_config(tmp / "c.yaml", f"sqlite:///{tmp}/m.db", [],
                                extra="http: {keep_alive: 1s}\n"))
    try:
        host, port = daemon.started()["listen"].rsplit(":", 1)
        yield host, int(port)
    finally:
        daemon.stop()


def _exchange(address: tuple[str, int], request: bytes, *, half_close: bool = False) -> bytes:
    """Send ``request`` (then half-close, if asked); everything read until the daemon closes."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
            if not half_close and b"\r\n\r\n" in received and b"400" in received[:13]:
                break
        return received


@pytest.mark.parametrize("request_bytes", [
    b"GET /healthz HTTP/1.1\r\nHost: monitor\r\n\r\n",
    b"GET /api/v1/targets HTTP/1.1\r\nHost: monitor\r\n\r\n",  # answered from a database thread
    b"GET /api/v1/targets HTTP/1.0\r\n\r\n",
])
def test_a_request_then_a_half_close_is_answered(
    address: tuple[str, int], request_bytes: bytes,
) -> None:
    answer = _exchange(address, request_bytes, half_close=True)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    assert len(body) == length  # all of it, and then the daemon closed


def test_a_half_close_with_two_requests_answers_both(address: tuple[str, int]) -> None:
    answer = _exchange(address, b"GET /healthz HTTP/1.1\r\nHost: m\r\n\r\n" * 2, half_close=True)
    assert answer.count(b"HTTP/1.1 200 ") == 2, answer


@pytest.mark.parametrize("request_bytes", [
    b"GET /healthz HTTP/1.1\nHost: monitor\n\n",  # every line
    b"GET /healthz HTTP/1.1\nHost: monitor\r\n\r\n",  # the request line
    b"GET /healthz HTTP/1.1\r\nHost: monitor\nX-Other: 1\r\n\r\n",  # a header line
    b"GET /healthz HTTP/1.1\r\nHost: monitor\r\n\n",  # the blank line
    b"GET /healthz HTTP/1.1\r\nHost: monitor\r\nX-Folded: a\r\n b\r\n\r\n",  # obs-fold, space
    b"GET /healthz HTTP/1.1\r\nHost: monitor\r\nX-Folded: a\r\n\tb\r\n\r\n",  # obs-fold, tab
    b"GET /healthz HTTP/1.1\r\n Host: monitor\r\n\r\n",  # a first header line folded
    b"GET /healthz HTTP/1.1\r\nHost: m\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: xchunked\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: m\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: m\r\ntransfer-encoding: chunked\r\n"
    b"content-length: 5\r\n\r\n0\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: m\r\nTransfer-Encoding : chunked\r\n\r\n",
])
def test_bare_line_feeds_and_folded_headers_are_refused(
    address: tuple[str, int], request_bytes: bytes,
) -> None:
    answer = _exchange(address, request_bytes)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"content-security-policy" in answer.lower()


def test_a_second_request_with_bare_line_feeds_is_refused_too(address: tuple[str, int]) -> None:
    answer = _exchange(address, b"GET /healthz HTTP/1.1\r\nHost: m\r\n\r\n"
                                b"GET /healthz HTTP/1.1\nHost: m\n\n", half_close=True)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert answer.count(b"HTTP/1.1 400 ") == 1, answer
