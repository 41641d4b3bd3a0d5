"""The port holds each new connection as a bare socket until its first byte: real sockets on
127.0.0.1 against a ``Port`` on a real event loop, with a protocol that records what it gets.

The daemon-wide floods (10,500 silent sockets, header drips, ``max_connections``, a stop with
silent sockets open) are in tests/daemon/test_port_timeouts.py.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from typing import ClassVar

import pytest

from monitor.serve.port import Port

pytestmark = pytest.mark.anyio


class _Recorder(asyncio.Protocol):
    """Records what it is given, and answers each chunk with ``ok``."""

    made: ClassVar[list[_Recorder]] = []

    def __init__(self, opened: float) -> None:
        self.opened = opened
        self.received = b""
        _Recorder.made.append(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += data
        self.transport.write(b"ok")


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Let the loop run until ``condition()`` holds (30 s at most: a busy machine)."""
    try:
        async with asyncio.timeout(30):
            while not condition():  # noqa: ASYNC110 - the port has no event to wait on
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not within 30 s: {what}") from None


@pytest.fixture
async def port() -> AsyncIterator[tuple[Port, tuple[str, int]]]:
    _Recorder.made = []
    listening = socket.create_server(("127.0.0.1", 0))
    listening.setblocking(False)
    made = Port(max_connections=3, head_timeout=30)  # no test waits that long
    made.serve(listening, _Recorder, None)
    try:
        yield made, listening.getsockname()
    finally:
        made.close()
        listening.close()


async def _silent_client(
    held: Port, address: tuple[str, int],
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client connection that has sent nothing, once the port holds it."""
    connected = await asyncio.open_connection(*address)
    await _until(lambda: len(held.waiting) == 1, "the connection waiting")
    return connected


async def test_a_connection_is_handed_over_with_its_first_bytes(
    port: tuple[Port, tuple[str, int]],
) -> None:
    held, address = port
    loop = asyncio.get_running_loop()
    before = loop.time()
    reader, writer = await _silent_client(held, address)
    assert _Recorder.made == []  # nothing built for a socket that has sent nothing
    writer.write(b"GET / HTTP/1.1\r\n")
    assert await asyncio.wait_for(reader.readexactly(2), 30) == b"ok"
    assert len(_Recorder.made) == 1
    protocol = _Recorder.made[0]
    assert protocol.received == b"GET / HTTP/1.1\r\n"  # the first byte was peeked, not eaten
    assert before <= protocol.opened <= loop.time()  # when it opened, not when it spoke
    assert held.waiting == {}
    writer.close()


async def test_a_silent_connection_is_closed_after_the_head_timeout(
    port: tuple[Port, tuple[str, int]],
) -> None:
    held, address = port
    held.head_timeout = 0.3
    reader, writer = await asyncio.open_connection(*address)
    assert await asyncio.wait_for(reader.read(), 30) == b""  # closed by the port
    assert _Recorder.made == []
    assert held.open_connections() == 0
    writer.close()


async def test_a_connection_closed_before_a_byte_builds_nothing(
    port: tuple[Port, tuple[str, int]],
) -> None:
    held, address = port
    _reader, writer = await _silent_client(held, address)
    writer.close()
    await _until(lambda: held.open_connections() == 0, "the connection gone")
    assert _Recorder.made == []


async def test_past_max_connections_the_oldest_silent_one_makes_room(
    port: tuple[Port, tuple[str, int]],
) -> None:
    held, address = port
    # one past max_connections (3)
    clients = [await asyncio.open_connection(*address) for _ in range(4)]
    assert await asyncio.wait_for(clients[0][0].read(), 30) == b""  # the oldest: closed
    assert len(held.waiting) == 3
    for _reader, writer in clients:
        writer.close()


async def test_a_closed_port_accepts_nothing_and_closes_what_waits(
    port: tuple[Port, tuple[str, int]],
) -> None:
    held, address = port
    reader, writer = await _silent_client(held, address)
    held.close()
    assert await asyncio.wait_for(reader.read(), 30) == b""
    assert held.waiting == {}
    writer.close()
