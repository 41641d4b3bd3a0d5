"""The fetch stage against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import gzip
import os
import resource
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest
from httpserver import (
    Reply,
    Request,
    TestServer,
    closed_port,
    gzip_bytes,
    redirect,
    repeat,
    self_signed,
)

from monitor import config
from monitor.core.errors import FetchError, redact_url
from monitor.net.inflate import read_file
from monitor.read.fetch import (
    CHUNK_SIZE,
    Fetcher,
    Response,
    is_blocked_address,
    is_private_address,
    retry_after_seconds,
)

pytestmark = pytest.mark.anyio

SETTINGS = config.Defaults(timeout=5, connect_timeout=2, read_timeout=2, retry_after_max=5)
XML = b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>'


class RecordingTransport(httpx.AsyncBaseTransport):
    """Records every request that reaches the transport; with no inner transport, refuses all."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.urls: list[str] = []
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(str(request.url))
        if self.inner is None:
            raise AssertionError(f"a connection was attempted to {request.url}")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()


def fake_resolver(table: dict[str, list[str]]) -> Callable[[str, int], Any]:
    """A resolver from a table; unknown names fail like a DNS miss."""

    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError(f"unknown host {host}")
        return table[host]

    return resolve


@pytest.fixture
async def fetcher() -> AsyncIterator[Fetcher]:
    client = Fetcher(user_agent="test-agent/1.0")
    yield client
    await client.aclose()


async def read_all(fetcher: Fetcher, url: str, settings: config.Defaults = SETTINGS,
                   **kwargs: Any) -> tuple[Response, bytes]:
    """Fetch ``url`` (loopback allowed unless said otherwise) and return the whole body."""
    kwargs.setdefault("allow_private", True)
    parts: list[bytes] = []
    async with fetcher.fetch(url, settings, **kwargs) as response:
        async for chunk in response.chunks():
            assert 0 < len(chunk) <= CHUNK_SIZE
            parts.append(chunk)
    return response, b"".join(parts)


async def failure(fetcher: Fetcher, url: str, settings: config.Defaults = SETTINGS,
                  **kwargs: Any) -> FetchError:
    """The FetchError that fetching and reading ``url`` raises."""
    with pytest.raises(FetchError) as caught:
        await read_all(fetcher, url, settings, **kwargs)
    assert "\n" not in caught.value.message
    return caught.value


# --- plain fetches, headers -------------------------------------------------------------------


async def test_body_status_and_request_headers(http_server: TestServer, fetcher: Fetcher) -> None:
    body = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4: several chunks, not a multiple
    http_server.route("/sitemap.xml", Reply(body=body, headers={"ETag": '"v1"',
                                                               "Content-Type": "text/xml"}))
    response, got = await read_all(fetcher, http_server.url("/sitemap.xml"))
    assert got == body
    assert (response.status, response.url, response.etag) == (
        200, http_server.url("/sitemap.xml"), '"v1"')
    assert response.not_modified is False
    assert response.wire_bytes == len(body)
    assert response.content_type == "text/xml"
    sent = http_server.requests[0].headers
    assert sent["user-agent"] == "test-agent/1.0"
    assert sent["accept-encoding"] == "gzip, deflate"
    assert "if-none-match" not in sent
    assert "if-modified-since" not in sent


async def test_target_user_agent_overrides_the_fetchers(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    http_server.route("/s.xml", Reply(body=XML))
    await read_all(fetcher, http_server.url("/s.xml"), SETTINGS.model_copy(
        update={"user_agent": "shop-bot/2"}))
    assert http_server.requests[0].headers["user-agent"] == "shop-bot/2"


async def test_https_trusts_the_ca_bundle_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """https:// goes through a verifying transport (built on first use): a self-signed server
    is refused until its certificate is in the CA bundle (SSL_CERT_FILE)."""
    pair = self_signed(tmp_path)
    if pair is None:
        if os.environ.get("CI"):
            pytest.fail("openssl is needed for the https test")
        pytest.skip("openssl is not installed: cannot make a certificate for https")
    with TestServer(tls=pair) as server:
        server.route("/s.xml", Reply(body=XML))
        url = server.url("/s.xml")
        assert url.startswith("https://")
        refused = Fetcher()
        try:
            error = await failure(refused, url)
        finally:
            await refused.aclose()
        assert "certificate" in error.message.lower()
        monkeypatch.setenv("SSL_CERT_FILE", str(pair[0]))
        trusting = Fetcher()
        try:
            response, got = await read_all(trusting, url)
        finally:
            await trusting.aclose()
        assert (response.status, got) == (200, XML)
        assert len(server.requests) == 1  # the refused handshake sent no request


# --- conditional GET --------------------------------------------------------------------------


def conditional(request: Request) -> Reply:
    headers = {"ETag": '"v1"', "Last-Modified": "Wed, 01 Jan 2025 00:00:00 GMT"}
    if request.headers.get("if-none-match") == '"v1"' or (
        request.headers.get("if-modified-since") == headers["Last-Modified"]
    ):
        return Reply(304, headers=headers)
    return Reply(body=XML, headers=headers)


@pytest.mark.parametrize(("validator", "header"), [
    ("etag", "if-none-match"), ("last_modified", "if-modified-since")])
async def test_conditional_get_gives_not_modified(
    http_server: TestServer, fetcher: Fetcher, validator: str, header: str
) -> None:
    http_server.route("/s.xml", conditional)
    first, body = await read_all(fetcher, http_server.url("/s.xml"))
    assert body == XML
    assert first.not_modified is False
    value = first.etag if validator == "etag" else first.last_modified
    second, again = await read_all(fetcher, http_server.url("/s.xml"), **{validator: value})
    assert (second.status, second.not_modified, again) == (304, True, b"")
    assert http_server.requests[1].headers[header] == value
    other = "if-modified-since" if header == "if-none-match" else "if-none-match"
    assert other not in http_server.requests[1].headers


async def test_cookies_are_neither_kept_nor_sent(http_server: TestServer, fetcher: Fetcher,
                                                 ) -> None:
    """A check reads the document as any first visitor would: what one response sets does not
    follow the fetcher to the next request (nor to another target on the same host)."""
    http_server.route("/s.xml", Reply(body=XML, headers={"Set-Cookie": "session=abc; Path=/"}))
    for _ in range(2):
        response, _body = await read_all(fetcher, http_server.url("/s.xml"))
        assert response.status == 200
    assert [r.headers.get("cookie") for r in http_server.requests] == [None, None]


async def test_a_proxy_in_the_environment_is_not_used(
    http_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The address policy judges the peer actually connected to: through a proxy that would
    be the proxy. Here the proxy's port is closed, so using it would fail the fetch."""
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    http_server.route("/s.xml", Reply(body=XML))
    fetcher = Fetcher()
    try:
        response, body = await read_all(fetcher, http_server.url("/s.xml"))
    finally:
        await fetcher.aclose()
    assert (response.status, body) == (200, XML)
    assert len(http_server.requests) == 1


async def test_304s_keep_the_connection(http_server: TestServer, fetcher: Fetcher) -> None:
    """Re-checks answered 304 reuse one kept-alive connection instead of opening one each."""
    http_server.route("/s.xml", conditional)
    for _ in range(4):
        response, body = await read_all(fetcher, http_server.url("/s.xml"), etag='"v1"')
        assert (response.status, body) == (304, b"")
    assert len({r.client for r in http_server.requests}) == 1


async def test_304_to_an_unconditional_get_is_a_protocol_error(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    http_server.route("/s.xml", Reply(304))
    error = await failure(fetcher, http_server.url("/s.xml"))
    assert error.kind == "protocol"


# --- compression ------------------------------------------------------------------------------


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


BIG_XML = XML + b"<!--" + b"x" * 300_000 + b"-->"


@pytest.mark.parametrize(("path", "headers", "wire"), [
    pytest.param("/sitemap.xml", {}, gzip_bytes(BIG_XML), id="gzip-by-magic"),
    pytest.param("/sitemap.xml", {"Content-Encoding": "gzip"}, gzip_bytes(BIG_XML),
                 id="gzip-by-header"),
    pytest.param("/sitemap.xml.gz", {"Content-Type": "application/gzip"}, gzip_bytes(BIG_XML),
                 id="gzip-by-name"),
    pytest.param("/sitemap.xml.gz", {"Content-Encoding": "gzip"},
                 gzip_bytes(gzip_bytes(BIG_XML)), id="gzip-encoded-gz-file"),
    pytest.param("/sitemap.xml.gz", {"Content-Encoding": "gzip"}, gzip_bytes(BIG_XML),
                 id="gz-file-served-with-gzip-encoding"),
    pytest.param("/sitemap.xml", {"Content-Encoding": "deflate"}, zlib.compress(BIG_XML),
                 id="deflate-zlib"),
    pytest.param("/sitemap.xml", {"Content-Encoding": "deflate"}, raw_deflate(BIG_XML),
                 id="deflate-raw"),
    pytest.param("/sitemap.xml", {"Content-Encoding": "identity"}, BIG_XML, id="identity"),
    pytest.param("/sitemap.xml", {},
                 gzip_bytes(BIG_XML[:1000]) + gzip_bytes(BIG_XML[1000:]), id="gzip-multi-member"),
])
async def test_compressed_bodies_are_decompressed(
    http_server: TestServer, fetcher: Fetcher, path: str, headers: dict[str, str], wire: bytes
) -> None:
    http_server.route(path, Reply(body=wire, headers=headers))
    response, body = await read_all(fetcher, http_server.url(path))
    assert body == BIG_XML
    assert response.wire_bytes == len(wire)


async def test_compressed_body_streamed_in_tiny_pieces(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    wire = gzip_bytes(BIG_XML)
    pieces = [wire[i:i + 1] for i in range(8)] + [wire[8:]]  # the magic arrives split
    http_server.route("/s.xml", Reply(body=lambda: iter(pieces)))
    _, body = await read_all(fetcher, http_server.url("/s.xml"))
    assert body == BIG_XML


# A body that announces gzip and cannot be inflated is the rule gzip-invalid; an
# encoding the monitor does not speak is no rule of a sitemap's, and stays "decode".
@pytest.mark.parametrize(("headers", "wire", "kind"), [
    pytest.param({}, gzip_bytes(BIG_XML)[:-100], "gzip-invalid", id="truncated-gzip"),
    pytest.param({"Content-Encoding": "gzip"}, BIG_XML, "gzip-invalid",
                 id="gzip-header-plain-body"),
    pytest.param({"Content-Encoding": "br"}, BIG_XML, "decode", id="unsupported-encoding"),
    pytest.param({}, b"\x1f\x8b" + b"garbage" * 10, "gzip-invalid", id="corrupt-gzip"),
])
async def test_undecodable_bodies(
    http_server: TestServer, fetcher: Fetcher, headers: dict[str, str], wire: bytes, kind: str
) -> None:
    http_server.route("/s.xml", Reply(body=wire, headers=headers))
    error = await failure(fetcher, http_server.url("/s.xml"))
    assert error.kind == kind
    assert http_server.url("/s.xml") in error.message


# --- size limits ------------------------------------------------------------------------------

GIB = 2**30


def gzip_zeros(total: int) -> Callable[[], Iterator[bytes]]:
    """A body factory streaming gzip of ``total`` zero bytes, compressed as it is sent."""
    block = bytes(CHUNK_SIZE)

    def body() -> Iterator[bytes]:
        compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS, 9, zlib.Z_RLE)
        for _ in range(total // len(block)):
            out = compressor.compress(block)
            if out:
                yield out
        yield compressor.flush()

    return body


def test_the_bomb_is_a_bomb() -> None:
    """The stream used below really is tiny on the wire for what it inflates to."""
    wire = b"".join(gzip_zeros(64 * 2**20)())
    assert len(wire) < 64 * 2**20 // 500
    assert gzip.decompress(wire) == bytes(64 * 2**20)


@pytest.mark.parametrize("headers", [{}, {"Content-Encoding": "gzip"}], ids=["magic", "header"])
async def test_gzip_bomb_is_cut_at_max_bytes_quickly_in_bounded_memory(
    http_server: TestServer, fetcher: Fetcher, headers: dict[str, str]
) -> None:
    max_bytes = 16 * 2**20
    http_server.route("/bomb.xml.gz", Reply(body=gzip_zeros(GIB), headers=headers))
    settings = SETTINGS.model_copy(update={"max_bytes": max_bytes})
    delivered = 0
    responses: list[Response] = []

    async def consume() -> None:
        nonlocal delivered
        async with fetcher.fetch(http_server.url("/bomb.xml.gz"), settings,
                                 allow_private=True) as response:
            responses.append(response)
            async for chunk in response.chunks():
                delivered += len(chunk)  # and dropped: a streaming consumer

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(FetchError) as caught:
            await consume()
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert caught.value.kind == "size-too-large"
    assert max_bytes - CHUNK_SIZE < delivered <= max_bytes
    assert responses[0].wire_bytes < max_bytes // 100  # the 1 GiB bomb was not read to its end
    assert elapsed < 20  # a busy machine is slow; the bomb is not read to its end
    assert peak < 4 * 2**20, f"peak traced memory {peak} bytes"
    assert rss_growth_kib < 64 * 1024


# --- local files: the same inflater and the same bound (validate FILE) -------------------------


@pytest.mark.parametrize("name", ["s.xml", "s.xml.gz", "s.gz.bin"])
def test_a_file_reads_as_a_fetched_body_would(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(BIG_XML if name == "s.xml" else gzip_bytes(BIG_XML))  # sniffed, not named
    body = b"".join(read_file(str(path), "file:///s", len(BIG_XML)))
    assert body == BIG_XML
    with pytest.raises(FetchError) as caught:
        b"".join(read_file(str(path), "file:///s", len(BIG_XML) - 1))
    assert caught.value.kind == "size-too-large"


def test_a_gzip_bomb_file_stops_at_max_bytes(tmp_path: Path) -> None:
    path = tmp_path / "bomb.xml.gz"
    with path.open("wb") as file:
        for piece in gzip_zeros(GIB)():
            file.write(piece)
    assert path.stat().st_size < 2 * 2**20
    delivered: list[int] = []
    started = time.monotonic()
    chunks = read_file(str(path), "file:///bomb.xml.gz", 8 * 2**20)
    with pytest.raises(FetchError) as caught:
        delivered.extend(len(chunk) for chunk in chunks)  # counted and dropped: streamed
    assert caught.value.kind == "size-too-large"
    assert sum(delivered) <= 8 * 2**20
    assert time.monotonic() - started < 20  # not read to its end


@pytest.mark.parametrize("wire", [gzip_bytes(BIG_XML)[:-100], b"\x1f\x8b" + b"garbage" * 10],
                         ids=["truncated", "corrupt"])
def test_a_broken_gzip_file_is_gzip_invalid(tmp_path: Path, wire: bytes) -> None:
    path = tmp_path / "s.xml.gz"
    path.write_bytes(wire)
    with pytest.raises(FetchError) as caught:
        b"".join(read_file(str(path), "file:///s.xml.gz", 2**26))
    assert caught.value.kind == "gzip-invalid"
    assert "file:///s.xml.gz" in caught.value.message


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "close-delimited"])
async def test_endless_body_is_cut_at_max_bytes(
    http_server: TestServer, fetcher: Fetcher, chunked: bool
) -> None:
    http_server.route("/s.xml", Reply(body=repeat(b"<url>" * 2000), chunked=chunked))
    settings = SETTINGS.model_copy(update={"max_bytes": 2 * 2**20})
    started = time.monotonic()
    error = await failure(fetcher, http_server.url("/s.xml"), settings)
    assert error.kind == "size-too-large"
    assert error.permanent
    assert time.monotonic() - started < 20  # an endless body never ends by itself


# --- timeouts ---------------------------------------------------------------------------------


async def test_slow_drip_is_cut_by_the_total_timeout(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    # Each byte arrives well within read_timeout, so only the total deadline can end this.
    http_server.route("/s.xml", Reply(body=repeat(b"<"), chunk_delay=0.05))
    settings = SETTINGS.model_copy(update={"timeout": 1.0, "read_timeout": 5.0})
    started = time.monotonic()
    error = await failure(fetcher, http_server.url("/s.xml"), settings)
    elapsed = time.monotonic() - started
    assert error.kind == "timeout"
    assert "1s in total" in error.message
    assert 0.9 < elapsed < 4.5  # the 1 s total, not the 5 s read timeout


async def test_slow_head_is_cut_by_the_read_timeout(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    http_server.route("/s.xml", Reply(body=XML, delay=3))
    settings = SETTINGS.model_copy(update={"timeout": 10.0, "read_timeout": 0.5})
    started = time.monotonic()
    error = await failure(fetcher, http_server.url("/s.xml"), settings)
    assert error.kind == "timeout"
    assert "read timeout" in error.message
    assert time.monotonic() - started < 2.9  # the 0.5 s read timeout, not the 3 s answer


# --- redirects --------------------------------------------------------------------------------


def chain(server: TestServer, hops: int) -> None:
    """/r0 -> /r1 -> ... -> /r{hops} which answers XML; Locations alternate absolute/relative."""
    for i in range(hops):
        target = f"/r{i + 1}" if i % 2 else server.url(f"/r{i + 1}")
        server.route(f"/r{i}", redirect(target, status=(301, 302, 307, 308)[i % 4]))
    server.route(f"/r{hops}", Reply(body=XML))


async def test_redirect_chain_within_the_limit(http_server: TestServer, fetcher: Fetcher) -> None:
    chain(http_server, 5)
    response, body = await read_all(fetcher, http_server.url("/r0"))
    assert body == XML
    assert response.url == http_server.url("/r5")
    assert [r.route for r in http_server.requests] == [f"/r{i}" for i in range(6)]
    assert all(r.headers["user-agent"] == "test-agent/1.0" for r in http_server.requests)


async def test_too_many_redirects(http_server: TestServer, fetcher: Fetcher) -> None:
    chain(http_server, 6)
    error = await failure(fetcher, http_server.url("/r0"))
    assert (error.kind, error.permanent) == ("redirects", True)
    assert "more than 5 redirects" in error.message
    assert len(http_server.requests) == 6  # /r6 never requested


async def test_redirect_loop(http_server: TestServer, fetcher: Fetcher) -> None:
    http_server.route("/a", redirect("/b"))
    http_server.route("/b", redirect(http_server.url("/a")))
    error = await failure(fetcher, http_server.url("/a"))
    assert error.kind == "redirects"
    assert "loop" in error.message
    assert len(http_server.requests) == 2


@pytest.mark.parametrize(("location", "kind"), [
    ("file:///etc/passwd", "invalid-url"), ("gopher://example.com/", "invalid-url"),
    ("http://[::1/s.xml", "invalid-url"),  # a malformed Location, as _next_hop reads it
])
async def test_redirect_to_an_unusable_url(
    http_server: TestServer, fetcher: Fetcher, location: str, kind: str
) -> None:
    http_server.route("/a", redirect(location))
    error = await failure(fetcher, http_server.url("/a"))
    assert error.kind == kind
    assert http_server.url("/a") in error.message


# --- statuses and Retry-After ------------------------------------------------------------------


def answers(*replies: Reply) -> Callable[[Request], Reply]:
    """A route answering each request with the next reply, the last one forever."""
    queue = list(replies)
    return lambda request: queue.pop(0) if len(queue) > 1 else queue[0]


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_seconds_is_honoured(
    http_server: TestServer, fetcher: Fetcher, status: int
) -> None:
    http_server.route("/s.xml", answers(Reply(status, headers={"Retry-After": "1"}),
                                        Reply(body=XML)))
    started = time.monotonic()
    _, body = await read_all(fetcher, http_server.url("/s.xml"))
    assert body == XML
    first, second = http_server.requests
    assert 0.95 < second.time - first.time < 4.5  # waited, not the 5 s maximum
    assert time.monotonic() - started < 10


async def test_retry_after_http_date_is_honoured(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)
    http_server.route("/s.xml", answers(Reply(429, headers={"Retry-After": when}),
                                        Reply(body=XML)))
    _, body = await read_all(fetcher, http_server.url("/s.xml"))
    assert body == XML
    first, second = http_server.requests
    assert 0.5 < second.time - first.time < 3  # HTTP-dates have whole seconds


async def test_retry_after_too_long_fails_fast(http_server: TestServer, fetcher: Fetcher) -> None:
    http_server.route("/s.xml", Reply(429, headers={"Retry-After": "3600"}))
    started = time.monotonic()
    error = await failure(fetcher, http_server.url("/s.xml"))
    assert time.monotonic() - started < 4  # not the Retry-After it was told
    assert (error.kind, error.status, error.permanent) == ("http-status", 429, False)
    assert "Retry-After 3600" in error.message
    assert len(http_server.requests) == 1


async def test_retry_after_retries_at_most_twice(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    http_server.route("/s.xml", Reply(503, headers={"Retry-After": "0"}))
    error = await failure(fetcher, http_server.url("/s.xml"))
    assert (error.kind, error.status) == ("http-status", 503)
    assert "after 2 retries" in error.message
    assert len(http_server.requests) == 3


@pytest.mark.parametrize(("status", "permanent"), [
    (500, False), (502, False), (404, True), (410, True), (403, True), (408, False), (429, False)])
async def test_error_statuses(
    http_server: TestServer, fetcher: Fetcher, status: int, permanent: bool
) -> None:
    http_server.route("/s.xml", Reply(status, b"nope"))
    error = await failure(fetcher, http_server.url("/s.xml"))
    assert (error.kind, error.status, error.permanent) == ("http-status", status, permanent)
    assert f"HTTP {status}" in error.message
    assert http_server.url("/s.xml") in error.message


async def test_redirect_status_without_location(http_server: TestServer, fetcher: Fetcher) -> None:
    http_server.route("/s.xml", Reply(302))
    error = await failure(fetcher, http_server.url("/s.xml"))
    assert (error.kind, error.status) == ("http-status", 302)


async def test_connection_refused(fetcher: Fetcher) -> None:
    url = f"http://127.0.0.1:{closed_port()}/sitemap.xml"
    started = time.monotonic()
    error = await failure(fetcher, url)
    assert error.kind == "connect"
    assert url in error.message
    assert time.monotonic() - started < 2


async def test_unresolvable_host() -> None:
    fetcher = Fetcher(resolver=fake_resolver({}), transport=RecordingTransport())
    try:
        error = await failure(fetcher, "http://no-such-host.test/sitemap.xml")
    finally:
        await fetcher.aclose()
    assert error.kind == "connect"
    assert "no-such-host.test" in error.message


@pytest.mark.parametrize("url", ["ftp://example.com/s.xml", "not a url", "http:///s.xml",
                                 "http://exa mple.com/"])
async def test_invalid_urls(url: str) -> None:
    fetcher = Fetcher(transport=RecordingTransport())
    try:
        error = await failure(fetcher, url)
    finally:
        await fetcher.aclose()
    assert (error.kind, error.permanent) == ("invalid-url", True)


# --- address policy ---------------------------------------------------------------------------

BLOCKED_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/sitemap.xml",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/latest/meta-data/",
    "http://2852039166/latest/meta-data/",  # 169.254.169.254 as one decimal number
    "http://0xa9.0xfe.0xa9.0xfe/latest/meta-data/",
    "http://100.100.100.200/latest/meta-data/",  # Alibaba Cloud
    "http://[::169.254.169.254]/latest/meta-data/",  # IPv4-compatible
    "http://[::ffff:100.100.100.200]/latest/meta-data/",
    "http://192.0.0.192/latest/",  # Oracle Cloud
    "http://metadata.test/computeMetadata/v1/",  # a name that resolves to the metadata address
    "http://mixed.test/sitemap.xml",  # one good and one metadata address
]
RESOLVER = fake_resolver({
    "metadata.test": ["169.254.169.254"],
    "mixed.test": ["93.184.216.34", "fe80::1%eth0"],
    "intranet.test": ["10.1.2.3"],
    "public.test": ["93.184.216.34"],
})


@pytest.mark.parametrize("url", BLOCKED_URLS)
@pytest.mark.parametrize("allow_private", [False, True])
async def test_metadata_and_link_local_are_never_connected_to(
    url: str, allow_private: bool
) -> None:
    transport = RecordingTransport()  # raises if the fetcher tries to connect anywhere
    fetcher = Fetcher(transport=transport, resolver=RESOLVER)
    try:
        error = await failure(fetcher, url, allow_private=allow_private)
    finally:
        await fetcher.aclose()
    assert (error.kind, error.permanent) == ("address-blocked", True)
    assert "link-local or metadata" in error.message
    assert url in error.message
    assert transport.urls == []


@pytest.mark.parametrize("url", ["http://intranet.test/s.xml", "http://10.0.0.1/s.xml",
                                 "http://[::1]/s.xml", "http://[fd12::1]/s.xml",
                                 "http://0.0.0.0/s.xml", "http://127.1/s.xml"])
async def test_private_addresses_refused_without_allow_private(url: str) -> None:
    transport = RecordingTransport()
    fetcher = Fetcher(transport=transport, resolver=RESOLVER)
    try:
        error = await failure(fetcher, url, allow_private=False)
    finally:
        await fetcher.aclose()
    assert error.kind == "address-blocked"
    assert "private or loopback" in error.message
    assert transport.urls == []


async def test_loopback_refused_without_allow_private_and_allowed_with_it(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    http_server.route("/s.xml", Reply(body=XML))
    error = await failure(fetcher, http_server.url("/s.xml"), allow_private=False)
    assert error.kind == "address-blocked"
    assert http_server.requests == []
    _, body = await read_all(fetcher, http_server.url("/s.xml"), allow_private=True)
    assert body == XML
    assert len(http_server.requests) == 1


@pytest.mark.parametrize("location", ["http://169.254.169.254/latest/meta-data/",
                                      "http://metadata.test/latest/meta-data/",
                                      "http://[fe80::a9fe:a9fe]/"])
async def test_redirect_to_a_blocked_address_is_refused(
    http_server: TestServer, location: str
) -> None:
    http_server.route("/s.xml", redirect(location))
    transport = RecordingTransport(httpx.AsyncHTTPTransport())
    fetcher = Fetcher(transport=transport, resolver=RESOLVER)
    try:
        error = await failure(fetcher, http_server.url("/s.xml"), allow_private=True)
    finally:
        await fetcher.aclose()
    assert error.kind == "address-blocked"
    assert location in error.message
    assert transport.urls == [http_server.url("/s.xml")]  # the redirect was never followed


class Rebinding:
    """A site at 127.0.0.2 and an internal canary at 127.0.0.1 on the same port, and a
    resolver that gives the policy 127.0.0.2 for ``localhost`` (and counts its calls), while
    the system resolves ``localhost`` to the canary: the connection must go where the policy
    looked, with the name kept in the Host header and the TLS handshake."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self.canary = TestServer(tls).start()
        self.site = TestServer(tls, host="127.0.0.2", port=self.canary.port).start()
        self.calls: list[str] = []
        for server in (self.site, self.canary):
            server.route("/s.xml", Reply(body=XML))
            server.route("/robots.txt", Reply(body=b"User-agent: *\nAllow: /\n"))
            server.route("/page", Reply(body=b"<html>ok</html>",
                                        headers={"Content-Type": "text/html"}))
        self.scheme = "https" if tls else "http"

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return ["127.0.0.2"] if host == "localhost" else []

    def url(self, path: str) -> str:
        return f"{self.scheme}://localhost:{self.site.port}{path}"

    def stop(self) -> None:
        self.site.stop()
        self.canary.stop()


@pytest.fixture
def rebinding() -> Iterator[Rebinding]:
    scene = Rebinding()
    yield scene
    scene.stop()


async def test_a_fetch_connects_to_the_address_the_policy_vetted(rebinding: Rebinding) -> None:
    """DNS rebinding: a second resolution of the name never decides where a fetch goes."""
    fetcher = Fetcher(resolver=rebinding.resolve)
    try:
        for _ in range(2):  # a new connection, then one kept alive
            _, body = await read_all(fetcher, rebinding.url("/s.xml"))
            assert body == XML
    finally:
        await fetcher.aclose()
    assert rebinding.canary.requests == []
    assert [r.headers["host"] for r in rebinding.site.requests] == [
        f"localhost:{rebinding.site.port}"] * 2
    assert rebinding.calls == ["localhost", "localhost"]


async def test_a_url_check_connects_to_the_address_the_policy_vetted(
    rebinding: Rebinding
) -> None:
    fetcher = Fetcher(resolver=rebinding.resolve)
    try:
        for _ in range(2):
            answer = await fetcher.probe(rebinding.url("/page"), SETTINGS, body_limit=100,
                                         allow_private=True)
            assert (answer.status, answer.head) == (200, b"<html>ok</html>")
    finally:
        await fetcher.aclose()
    assert rebinding.canary.requests == []
    assert [r.headers["host"] for r in rebinding.site.requests] == [
        f"localhost:{rebinding.site.port}"] * 2


async def test_https_to_the_vetted_address_keeps_the_name_for_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The certificate names ``localhost`` only: it verifies because the handshake sends and
    checks the name, not the address connected to."""
    pair = self_signed(tmp_path, "DNS:localhost")
    if pair is None:
        pytest.skip("openssl is not installed: cannot make a certificate for https")
    monkeypatch.setenv("SSL_CERT_FILE", str(pair[0]))
    scene = Rebinding(tls=pair)
    fetcher = Fetcher(resolver=scene.resolve)
    try:
        _, body = await read_all(fetcher, scene.url("/s.xml"))
        answer = await fetcher.probe(scene.url("/page"), SETTINGS, body_limit=100,
                                     allow_private=True)
    finally:
        await fetcher.aclose()
        scene.stop()
    assert (body, answer.status) == (XML, 200)
    assert scene.canary.requests == []
    assert len(scene.site.requests) == 2


async def test_a_kept_connection_is_not_reused_past_a_stricter_policy(
    http_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection made for a target that may reach loopback is not lent to one that may
    not, even when the name now resolves to a public address."""
    http_server.route("/s.xml", Reply(body=XML))
    answers = iter([["127.0.0.1"], ["93.184.216.34"]])

    async def resolve(host: str, port: int) -> list[str]:
        return next(answers)

    # The second fetch must open a connection of its own to the vetted public address: the
    # attempt is recorded and refused here, so that no packet leaves this machine.
    attempts: list[str] = []
    connect = httpcore.AnyIOBackend.connect_tcp

    async def loopback_only(backend: Any, host: str, *args: Any, **kwargs: Any) -> Any:
        attempts.append(host)
        if not host.startswith("127."):
            raise httpcore.ConnectError(f"the test refuses to connect to {host}")
        return await connect(backend, host, *args, **kwargs)

    monkeypatch.setattr(httpcore.AnyIOBackend, "connect_tcp", loopback_only)

    fetcher = Fetcher(resolver=resolve)
    url = f"http://localhost:{http_server.port}/s.xml"
    settings = SETTINGS.model_copy(update={"connect_timeout": 0.2, "timeout": 0.5})
    try:
        await read_all(fetcher, url, settings, allow_private=True)
        error = await failure(fetcher, url, settings, allow_private=False)
    finally:
        await fetcher.aclose()
    assert error.kind in ("connect", "timeout")
    assert len(http_server.requests) == 1
    assert attempts == ["127.0.0.1", "93.184.216.34"]  # a new connection, not the kept one


@pytest.mark.parametrize(("ip", "blocked", "private"), [
    ("169.254.169.254", True, True), ("169.254.0.1", True, True), ("fe80::1", True, True),
    ("fe80::1%eth0", True, True), ("febf::1", True, True), ("fd00:ec2::254", True, True),
    ("::ffff:169.254.169.254", True, True), ("64:ff9b::a9fe:a9fe", True, True),
    ("127.0.0.1", False, True), ("::1", False, True), ("10.0.0.1", False, True),
    ("172.16.0.1", False, True), ("192.168.1.1", False, True), ("fd12:3456::1", False, True),
    ("100.64.0.1", False, True), ("0.0.0.0", False, True), ("::", False, True),
    ("::ffff:10.0.0.1", False, True), ("224.0.0.1", False, True),
    ("93.184.216.34", False, False), ("2606:2800:220:1::1", False, False),
    ("fd00:ec2::253", False, True), ("not-an-ip", True, True),
    # every cloud metadata address, in every spelling a connect() accepts
    ("100.100.100.200", True, True), ("192.0.0.192", True, True),
    ("::169.254.169.254", True, True), ("::a9fe:a9fe", True, True),
    ("::100.100.100.200", True, True), ("::ffff:100.100.100.200", True, True),
    ("::ffff:192.0.0.192", True, True), ("::ffff:0:169.254.169.254", True, True),
    ("64:ff9b::6464:64c8", True, True), ("2002:a9fe:a9fe::1", True, True),
    ("FD00:EC2:0:0:0:0:0:254", True, True), ("fd00:ec2::254%eth0", True, True),
    ("100.100.100.201", False, True), ("::93.184.216.34", False, False),
])
def test_address_classification(ip: str, blocked: bool, private: bool) -> None:
    assert is_blocked_address(ip) is blocked
    assert is_private_address(ip) is private


# --- politeness -------------------------------------------------------------------------------


async def test_per_host_limit_holds_at_the_server(http_server: TestServer) -> None:
    http_server.route("/s.xml", Reply(body=XML, delay=0.2))
    fetcher = Fetcher(per_host=2)
    try:
        started = time.monotonic()
        results = await asyncio.gather(
            *(read_all(fetcher, http_server.url("/s.xml")) for _ in range(6)))
        elapsed = time.monotonic() - started
    finally:
        await fetcher.aclose()
    assert [body for _, body in results] == [XML] * 6
    assert http_server.max_active == 2
    assert elapsed >= 0.55  # three rounds of two


async def test_per_host_slot_is_held_while_the_body_is_read(http_server: TestServer) -> None:
    http_server.route("/s.xml", Reply(body=XML))
    fetcher = Fetcher(per_host=1)
    order: list[str] = []

    async def hold(name: str) -> None:
        async with fetcher.fetch(http_server.url("/s.xml"), SETTINGS,
                                 allow_private=True) as response:
            order.append(f"{name} open")
            await asyncio.sleep(0.2)
            async for _ in response.chunks():
                pass
            order.append(f"{name} done")

    try:
        await asyncio.gather(hold("a"), hold("b"))
    finally:
        await fetcher.aclose()
    assert order == ["a open", "a done", "b open", "b done"]


def test_retry_after_parsing() -> None:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    assert retry_after_seconds("120", now) == 120
    assert retry_after_seconds(" 0 ", now) == 0
    assert retry_after_seconds("Wed, 01 Jan 2025 00:00:30 GMT", now) == 30
    assert retry_after_seconds("Tue, 31 Dec 2024 23:00:00 GMT", now) == 0
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds("-5", now) is None
    assert retry_after_seconds(None, now) is None


# --- a target's basic auth --------------------------------------------------------------------

ROBOT = "Basic " + base64.b64encode(b"robot:hunter2").decode()


def with_auth(url: str) -> config.Defaults:
    """SETTINGS with basic auth for the origin of ``url``, as ``config.resolve`` makes it."""
    auth = config.BasicAuth(origin=config.origin_of(url), username="robot",
                            password="hunter2")  # noqa: S106 - a test fixture
    return SETTINGS.model_copy(update={"auth": auth})


async def test_basic_auth_goes_to_the_targets_own_origin_only(fetcher: Fetcher) -> None:
    with TestServer() as site, TestServer() as other:
        other.route("/elsewhere.xml", Reply(body=XML))
        site.route("/s.xml", redirect(other.url("/elsewhere.xml")))
        site.route("/page", Reply(body=b"ok"))
        settings = with_auth(site.url("/"))
        _, body = await read_all(fetcher, site.url("/s.xml"), settings)
        await fetcher.probe(site.url("/page"), settings, body_limit=10, allow_private=True)
        await fetcher.probe(other.url("/elsewhere.xml"), settings, body_limit=10,
                            allow_private=True)
    assert body == XML
    assert [r.headers.get("authorization") for r in site.requests] == [ROBOT, ROBOT]
    assert [r.headers.get("authorization") for r in other.requests] == [None, None]


async def test_an_error_never_shows_the_password_of_a_url(
    http_server: TestServer, fetcher: Fetcher
) -> None:
    """A child or a redirect of a watched site may carry user:password@; errors name it
    without the password."""
    url = f"http://robot:hunter2@127.0.0.1:{http_server.port}/missing.xml"
    error = await failure(fetcher, url)
    assert (error.kind, error.status) == ("http-status", 404)
    assert "hunter2" not in error.message
    assert "hunter2" not in str(error)
    assert f"http://robot:***@127.0.0.1:{http_server.port}/missing.xml" in error.message
    http_server.route("/s.xml", redirect("ftp://robot:hunter2@example.com/s.xml"))
    error = await failure(fetcher, http_server.url("/s.xml"))
    assert error.kind == "invalid-url"
    assert "hunter2" not in str(error)


@pytest.mark.parametrize(("text", "shown"), [
    ("see http://u:p4ss@h.example/x", "see http://u:***@h.example/x"),
    ("'HTTPS://u:p@h/' and ftp://a:b@c/", "'HTTPS://u:***@h/' and ftp://a:***@c/"),
    ("http://user@h.example/ has no password", "http://user@h.example/ has no password"),
    ("http://h.example/a:b@c stays", "http://h.example/a:b@c stays"),
])
def test_redact_url(text: str, shown: str) -> None:
    assert redact_url(text) == shown
