"""Answers read to a bound: whoever answers, the daemon keeps a few KiB of it.

A receiver's answer (an alert channel, an IndexNow endpoint) matters for its status, its
headers and the start of its body, which says what went wrong. ``read`` keeps the first
``keep`` bytes of the body as they arrive and stops there: the connection is closed, not handed
back to the pool (the rest of its body was never read), and one line is logged. A receiver
that answers a 1 GiB error page costs the daemon a few KiB, never its memory. The body is
taken as it came off the wire, never inflated (a gzip bomb is a few KiB of it), and the
requests ask for no encoding, so what is kept is readable.

Sitemaps, pages and robots.txt have bounds of their own (``monitor.read.fetch`` and
``monitor.net.pageclient``); this module is for every other answer.

Use (the client's transport made by ``connections.transport``, so the vetted addresses hold)::

    request = client.build_request("POST", url, content=body)
    reply = await bounded.send(client, request, where=redact_url(url))
    if reply.status >= 300:
        error = f"HTTP {reply.status}: {reply.text()}" + (" (cut)" if reply.cut else "")
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import httpx

from monitor.net import connections
from monitor.net.addresses import Resolver, check_host, system_resolver

__all__ = ["KEEP", "Reply", "read", "send"]

KEEP = 4096  # what a caller needs of a receiver's body: an error message, a short JSON
_PLAIN = ("", "identity")


@dataclass(frozen=True, slots=True)
class Reply:
    """A receiver's answer: its status, headers and the first ``keep`` bytes of its body
    (``cut``: the body went on, and was not read)."""

    status: int
    headers: httpx.Headers
    head: bytes
    cut: bool = False

    def text(self, limit: int = 200) -> str:
        """The start of the body as one line of at most ``limit`` characters."""
        return " ".join(self.head.decode("utf-8", errors="replace").split())[:limit]


async def read(response: httpx.Response, *, where: str, keep: int = KEEP,
               within: float | None = None) -> Reply:
    """Read an open (streamed) answer up to ``keep`` bytes of its body, then close it.

    ``where`` names the receiver in the log line (a URL without its secrets); ``within`` bounds
    the time the body may take (a slow drip), raising ``httpx.ReadTimeout`` past it.
    """
    kept = bytearray()
    cut = False
    encoded = response.headers.get("content-encoding", "").strip().lower() not in _PLAIN
    try:
        async with asyncio.timeout(within), contextlib.aclosing(_raw(response)) as body:
            async for data in body:
                room = keep - len(kept)
                if len(data) > room:
                    kept += data[:room]
                    cut = True
                    break
                kept += data
    except TimeoutError:
        raise httpx.ReadTimeout(f"the answer's body took longer than {within:g}s") from None
    finally:
        # An answer not read to its end is closed with its connection: nothing waits for it.
        await response.aclose()
    if cut:
        # structlog only here: ``monitor.read.fetch`` imports this module, and a ``check``
        # that never posts would spend 150 M instructions importing structlog and rich.
        import structlog

        structlog.get_logger("monitor.net.bounded").warning(
            "answer cut at its bound; the connection was closed", url=where,
            status=response.status_code, kept_bytes=keep)
    return Reply(response.status_code, response.headers, b"" if encoded else bytes(kept), cut)


async def _raw(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The body as it came off the wire; an answer already in memory (a test transport's)
    as it is."""
    if response.is_stream_consumed:
        yield response.content
        return
    async for data in response.aiter_raw():
        yield data


async def send(client: httpx.AsyncClient, request: httpx.Request, *, where: str,
               keep: int = KEEP, within: float | None = None,
               resolver: Resolver = system_resolver) -> Reply:
    """Send ``request`` through ``client`` and ``read`` its answer to the bound.

    The receiver's host is resolved once and judged by the address rules (private addresses
    allowed: an operator's own receiver often is one; link-local and metadata ones never), and
    the request carries the vetted addresses for a ``connections.transport`` to connect to.
    Raises ``FetchError(address-blocked)``, or ``FetchError(connect)`` for a name that does
    not resolve; httpx's errors (timeouts, refused connections) are the caller's too.
    """
    url = request.url
    port = url.port or (443 if url.scheme == "https" else 80)
    vetted = await check_host(url.host, port, url=where, allow_private=True,
                              resolver=resolver)
    request.extensions[connections.VETTED] = vetted
    request.headers["Accept-Encoding"] = "identity"
    response = await client.send(request, stream=True)
    return await read(response, where=where, keep=keep, within=within)
