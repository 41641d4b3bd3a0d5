"""A bounded HTTP flood, run as its own process: ``python flood.py HOST PORT PATH CONNS SECONDS``.

Opens CONNS keep-alive connections to HOST:PORT (at most 500 connecting at a time), and on each
sends GET PATH, reads the answer, sends the next, reconnecting when the server closes, until
SECONDS have passed; then closes everything and prints one JSON line of counts: the most
connections open at once, answers by status, connection errors. It stops by itself: a request
still unanswered at the end is abandoned, counted in ``unanswered``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import Counter


class _Flood:
    def __init__(self, host: str, port: int, path: str, until: float) -> None:
        self.host, self.port, self.until = host, port, until
        self.request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: flood\r\n\r\n").encode()
        self.statuses: Counter[str] = Counter()
        self.errors = 0
        self.open = 0
        self.most_open = 0
        self.unanswered = 0
        self.connecting = asyncio.Semaphore(500)

    async def connection(self) -> None:
        while time.monotonic() < self.until:
            try:
                async with self.connecting:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(self.host, self.port),
                        max(0.1, self.until - time.monotonic()))
            except (OSError, TimeoutError):
                self.errors += 1
                await asyncio.sleep(0.05)
                continue
            self.open += 1
            self.most_open = max(self.most_open, self.open)
            try:
                await self.requests(reader, writer)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                self.errors += 1
            finally:
                self.open -= 1
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    async def requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while time.monotonic() < self.until:
            writer.write(self.request)
            await writer.drain()
            self.unanswered += 1
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines[1:] if line)}
            await reader.readexactly(int(headers.get("content-length", "0")))
            self.unanswered -= 1
            self.statuses[lines[0].split(" ")[1]] += 1
            if headers.get("connection", "").lower() == "close":
                return


async def _main(host: str, port: int, path: str, conns: int, seconds: float) -> None:
    flood = _Flood(host, port, path, time.monotonic() + seconds)
    tasks = [asyncio.create_task(flood.connection()) for _ in range(conns)]
    _done, pending = await asyncio.wait(tasks, timeout=seconds + 1)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    print(json.dumps({"most_open": flood.most_open, "statuses": dict(flood.statuses),
                      "errors": flood.errors, "unanswered": flood.unanswered}), flush=True)


if __name__ == "__main__":
    host, port, path, conns, seconds = sys.argv[1:6]
    asyncio.run(_main(host, int(port), path, int(conns), float(seconds)))
