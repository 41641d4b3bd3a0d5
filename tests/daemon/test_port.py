"""The daemon's listening socket: its connections send without waiting (TCP_NODELAY)."""

from __future__ import annotations

import asyncio
import socket

from monitor.serve.server import bind


def test_accepted_connections_have_nagle_off() -> None:
    """uvicorn writes a response's head and body apart; with Nagle's algorithm on, every answer
    on a kept-alive connection waited ~40 ms for the client's delayed ACK (tests/benchmarks/
    web_pages.py). asyncio turns it off only on sockets made with IPPROTO_TCP."""
    sock = bind("127.0.0.1:0")
    port = sock.getsockname()[1]
    found: list[int] = []

    async def go() -> None:
        def accepted(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            raw = writer.get_extra_info("socket")
            found.append(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=sock)
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if found:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(go())
    assert found == [1]
