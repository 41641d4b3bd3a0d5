"""The estimate benchmark's site: N listed pages whose broken ones all sit in one part of it.

Run as ``python estimate_site.py N``: it prints its port on the first line of stdout and serves
on 127.0.0.1 until stdin closes. ``url_estimate.py`` imports ``truth`` and ``kind``.

``/sitemap.xml`` is an index of children of 10,000 URLs (``/p/I``), in that order; the pages of
the last fifth of the listing are broken in a known share: 10% answer 404 and 5% are noindex
(2% and 1% of the listing), the rest are fine. Every 200 page (~20 KB of HTML, rendered for each
request from its number) carries an ``ETag`` and a ``Last-Modified``, and a request whose
``If-None-Match`` (or, without one, ``If-Modified-Since``) matches them is answered 304 without
rendering the page, as a site that keeps its pages' versions does. ``/r/...`` is a second listing
of ``R`` pages (``/r/sitemap.xml``, all fine), for the re-check rounds. ``GET /__bench/stats``
answers the requests per status, the bytes sent and the process's CPU seconds (JSON).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections import Counter

PER_CHILD = 10_000
BROKEN_FROM = 0.8  # the last fifth of the listing holds every broken page
LAST_MODIFIED = "Sun, 01 Jun 2025 08:00:00 GMT"
REST = ("<p>" + "Trail shoes, waterproof jackets and merino socks for the long walk. " * 4
        + "</p>\n") * 70  # ~20 KB of body, shared


def kind(i: int, n: int) -> str:
    """What page ``i`` of ``n`` is: ok, not-found or noindex."""
    if i < BROKEN_FROM * n:
        return "ok"
    r = i % 20
    return "not-found" if r < 2 else "noindex" if r == 2 else "ok"


def truth(n: int) -> dict[str, float]:
    """The true share of each state in the listing of ``n`` pages."""
    found = Counter(kind(i, n) for i in range(n))
    return {state: count / n for state, count in found.items()}


class Site:
    """The responses, and what was served."""

    def __init__(self, n: int, recheck: int, port: int) -> None:
        self.n, self.origin = n, f"http://127.0.0.1:{port}"
        self.stats: Counter[str] = Counter()
        self.docs = {**self._listing("", n), **self._listing("/r", recheck)}
        self.docs["/robots.txt"] = b"User-agent: *\nAllow: /\n"

    def _listing(self, prefix: str, n: int) -> dict[str, bytes]:
        ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        docs, index = {}, [f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex {ns}>\n']
        for k in range(-(-n // PER_CHILD)):
            index.append(f"<sitemap><loc>{self.origin}{prefix}/sitemap-{k}.xml</loc></sitemap>\n")
            rows = "".join(f"<url><loc>{self.origin}{prefix}/p/{i}</loc></url>\n"
                           for i in range(k * PER_CHILD, min(n, (k + 1) * PER_CHILD)))
            docs[f"{prefix}/sitemap-{k}.xml"] = (f'<?xml version="1.0" encoding="UTF-8"?>\n'
                                                 f"<urlset {ns}>\n{rows}</urlset>\n").encode()
        index.append("</sitemapindex>\n")
        docs[f"{prefix}/sitemap.xml"] = "".join(index).encode()
        return docs

    def respond(self, path: str, headers: dict[str, str]) -> tuple[int, list[str], bytes]:
        if path == "/__bench/stats":
            body = json.dumps({**self.stats, "cpu": time.process_time()}).encode()
            return 200, ["Content-Type: application/json"], body
        if path in self.docs:
            return 200, ["Content-Type: application/xml"], self.docs[path]
        recheck = path.startswith("/r/p/")
        number = path.rsplit("/", 1)[-1]
        if not (path.startswith("/p/") or recheck) or not number.isdigit():
            return 404, ["Content-Type: text/plain"], b"not found\n"
        state = "ok" if recheck else kind(int(number), self.n)
        if state == "not-found":
            return 404, ["Content-Type: text/html"], b"<html><body>Not found</body></html>"
        etag = f'"{number}-v1"'
        validators = [f"ETag: {etag}", f"Last-Modified: {LAST_MODIFIED}"]
        asked = headers.get("if-none-match")
        if asked == etag or (asked is None and headers.get("if-modified-since") == LAST_MODIFIED):
            return 304, validators, b""
        robots = '<meta name="robots" content="noindex">' if state == "noindex" else ""
        body = (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
                f"<title>Page {number} | Example Outdoor Co.</title>{robots}"
                f'<link rel="canonical" href="{self.origin}{path}"></head><body>'
                f"<h1>Page {number}</h1>{REST}</body></html>").encode()
        return 200, ["Content-Type: text/html; charset=utf-8", *validators], body


class Http(asyncio.Protocol):
    """HTTP/1.1 keep-alive, GET only, one request at a time per connection."""

    def __init__(self, site: Site) -> None:
        self.site, self.buffer = site, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1].split("?")[0]
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines[1:])}
            status, fields, body = self.site.respond(path, headers)
            reason = {200: "OK", 304: "Not Modified", 404: "Not Found"}[status]
            top = (f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{f}\r\n" for f in fields)
                   + ("" if status == 304 else f"Content-Length: {len(body)}\r\n") + "\r\n"
                   ).encode()
            assert self.transport is not None
            self.transport.writelines([top, body])
            if path != "/__bench/stats":
                self.site.stats[str(status)] += 1
                self.site.stats["bytes"] += len(top) + len(body)


async def serve(n: int, recheck: int) -> None:
    loop = asyncio.get_running_loop()
    holder: list[Site] = []
    server = await loop.create_server(lambda: Http(holder[0]), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    holder.append(Site(n, recheck, port))
    print(port, flush=True)
    closed = asyncio.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(closed.set)),
                     daemon=True).start()
    await closed.wait()
    server.close()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 20_000))
