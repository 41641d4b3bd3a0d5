"""``sitemap-monitor demo``: a local site whose sitemap keeps changing, and the daemon watching it.

Everything stays on 127.0.0.1 and in a temporary folder: a small HTTP server serves a sitemap
that changes every few seconds (URLs added and removed, a lastmod moved, now and then an
invalid date; a few of its pages answer 404, 410 or say noindex), and ``app.run`` checks it
every few seconds, its pages too, so a newcomer sees changes and broken pages in the
log, the JSON API and the metrics within a minute, without internet access.
"""

from __future__ import annotations

import contextlib
import random
import socket
import sys
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from monitor.daemon import app

__all__ = ["DemoSite", "run"]

CHANGE_EVERY = 4.0  # seconds between two versions of the sitemap
CHECK_EVERY = "5s"
PREFERRED_PORT = 8080


class DemoSite:
    """A sitemap that changes by itself, deterministically (a seeded random generator)."""

    def __init__(self, base: str, seed: int = 7) -> None:
        self.base = base.rstrip("/")
        self.version = 0
        self._rng = random.Random(seed)  # noqa: S311 - demo data, not secrets
        self._next_id = 1
        self._day = datetime(2024, 1, 1, tzinfo=UTC)
        self._pages: dict[str, str] = {}
        self._lock = threading.Lock()
        for _ in range(8):
            self._add()

    def _add(self) -> None:
        self._pages[f"{self.base}/products/{self._next_id}"] = self._day.date().isoformat()
        self._next_id += 1

    def step(self) -> None:
        """Make the next version: add one or two pages, remove one, touch one, maybe break one."""
        with self._lock:
            self.version += 1
            self._day += timedelta(days=1)
            for _ in range(self._rng.randint(1, 2)):
                self._add()
            urls = sorted(self._pages)
            self._pages.pop(self._rng.choice(urls[:-1]))
            touched = self._rng.choice(sorted(self._pages))
            self._pages[touched] = self._day.date().isoformat()
            if self.version % 3 == 0:
                broken = self._rng.choice(sorted(self._pages))
                self._pages[broken] = f"{self._day.year}-13-{self._day.day:02d}"  # invalid

    def sitemap(self) -> tuple[bytes, str]:
        """The current sitemap and its ETag."""
        with self._lock:
            rows = "".join(
                f"  <url><loc>{loc}</loc><lastmod>{lastmod}</lastmod></url>\n"
                for loc, lastmod in sorted(self._pages.items())
            )
            version = self.version
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"{rows}</urlset>\n"
        ).encode()
        return body, f'"v{version}"'


def page(path: str) -> tuple[int, bytes, str, None]:
    """A product page: every 5th is missing (404), every 7th gone (410), every 6th says
    noindex; the others are fine."""
    number = int(path.rsplit("/", 1)[-1]) if path.rsplit("/", 1)[-1].isdigit() else 1
    if number % 5 == 0:
        return 404, b"<html><body>not found</body></html>", "text/html", None
    if number % 7 == 0:
        return 410, b"<html><body>gone</body></html>", "text/html", None
    head = '<meta name="robots" content="noindex">' if number % 6 == 0 else ""
    body = f"<html><head><title>demo</title>{head}</head><body>demo page</body></html>"
    return 200, body.encode(), "text/html", None


def _handler(site: DemoSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return  # the daemon's check lines say what happened

        def do_GET(self) -> None:
            if self.path == "/robots.txt":
                body = f"User-agent: *\nSitemap: {site.base}/sitemap.xml\n".encode()
                self._send(200, body, "text/plain", None)
            elif self.path == "/sitemap.xml":
                body, etag = site.sitemap()
                if self.headers.get("If-None-Match") == etag:
                    self._send(304, b"", None, etag)
                else:
                    self._send(200, body, "application/xml", etag)
            else:
                self._send(*page(self.path))

        def _send(self, status: int, body: bytes, kind: str | None, etag: str | None) -> None:
            self.send_response(status)
            if kind:
                self.send_header("Content-Type", kind)
            if etag:
                self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _free_port(preferred: int) -> int:
    """``preferred`` when it is free on 127.0.0.1, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            found: int = probe.getsockname()[1]
            return found
    raise OSError("no free port on 127.0.0.1")


def _config(site_url: str, port: int) -> str:
    return (
        f"listen: 127.0.0.1:{port}\n"
        f"defaults: {{interval: {CHECK_EVERY}, jitter: 0,"
        " url_checks: {enabled: true, rate: 5, recheck: 1m}}\n"
        "scheduler: {shutdown_grace: 5s}\n"
        "targets:\n"
        f"  - {{name: demo, url: \"{site_url}/sitemap.xml\"}}\n"
    )


def run() -> int:
    """Serve the changing site, run the daemon on it until Ctrl-C; return its exit code."""
    # Bound first: the site's URLs need the port the server got.
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    site_url = f"http://127.0.0.1:{server.server_address[1]}"
    site = DemoSite(site_url)
    server.RequestHandlerClass = _handler(site)
    stop = threading.Event()

    def change() -> None:
        while not stop.wait(CHANGE_EVERY):
            site.step()

    threads = [threading.Thread(target=server.serve_forever, daemon=True),
               threading.Thread(target=change, daemon=True)]
    for thread in threads:
        thread.start()
    port = _free_port(PREFERRED_PORT)
    api = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="sitemap-monitor-demo-") as folder:
        config_file = Path(folder) / "demo.yaml"
        config_file.write_text(_config(site_url, port), encoding="utf-8")
        print(
            "sitemap-monitor demo: a local site whose sitemap changes every "
            f"{CHANGE_EVERY:g} s, checked every {CHECK_EVERY}.\n"
            f"  site      {site_url}/sitemap.xml\n"
            f"  pages     {api}/\n"
            f"  changes   curl -s {api}/api/v1/targets/demo/changes\n"
            f"  broken    curl -s '{api}/api/v1/targets/demo/urls?status=not-found'\n"
            f"  targets   curl -s {api}/api/v1/targets\n"
            f"  metrics   curl -s {api}/metrics | grep -E '^sitemap_monitor_(urls|url_health)'\n"
            "Press Ctrl-C to stop; everything is kept in a temporary folder and removed.\n",
            file=sys.stderr,
            flush=True,
        )
        try:
            return app.run(str(config_file), f"sqlite:///{folder}/demo.db")
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                server.shutdown()
            server.server_close()
