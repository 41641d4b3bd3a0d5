"""A small real HTTP/1.1 server on 127.0.0.1 for tests, running in threads.

Routes are set per test and may change between requests; a route is a fixed ``Reply`` or a
function of the ``Request``. Replies can carry any status, headers and body, a delay before the
head, and a streamed body (an iterable, optionally slow or endless, chunked or close-delimited).
Every request is recorded with its headers and body. Works from sync and async tests alike::

    server.route("/sitemap.xml", Reply(body=b"<urlset/>", headers={"ETag": '"v1"'}))
    server.route("/flaky", lambda req: Reply(429, headers={"Retry-After": "1"}))
    ... fetch server.url("/sitemap.xml") ...
    assert server.requests[0].headers["user-agent"].startswith("sitemap-monitor/")
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["Reply", "Request", "TestServer", "closed_port", "gzip_bytes", "redirect", "repeat",
           "self_signed"]

Body = bytes | Iterable[bytes] | Callable[[], Iterable[bytes]]


@dataclass
class Reply:
    """What the server answers: status, headers and a body (bytes, an iterable, or a factory).

    An iterable body is streamed: chunked transfer-encoding by default, or delimited by closing
    the connection with ``chunked=False``. Pass a factory (a function returning an iterable) for
    a route that may be requested more than once. ``delay`` waits before the status line,
    ``chunk_delay`` between body pieces.
    """

    status: int = 200
    body: Body = b""
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = ()
    delay: float = 0.0
    chunk_delay: float = 0.0
    chunked: bool = True


@dataclass
class Request:
    """One request as the server received it; header names are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client: tuple[str, int]
    time: float = field(default_factory=time.monotonic)

    @property
    def route(self) -> str:
        """The path without the query string."""
        return self.path.split("?", 1)[0]


Handler = Callable[[Request], Reply]


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed, with a fixed mtime so equal inputs give equal outputs."""
    return gzip.compress(data, mtime=0)


def redirect(location: str, status: int = 302) -> Reply:
    """A redirect to ``location``."""
    return Reply(status, headers={"Location": location})


def repeat(piece: bytes, count: int | None = None) -> Callable[[], Iterator[bytes]]:
    """A body factory yielding ``piece`` ``count`` times, or forever when ``count`` is None."""

    def body() -> Iterator[bytes]:
        sent = 0
        while count is None or sent < count:
            sent += 1
            yield piece

    return body


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # joined at stop, so no handler outlives its test
    block_on_close = True
    owner: TestServer

    # Track connections so stop() can cut the ones still streaming or idling in keep-alive.
    def process_request(self, request: Any, client_address: Any) -> None:
        with self.owner._lock:
            self.owner._sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.owner._lock:
            self.owner._sockets.discard(request)
        super().shutdown_request(request)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read server.requests, not stderr

    def _dispatch(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Request(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            client=self.client_address[:2],
        )
        with owner._lock:
            owner.requests.append(request)
            owner.active += 1
            owner.max_active = max(owner.max_active, owner.active)
        try:
            self._answer(owner._reply_for(request), owner._stopping)
        except OSError:
            self.close_connection = True  # the client went away: that is what many tests do
        except Exception as exc:  # noqa: BLE001 - a test's handler failed: keep it for the test
            owner.errors.append(exc)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.send_error(500, f"test handler raised {type(exc).__name__}")
        finally:
            with owner._lock:
                owner.active -= 1

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _dispatch

    def _answer(self, reply: Reply, stopping: threading.Event) -> None:
        if reply.delay and stopping.wait(reply.delay):
            self.close_connection = True
            return
        self.send_response_only(reply.status)
        items = reply.headers.items() if isinstance(reply.headers, Mapping) else reply.headers
        names = set()
        for name, value in items:
            names.add(name.lower())
            self.send_header(name, value)
        body = reply.body() if callable(reply.body) else reply.body
        if isinstance(body, bytes):
            if "content-length" not in names and reply.status not in (204, 304):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        if reply.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        for piece in body:
            if stopping.is_set() or (reply.chunk_delay and stopping.wait(reply.chunk_delay)):
                self.close_connection = True
                return
            if not piece:
                continue
            if reply.chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                self.wfile.write(piece)
            self.wfile.flush()
        if reply.chunked:
            self.wfile.write(b"0\r\n\r\n")


class TestServer:
    """A threaded HTTP server on 127.0.0.1 with per-test routes and a record of requests."""

    __test__ = False  # not a pytest test class

    def __init__(self, tls: tuple[Path, Path] | None = None, *, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        """``tls``: a certificate and its key (``self_signed``) to serve https:// with;
        ``host`` and ``port``: where to listen (any loopback address, a port taken elsewhere)."""
        self.requests: list[Request] = []
        self.errors: list[Exception] = []  # exceptions raised by route handlers
        self.active = 0
        self.max_active = 0
        self._routes: dict[str, Reply | Handler] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server((host, port), _RequestHandler)
        self._server.owner = self
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.05})
        self.port: int = self._server.server_address[1]
        self.base_url = f"{scheme}://{host}:{self.port}"

    def url(self, path: str = "/") -> str:
        """The absolute URL of ``path`` on this server."""
        return self.base_url + path

    # The answer to a path without a route (None: a plain 404), such as a soft 404 page.
    missing: Reply | Handler | None = None

    def route(self, path: str, reply: Reply | Handler) -> None:
        """Answer requests for ``path`` (without query) with ``reply``; replaces any earlier one."""
        with self._lock:
            self._routes[path] = reply

    def requests_to(self, path: str) -> list[Request]:
        """The recorded requests whose path (without query) is ``path``."""
        with self._lock:
            return [r for r in self.requests if r.route == path]

    def _reply_for(self, request: Request) -> Reply:
        with self._lock:
            route = self._routes.get(request.route)
        if route is None:
            route = self.missing
        if route is None:
            return Reply(404, b"not found\n", {"Content-Type": "text/plain"})
        return route(request) if callable(route) else route

    def start(self) -> TestServer:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections and wait for every handler thread."""
        self._stopping.set()
        self._server.shutdown()
        with self._lock:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()  # joins the handler threads
        self._thread.join()

    def __enter__(self) -> TestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def self_signed(folder: Path, names: str = "IP:127.0.0.1") -> tuple[Path, Path] | None:
    """A certificate for ``names`` (a subjectAltName) and its key, via the openssl tool; None
    without it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", f"subjectAltName={names}"],
        check=True, capture_output=True,
    )
    return cert, key


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
