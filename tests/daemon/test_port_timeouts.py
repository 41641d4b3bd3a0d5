"""The daemon's port closes what sends no request: real sockets against a real daemon.

Connections that send nothing, or a header line every second, or a body after their answer,
are closed by the daemon within ``http.head_timeout`` (a test setting of 2 s here) and a few
seconds of slack; then a real API client is answered at once. The daemon's memory is measured
before, during and after the flood, and must come back once the flood is over.
"""

from __future__ import annotations

import contextlib
import selectors
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import Daemon, sitemap, write_config
from httpserver import Reply, TestServer
from waiting import until

# One at a time with the overload tests (their burst test counts the machine's dropped
# connections, and these floods fill a listen queue).
pytestmark = pytest.mark.usefixtures("one_flood_at_a_time")

HEAD_TIMEOUT = 2.0
# What 10,500 idle connections may take of the daemon's memory at most, and leave once they are
# closed. Made asyncio transports with uvicorn's protocol at once, they took ~45 MiB and 18-31
# MiB stayed; held as bare sockets until their first byte, they take ~7 MiB, and what stays of
# it (Python's allocator keeps each arena that still holds a live object) the next flood reuses.
FLOOD_PEAK_KIB = 16 * 1024
FLOOD_LEFT_KIB = 14 * 1024


@contextlib.contextmanager
def _checked_daemon(http_server: TestServer, tmp_path: Path, extra: str) -> Iterator[Daemon]:
    """A daemon with one target, ``extra`` in its config, once its first check is done."""
    http_server.route("/s.xml", Reply(body=sitemap({http_server.url("/p"): None})))
    config = write_config(tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db",
                          [("shop", http_server.url("/s.xml"))], interval="1h", extra=extra)
    started = Daemon(config)
    try:
        started.started()
        started.event("check", target="shop")
        yield started
    finally:
        started.stop()


@pytest.fixture
def daemon(http_server: TestServer, tmp_path: Path) -> Iterator[Daemon]:
    with _checked_daemon(http_server, tmp_path,
                         f"http: {{head_timeout: {HEAD_TIMEOUT}s, keep_alive: 2s}}\n") as started:
        yield started


def _address(daemon: Daemon) -> tuple[str, int]:
    host, port = daemon.base.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _open(address: tuple[str, int], count: int) -> list[socket.socket]:
    opened = []
    for _ in range(count):
        sock = socket.create_connection(address, timeout=10)
        sock.setblocking(False)
        opened.append(sock)
    return opened


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _closed_by_server(socks: list[socket.socket], timeout: float,
                      drip: bytes | None = None) -> tuple[int, float]:
    """Wait until the server has closed every socket (EOF or reset); meanwhile send ``drip``
    on each open one every second. How many it closed, and when the last closed."""
    started = time.monotonic()
    last = 0.0
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        open_count = len(socks)
        next_drip = started + 1
        deadline = started + timeout
        while open_count and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    continue  # an answer (a refusal, a 400): the close follows
                selector.unregister(sock)
                open_count -= 1
                last = time.monotonic() - started
            if drip is not None and time.monotonic() >= next_drip:
                next_drip += 1
                for key in list(selector.get_map().values()):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    with contextlib.suppress(OSError):
                        sock.send(drip)
    return len(socks) - open_count, last


def _api_answers(daemon: Daemon, count: int) -> list[int]:
    with httpx.Client(timeout=10) as client:
        return [client.get(daemon.base + "/api/v1/targets").status_code for _ in range(count)]


def test_idle_connections_are_closed_their_memory_returned_and_the_api_answers(
    daemon: Daemon,
) -> None:
    address = _address(daemon)
    pid = daemon.proc.pid
    _api_answers(daemon, 20)  # what the first answers load and cache is not the flood's
    before = _rss_kib(pid)
    seen = len(daemon.lines)
    socks = _open(address, 10_500)
    try:
        during = _rss_kib(pid)
        closed, last = _closed_by_server(socks, HEAD_TIMEOUT + 20)
    finally:
        for sock in socks:
            sock.close()
    with contextlib.suppress(AssertionError):  # a failure says by how much, below
        until(lambda: _rss_kib(pid) <= before + FLOOD_LEFT_KIB, what="the memory back")
    after = _rss_kib(pid)
    print(f"\n10,500 idle connections: {closed} closed by the daemon, the last after "
          f"{last:.1f} s; RSS {before // 1024} MiB before, {during // 1024} during, "
          f"{after // 1024} once they were closed")
    assert closed == 10_500
    assert after <= before + FLOOD_LEFT_KIB, f"{(after - before) // 1024} MiB more than before"
    returned = daemon.event("connection flood over; memory returned", after=seen)
    peak = returned["rss_before_bytes"] // 1024  # once closed, before anything is returned
    answers = _api_answers(daemon, 50)
    print(f"(at its end {peak // 1024} MiB; {returned['objects_freed']} objects freed in "
          f"{returned['seconds']} s); then the API answered {answers.count(200)} of 50")
    assert peak <= before + FLOOD_PEAK_KIB, f"the flood took {(peak - before) // 1024} MiB"
    assert answers == [200] * 50


def test_header_drips_and_late_bodies_are_closed(daemon: Daemon) -> None:
    address = _address(daemon)
    host = f"{address[0]}:{address[1]}"
    drips = _open(address, 3_000)
    bodies = _open(address, 20)
    try:
        for sock in drips:
            sock.send(f"GET /api/v1/targets HTTP/1.1\r\nHost: {host}\r\n".encode())
        for sock in bodies:  # a whole head, and a body that comes a byte a second
            sock.send(f"GET /api/v1/targets HTTP/1.1\r\nHost: {host}\r\n"
                      "Content-Length: 100000\r\n\r\n".encode())
        closed, last = _closed_by_server(drips + bodies, HEAD_TIMEOUT + 20, drip=b"X-A: b\r\n")
    finally:
        for sock in drips + bodies:
            sock.close()
    answers = _api_answers(daemon, 50)
    print(f"\n3,000 header drips and 20 late bodies: {closed} closed by the daemon, the last "
          f"after {last:.1f} s; then the API answered {answers.count(200)} of 50")
    assert closed == 3_020
    assert answers == [200] * 50


def _answer(sock: socket.socket) -> bytes:
    """One whole answer (head and a Content-Length body) read from a blocking socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return data


def test_a_stopping_daemon_closes_the_connections_that_sent_nothing(
    http_server: TestServer, tmp_path: Path,
) -> None:
    """Silent connections do not hold a stopping daemon up: each is closed, and it exits."""
    with _checked_daemon(http_server, tmp_path, "http: {head_timeout: 60s}\n") as daemon:
        socks = _open(_address(daemon), 200)
        try:
            _api_answers(daemon, 1)  # accepted after the 200: they are all the daemon's by now
            daemon.proc.send_signal(signal.SIGTERM)
            closed, last = _closed_by_server(socks, 20)
            code = daemon.proc.wait(timeout=20)
        finally:
            for sock in socks:
                sock.close()
    print(f"\n200 silent connections at SIGTERM: {closed} closed, the last after {last:.1f} s;"
          f" exit code {code}")
    assert closed == 200
    assert code == 0


def test_a_kept_alive_connection_serves_requests_then_closes_when_idle(daemon: Daemon) -> None:
    sock = socket.create_connection(_address(daemon), timeout=10)
    with sock:
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _answer(sock).startswith(b"HTTP/1.1 200 ")
        started = time.monotonic()
        assert sock.recv(65536) == b""  # closed by the daemon after its keep-alive
        assert time.monotonic() - started < 10


def test_a_client_that_reads_nothing_of_an_export_is_dropped(
    http_server: TestServer, tmp_path: Path,
) -> None:
    """A client that reads nothing of a long answer is dropped after ``write_timeout``: the
    request would hold its admission slot until then."""
    # 9 MB of CSV: more than the kernel buffers of both ends hold (4 MiB each at most here)
    urls = {http_server.url(f"/p/{i:06d}/" + "x" * 250): None for i in range(30_000)}
    http_server.route("/s.xml", Reply(body=sitemap(urls)))
    config = write_config(
        tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db", [("shop", http_server.url("/s.xml"))],
        interval="1h", extra="http: {write_timeout: 2s, database_connections: 1}\n")
    daemon = Daemon(config)
    try:
        daemon.started()
        daemon.event("check", target="shop", timeout=60)
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a window kept small
        stuck.connect(_address(daemon))
        stuck.sendall(b"GET /api/v1/targets/shop/urls?format=csv HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        daemon.event("HTTP client dropped: it read nothing of an answer in time", timeout=30)
        dropped = time.monotonic() - started
        stuck.settimeout(10)
        received = b""
        while chunk := stuck.recv(1 << 20):  # what the kernels held, then the end
            received += chunk
        assert not received.endswith(b"\r\n0\r\n\r\n")  # the export was cut, not finished
        answer = httpx.get(daemon.base + "/api/v1/targets", timeout=30)
        print(f"\na client reading nothing of a 30,000-URL export: dropped after {dropped:.1f} s,"
              f" {len(received):,} bytes of it sent; then the API answered {answer.status_code}")
        assert answer.status_code == 200
        stuck.close()
    finally:
        daemon.stop()


def test_past_max_connections_new_clients_take_the_place_of_silent_ones(
    http_server: TestServer, tmp_path: Path,
) -> None:
    """Silent sockets opened past ``max_connections`` (faster than ``head_timeout`` closes
    them) close the oldest silent ones, so a client that sends requests is answered."""
    with _checked_daemon(http_server, tmp_path,
                         "http: {head_timeout: 60s, max_connections: 1000}\n") as daemon:
        socks = _open(_address(daemon), 1_500)
        try:
            # Each real request below opens a connection: past the bound, it closes a silent one.
            answers = [httpx.get(daemon.base + "/api/v1/targets", timeout=10).status_code
                       for _ in range(50)]
            closed, _ = _closed_by_server(socks, 10)
        finally:
            for sock in socks:
                sock.close()
    print(f"\n1,500 silent connections, max_connections 1,000: {closed} closed to make room;"
          f" the API answered {answers.count(200)} of 50 ({dict.fromkeys(answers)})")
    assert answers == [200] * 50
    assert 500 <= closed < 1_500
