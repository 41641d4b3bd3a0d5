"""The benchmark's sitemap server: its own process, 127.0.0.1 only, bodies held in memory.

Run as ``python server.py DATA_DIR PREFIX...`` (PREFIX is ``w1`` or ``w2``); it prints its port on
the first line of stdout and serves until stdin closes. ETag, Last-Modified, If-None-Match and
If-Modified-Since make conditional GET work as on a real site.

Control routes: ``POST /__bench/variant/NAME`` overlays ``DATA_DIR/NAME/`` on ``/w1/`` (W1'),
``POST /__bench/variant/base`` removes the overlay, ``GET /__bench/stats`` returns request counts.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PLACEHOLDER = b"127.0.0.1:00000"
# Distinct, fixed Last-Modified per state, so If-Modified-Since means something.
_BASE_TIME = 1_730_000_000.0


class _Body:
    __slots__ = ("data", "etag", "last_modified")

    def __init__(self, data: bytes, stamp: float) -> None:
        self.data = data
        self.etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
        self.last_modified = formatdate(stamp, usegmt=True)


class _State:
    def __init__(self, root: Path, prefixes: list[str], port: int) -> None:
        self.root, self.port = root, port
        self.base: dict[str, _Body] = {}
        self.overlays: dict[str, dict[str, _Body]] = {}
        self.active: dict[str, _Body] = {}
        self.lock = threading.Lock()
        self.stats = {"requests": 0, "ok": 0, "not_modified": 0, "not_found": 0, "bytes": 0}
        for prefix in prefixes:
            self.base.update(self._load(root / prefix, f"/{prefix}/", _BASE_TIME))
        self.active = self.base

    def _load(self, folder: Path, url_prefix: str, stamp: float) -> dict[str, _Body]:
        authority = f"127.0.0.1:{self.port}".encode()
        out = {}
        for file in sorted(folder.rglob("*.xml")):
            data = file.read_bytes().replace(PLACEHOLDER, authority)
            out[url_prefix + file.relative_to(folder).as_posix()] = _Body(data, stamp)
        return out

    def set_variant(self, name: str) -> None:
        if name == "base":
            self.active = self.base
            return
        if name not in self.overlays:
            # The overlay replaces files under /w1/ (W1' is W1 with two files changed).
            self.overlays[name] = self._load(self.root / name, "/w1/", _BASE_TIME + 86_400)
        self.active = {**self.base, **self.overlays[name]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        """Silence the per-request log: it would cost more than serving."""

    def _count(self, key: str, size: int = 0) -> None:
        stats = self.server.state.stats
        with self.server.state.lock:
            stats["requests"] += 1
            stats[key] += 1
            stats["bytes"] += size

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        """Serve a sitemap, honouring conditional GET."""
        state = self.server.state
        if self.path == "/__bench/stats":
            self._send(200, json.dumps(state.stats).encode(), {"Content-Type": "application/json"})
            return
        body = state.active.get(self.path.split("?", 1)[0])
        if body is None:
            self._count("not_found")
            self._send(404, b"not found\n", {"Content-Type": "text/plain"})
            return
        validators = {"ETag": body.etag, "Last-Modified": body.last_modified}
        inm = self.headers.get("If-None-Match")
        ims = self.headers.get("If-Modified-Since")
        if (inm is not None and body.etag in [t.strip() for t in inm.split(",")]) or (
            inm is None and ims == body.last_modified
        ):
            self._count("not_modified")
            self._send(304, b"", validators)
            return
        self._count("ok", len(body.data))
        self._send(200, body.data, {"Content-Type": "application/xml", **validators})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        """Switch the served variant (W1 <-> W1')."""
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path.startswith("/__bench/variant/"):
            self.server.state.set_variant(self.path.rsplit("/", 1)[1])
            self._send(200, b"ok\n")
        else:
            self._send(404, b"not found\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    state: _State


def main(argv: list[str]) -> None:
    """Serve DATA_DIR's workloads on 127.0.0.1 until stdin closes."""
    root, prefixes = Path(argv[0]), argv[1:]
    # Ephemeral ports are five digits on Linux; the placeholder needs exactly five.
    while True:
        server = _Server(("127.0.0.1", 0), _Handler)
        port = server.server_address[1]
        if port >= 10_000:
            break
        server.server_close()
    server.state = _State(root, prefixes, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(port, flush=True)
    sys.stdin.read()  # the parent closes our stdin (or dies): then we stop
    server.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
