"""The growth benchmark's site: a sitemap index of CHILDREN urlsets of URLS URLs each, W1's own
(workloads.py's generator and seed: its URLs, lastmods, changefreqs, priorities and images),
whose lastmods move as PATTERN says at each simulated hour. Its own process, 127.0.0.1 only.

    python growth_site.py PATTERN CHILDREN URLS

Prints its port on the first line of stdout and serves until stdin closes. ``POST /__step/N``
sets the hour (0 first); each child answers with an ETag of its version, and 304 to a matching
If-None-Match, so a child that did not change costs what it costs on a real site.

- ``daily``: at the first hour of each day, 1% of every child's URLs (those whose number is the
  day's, modulo 100) get that day as their lastmod;
- ``one``: every lastmod of the first child moves to the hour, at every hour;
- ``every``: every lastmod of every child moves to the hour, at every hour (a CMS that stamps
  "now" at each build).
"""

from __future__ import annotations

import dataclasses
import random
import sys
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import workloads

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
START = datetime(2026, 1, 1, tzinfo=UTC)  # the simulated clock's hour 0


def stamp(hour: int) -> str:
    return (START + timedelta(hours=hour)).strftime("%Y-%m-%dT%H:%M:%S+00:00")


class Site:
    def __init__(self, pattern: str, children: int, urls: int, port: int) -> None:
        self.pattern, self.children, self.urls, self.port = pattern, children, urls, port
        self.hour = 0
        self.cache: dict[int, tuple[int, bytes]] = {}
        self.lock = threading.Lock()
        rng = random.Random(workloads.SEED)
        origin = f"http://127.0.0.1:{port}/w1"
        self.base = [workloads._urls(rng, origin, urls, f"{c + 1:02d}") for c in range(children)]

    def version(self, child: int) -> int:
        """The child's version at this hour: its lastmods change when it does."""
        if self.pattern == "daily":
            return self.hour // 24
        if self.pattern == "one":
            return self.hour if child == 0 else 0
        return self.hour

    def lastmod(self, child: int, i: int, version: int) -> str:
        """URL i's lastmod at this version: W1's until the pattern first moves it."""
        if self.pattern == "daily":  # the last day up to this one that moved URL i
            day = version - (version - i) % 100
            return stamp(24 * day) if day > 0 else self.base[child][i].lastmod
        return stamp(version) if version > 0 else self.base[child][i].lastmod

    def body(self, child: int) -> tuple[int, bytes]:
        version = self.version(child)
        with self.lock:
            cached = self.cache.get(child)
            if cached and cached[0] == version:
                return cached
            data = workloads._urlset([
                dataclasses.replace(u, lastmod=self.lastmod(child, i, version))
                for i, u in enumerate(self.base[child])])
            self.cache[child] = (version, data)
            return version, data

    def index(self) -> bytes:
        origin = f"http://127.0.0.1:{self.port}"
        rows = "".join(f"<sitemap><loc>{origin}/c{k}.xml</loc></sitemap>"
                       for k in range(self.children))
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{NS}">{rows}'
                "</sitemapindex>\n").encode()


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        if self.path.startswith("/__step/"):
            self.server.site.hour = int(self.path.rsplit("/", 1)[1])
            self._send(200, b"ok\n", "")
        else:
            self._send(404, b"", "")

    def do_GET(self) -> None:
        site = self.server.site
        if self.path == "/idx.xml":
            self._send(200, site.index(), '"idx"')
            return
        if self.path.startswith("/c") and self.path.endswith(".xml"):
            child = int(self.path[2:-4])
            version, data = site.body(child)
            etag = f'"c{child}-{version}"'
            if self.headers.get("If-None-Match") == etag:
                self._send(304, b"", etag)
            else:
                self._send(200, data, etag)
            return
        self._send(404, b"", "")

    def _send(self, status: int, body: bytes, etag: str) -> None:
        self.send_response(status)
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    site: Site


def main(argv: list[str]) -> None:
    pattern, children, urls = argv[0], int(argv[1]), int(argv[2])
    server = Server(("127.0.0.1", 0), Handler)
    server.site = Site(pattern, children, urls, server.server_address[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
