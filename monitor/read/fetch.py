"""The fetch stage: one URL -> a stream of decompressed body chunks, within every limit.

One long-lived ``httpx.AsyncClient`` serves every check. Redirects are followed here,
not by httpx, so the address policy (``monitor.net.addresses``) judges every hop before it is
connected to. httpx never decodes the body: ``Response.chunks`` inflates gzip and deflate itself
(``monitor.net.inflate``), incrementally and bounded, so a gzip bomb or an endless body stops at
``max_bytes``. A total
deadline covers the whole fetch, body included, so a slow drip ends too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from monitor import config
from monitor.core.errors import FetchError
from monitor.net import bounded, connections
from monitor.net.addresses import (
    Resolver,
    check_address,
    check_host,
    is_blocked_address,
    is_private_address,
    system_resolver,
)
from monitor.net.inflate import CHUNK_SIZE, Body, layers
from monitor.net.pageclient import Pages

__all__ = [
    "CHUNK_SIZE", "Answer", "Fetcher", "Response", "is_blocked_address", "is_private_address",
]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_RETRIES = 2  # Retry-After retries per fetch
_HOST = re.compile(r"[A-Za-z0-9._:-]+")  # httpx gives IDNA names as xn--, IPv6 without brackets
_ACCEPT = (
    "application/xml, text/xml, application/rss+xml, application/atom+xml,"
    " text/plain;q=0.9, */*;q=0.5"
)
_ACCEPT_PAGE = "text/html, application/xhtml+xml, */*;q=0.8"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _httpx_error(exc: httpx.HTTPError, url: str) -> FetchError:
    """Translate an httpx failure into the stable kinds of ``FetchError``."""
    detail = _one_line(exc)
    if isinstance(exc, httpx.ConnectTimeout):
        return FetchError("timeout", f"connect timeout fetching {url}: {detail}")
    if isinstance(exc, httpx.TimeoutException):
        return FetchError("timeout", f"read timeout fetching {url}: {detail}")
    if isinstance(exc, httpx.ConnectError):
        return FetchError("connect", f"cannot connect to fetch {url}: {detail}")
    if isinstance(exc, httpx.UnsupportedProtocol):
        return FetchError("invalid-url", f"unsupported URL {url}: {detail}", permanent=True)
    return FetchError("protocol", f"HTTP protocol error fetching {url}: {detail}")


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A Retry-After value (seconds or an HTTP-date) as seconds from ``now``; None if unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class Response:
    """A fetched document: its final URL, validators and a bounded, decompressed body stream."""

    def __init__(
        self,
        raw: httpx.Response,
        *,
        url: str,
        settings: config.Defaults,
        deadline: float,
        not_modified: bool,
    ) -> None:
        self._raw = raw
        self._settings = settings
        self._deadline = deadline
        self._layers = [] if not_modified else layers(raw.headers.get("content-encoding", ""), url)
        self._started = False
        self.url = url
        self.status = raw.status_code
        self.etag = raw.headers.get("etag")
        self.last_modified = raw.headers.get("last-modified")
        self.content_type = raw.headers.get("content-type")
        self.not_modified = not_modified
        self.wire_bytes = 0

    async def chunks(self) -> AsyncIterator[bytes]:
        """The decompressed body in chunks of at most 64 KiB; raises ``FetchError`` on a limit."""
        if self._started:
            raise RuntimeError(f"the body of {self.url} can be read only once")
        self._started = True
        if self.not_modified:
            return
        body = Body(self._layers, self.url, self._settings.max_bytes)
        raw = self._raw.aiter_raw(CHUNK_SIZE)
        while True:
            try:
                async with asyncio.timeout_at(self._deadline):
                    data = await anext(raw)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise self._total_timeout() from None
            except httpx.HTTPError as exc:
                raise _httpx_error(exc, self.url) from None
            self.wire_bytes += len(data)
            for out in body.feed(data):
                yield out
        for out in body.finish():
            yield out

    def _total_timeout(self) -> FetchError:
        return FetchError(
            "timeout", f"fetching {self.url} took longer than {self._settings.timeout:g}s in total"
        )

    async def aclose(self) -> None:
        """Release the connection."""
        await self._raw.aclose()


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer to one GET of a page, redirects not followed (the URL checks)."""

    url: str
    status: int
    headers: list[tuple[str, str]]  # names in lower case, in order, repeats kept
    # The first ``body_limit`` bytes of the decompressed body of a 2xx answer; b"" otherwise.
    head: bytes
    truncated: bool = False  # the body went on past ``body_limit``

    def header(self, name: str) -> str | None:
        """The first value of a header (``name`` in lower case), or None."""
        return next((value for key, value in self.headers if key == name), None)

    @property
    def location(self) -> str | None:
        """Where a redirect points, resolved against ``url``; None if not a redirect."""
        value = self.header("location")
        if self.status not in REDIRECT_STATUSES or not value:
            return None
        try:
            return str(httpx.URL(self.url).join(value.strip()))
        except (httpx.InvalidURL, ValueError):
            return None


class Fetcher:
    """One long-lived httpx.AsyncClient shared by every check."""

    def __init__(
        self,
        *,
        user_agent: str = config.DEFAULT_USER_AGENT,
        transport: httpx.AsyncBaseTransport | None = None,
        per_host: int = 2,
        resolver: Resolver | None = None,
    ) -> None:
        self._user_agent = user_agent
        self._per_host = per_host
        self._resolver = resolver or system_resolver
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._slot_users: dict[str, int] = {}
        # httpcore loads anyio's asyncio backend on the first request (~35 ms): load it now,
        # with the rest of the HTTP stack, so that a check's own time is its work.
        with contextlib.suppress(ImportError):
            import anyio._backends._asyncio  # noqa: F401
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        # Requests go to the transports themselves, not through an httpx.AsyncClient: this
        # fetcher follows redirects itself and wants no cookies, no proxy from the environment
        # (the peer would be the proxy, past the address policy) and no auth, which is all a
        # client adds. A round of 1,000 conditional GETs answered 304: 12% less CPU (under
        # callgrind).
        self._http: httpx.AsyncBaseTransport = transport or connections.transport(limits, _NO_TLS)
        self._https: httpx.AsyncBaseTransport = transport or _TLSTransport(limits)
        self._pages = Pages(httpx.create_ssl_context)

    async def aclose(self) -> None:
        """Close the transports and their connections."""
        await self._pages.aclose()
        await self._http.aclose()
        if self._https is not self._http:
            await self._https.aclose()

    @asynccontextmanager
    async def fetch(
        self,
        url: str,
        settings: config.Defaults,
        *,
        etag: str | None = None,
        last_modified: str | None = None,
        allow_private: bool = False,
    ) -> AsyncIterator[Response]:
        """GET ``url`` within the target's limits; the context holds the connection and a slot."""
        parsed = _parse_url(url, url)
        key = f"{parsed.host}:{parsed.port or _default_port(parsed)}"
        async with self._slot(key):
            # The deadline starts once a slot is ours: queueing politely is not the server's fault.
            deadline = asyncio.get_running_loop().time() + settings.timeout
            response = await self._open(
                url, settings, etag=etag, last_modified=last_modified,
                allow_private=allow_private, deadline=deadline,
            )
            try:
                yield response
            finally:
                await response.aclose()

    async def probe(self, url: str, settings: config.Defaults, *, body_limit: int,
                    allow_private: bool = False,
                    validators: tuple[str | None, str | None] = (None, None)) -> Answer:
        """GET ``url`` once, in one of its host's slots: the status, the headers and the first
        ``body_limit`` bytes of a 2xx body (``monitor.net.pageclient``: kept-alive connections, no
        httpx). Redirects are the caller's to follow (each hop is judged by the address
        policy here). ``validators`` (ETag, Last-Modified of an earlier answer) make it a
        conditional GET, which a server may answer 304. Raises ``FetchError`` when no answer
        came."""
        parsed = _parse_url(url, url)
        port = parsed.port or _default_port(parsed)
        host = parsed.host
        headers = self._headers(settings, *validators)
        headers["Accept"] = _ACCEPT_PAGE
        headers.update(_credentials(settings, url))
        default = (parsed.scheme, port) in (("http", 80), ("https", 443))
        authority = f"[{host}]" if ":" in host else host
        fields = [("Host", authority if default else f"{authority}:{port}"), *headers.items()]
        target = parsed.raw_path or b"/"

        def check_peer(ip: str) -> None:
            check_address(ip, url=url, allow_private=allow_private)

        async with self._slot(f"{host}:{port}"):
            try:
                async with asyncio.timeout(settings.timeout):
                    vetted = await check_host(host, port, url=url, allow_private=allow_private,
                                              resolver=self._resolver)
                    got = await self._pages.get(
                        url, parsed.scheme, host, port, target, fields, vetted.addresses,
                        connect_timeout=settings.connect_timeout,
                        read_timeout=settings.read_timeout, body_limit=body_limit,
                        check_peer=check_peer)
            except TimeoutError:
                raise FetchError("timeout", f"fetching {url} took longer than "
                                 f"{settings.timeout:g}s in total") from None
        return Answer(url=url, status=got.status, headers=got.headers, head=got.head,
                      truncated=got.truncated)

    async def post(self, url: str, settings: config.Defaults, *, content: bytes,
                   headers: dict[str, str], allow_private: bool = False,
                   keep: int = bounded.KEEP) -> bounded.Reply:
        """POST ``content`` to ``url`` once, under the address rules and in one of its host's
        slots, redirects not followed; the answer read to ``keep`` bytes of its body
        (``monitor.net.bounded``). Raises ``FetchError`` when no answer came."""
        parsed = _parse_url(url, url)
        timeouts = _timeouts(settings)
        sent = {"User-Agent": self._agent(settings), **headers, "Accept-Encoding": "identity"}
        async with self._slot(f"{parsed.host}:{parsed.port or _default_port(parsed)}"):
            deadline = asyncio.get_running_loop().time() + settings.timeout
            raw = await self._send(url, sent, timeouts, allow_private, deadline, settings,
                                   content=content)
            try:
                async with asyncio.timeout_at(deadline):
                    return await bounded.read(raw, where=url, keep=keep)
            except TimeoutError:
                raise FetchError("timeout", f"posting to {url} took longer than "
                                 f"{settings.timeout:g}s in total") from None
            except httpx.HTTPError as exc:
                raise _httpx_error(exc, url) from None

    @asynccontextmanager
    async def _slot(self, key: str) -> AsyncIterator[None]:
        """Hold one of ``per_host`` slots of ``key``; forget the semaphore when nobody uses it."""
        semaphore = self._slots.setdefault(key, asyncio.Semaphore(self._per_host))
        self._slot_users[key] = self._slot_users.get(key, 0) + 1
        try:
            async with semaphore:
                yield
        finally:
            self._slot_users[key] -= 1
            if not self._slot_users[key]:
                del self._slot_users[key], self._slots[key]

    def _agent(self, settings: config.Defaults) -> str:
        # A target's own user_agent wins over the daemon-wide one given to the Fetcher.
        agent = settings.user_agent
        return self._user_agent if agent == config.DEFAULT_USER_AGENT else agent

    def _headers(self, settings: config.Defaults, etag: str | None, last_modified: str | None
                 ) -> dict[str, str]:
        headers = {"User-Agent": self._agent(settings), "Accept": _ACCEPT,
                   "Accept-Encoding": "gzip, deflate"}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        return headers

    async def _open(
        self, url: str, settings: config.Defaults, *, etag: str | None,
        last_modified: str | None, allow_private: bool, deadline: float,
    ) -> Response:
        """Send the request, following redirects and Retry-After, until a document answers."""
        headers = self._headers(settings, etag, last_modified)
        conditional = bool(etag or last_modified)
        timeouts = _timeouts(settings)
        current, seen, retries = url, {url: None}, 0
        while True:
            raw = await self._send(current, headers, timeouts, allow_private, deadline, settings)
            status = raw.status_code
            if status in REDIRECT_STATUSES and raw.headers.get("location"):
                await raw.aclose()
                current = self._next_hop(current, raw, seen, settings)
                continue
            if status in (429, 503):
                delay = retry_after_seconds(raw.headers.get("retry-after"))
                await raw.aclose()
                loop_time = asyncio.get_running_loop().time()
                if (
                    delay is not None and delay <= settings.retry_after_max
                    and retries < MAX_RETRIES and loop_time + delay < deadline
                ):
                    retries += 1
                    await asyncio.sleep(delay)
                    continue
                raise _status_error(raw, current, retried=retries)
            if status == 304:
                if not conditional:
                    await raw.aclose()
                    raise FetchError("protocol", f"HTTP 304 to an unconditional GET of {current}")
                # A 304 has no body; reading its end hands the connection back to the pool
                # (unread, every re-check would open a new one).
                await raw.aread()
                return Response(raw, url=current, settings=settings, deadline=deadline,
                                not_modified=True)
            if status >= 300:
                await raw.aclose()
                raise _status_error(raw, current, retried=retries)
            try:
                return Response(raw, url=current, settings=settings, deadline=deadline,
                                not_modified=False)
            except FetchError:
                await raw.aclose()
                raise

    def _next_hop(self, current: str, raw: httpx.Response, seen: dict[str, None],
                  settings: config.Defaults) -> str:
        location = raw.headers["location"]
        try:
            target = str(httpx.URL(current).join(location.strip()))
        except (httpx.InvalidURL, ValueError):
            raise FetchError("invalid-url", f"{current} redirects to an invalid URL {location!r}",
                             permanent=True) from None
        _parse_url(target, f"{target} (redirected from {current})")
        if target in seen:
            raise FetchError("redirects", f"redirect loop: {current} redirects back to {target}",
                             permanent=True)
        if len(seen) > settings.max_redirects:
            raise FetchError(
                "redirects",
                f"more than {settings.max_redirects} redirects fetching {next(iter(seen))}"
                f" (last hop {current} -> {target})",
                permanent=True,
            )
        seen[target] = None
        return target

    async def _send(self, url: str, headers: dict[str, str], timeouts: httpx.Timeout,
                    allow_private: bool, deadline: float, settings: config.Defaults,
                    content: bytes | None = None) -> httpx.Response:
        """Check the address policy for ``url``, then send the request (a GET, or a POST of
        ``content``) and read the head. A target's credentials go with GETs only."""
        parsed = _parse_url(url, url)
        try:
            async with asyncio.timeout_at(deadline):
                vetted = await check_host(parsed.host, parsed.port or _default_port(parsed),
                                          url=url, allow_private=allow_private,
                                          resolver=self._resolver)
                # The transport connects to the vetted addresses, never resolving again.
                credentials = _credentials(settings, url) if content is None else {}
                request = httpx.Request(
                    "GET" if content is None else "POST", parsed,
                    headers={**headers, **credentials}, content=content, extensions={
                        "timeout": timeouts.as_dict(), connections.VETTED: vetted})
                transport = self._https if parsed.scheme == "https" else self._http
                raw = await transport.handle_async_request(request)
                raw.request = request
        except TimeoutError:
            raise FetchError(
                "timeout", f"fetching {url} took longer than {settings.timeout:g}s in total"
            ) from None
        except httpx.HTTPError as exc:
            raise _httpx_error(exc, url) from None
        try:
            _check_peer(raw, url, allow_private)
        except FetchError:
            await raw.aclose()
            raise
        return raw


# The context of the http:// transport, which never makes a TLS connection (https:// URLs go
# to _TLSTransport): it trusts no certificate, so a connection made by mistake would fail.
_NO_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _timeouts(settings: config.Defaults) -> httpx.Timeout:
    """A request's timeouts under a target's settings (the total is kept by a deadline)."""
    return httpx.Timeout(connect=settings.connect_timeout, read=settings.read_timeout,
                         write=settings.read_timeout, pool=settings.timeout)


class _TLSTransport(httpx.AsyncBaseTransport):
    """The https:// transport, built on its first request: loading the CA bundle costs ~80 ms,
    which a run that only fetches http:// URLs (a one-shot check, say) never needs."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._transport: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._transport is None:
            self._transport = connections.transport(self._limits, httpx.create_ssl_context())
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()


def _check_peer(raw: httpx.Response, url: str, allow_private: bool) -> None:
    """Judge the address actually connected to: the vetted one, unless a transport that
    ignores ``connections.VETTED`` (an httpx release that renamed its pool) resolved again."""
    stream = raw.extensions.get("network_stream")
    if stream is None:
        return  # a test transport, or a transport that does not say
    peer = stream.get_extra_info("server_addr")
    if isinstance(peer, tuple) and peer:
        check_address(str(peer[0]), url=url, allow_private=allow_private)


def _credentials(settings: config.Defaults, url: str) -> dict[str, str]:
    """The Authorization header of a target's basic auth for ``url``, if it is on the target's
    own origin (a redirect elsewhere, or to plain http, gets none)."""
    auth = settings.auth
    if auth is None or not auth.sent_to(url):
        return {}
    token = base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


def _status_error(raw: httpx.Response, url: str, *, retried: int) -> FetchError:
    status = raw.status_code
    text = f"HTTP {status} {raw.reason_phrase} from {url}".replace("  ", " ")
    retry_after = raw.headers.get("retry-after")
    if retry_after is not None:
        text += f" (Retry-After {retry_after.strip()}"
        text += f", after {retried} retries)" if retried else ")"
    if 300 <= status < 400:
        return FetchError("http-status", text + " without a Location to follow", status=status,
                          permanent=True)
    permanent = 400 <= status < 500 and status not in (408, 429)
    return FetchError("http-status", text, status=status, permanent=permanent)


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


def _parse_url(url: str, where: str) -> httpx.URL:
    """An absolute http(s) URL, or ``FetchError(invalid-url)``."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise FetchError("invalid-url", f"invalid URL {where}: {_one_line(exc)}",
                         permanent=True) from None
    if parsed.scheme not in ("http", "https") or not _HOST.fullmatch(parsed.host):
        raise FetchError("invalid-url", f"not an absolute http(s) URL: {where}", permanent=True)
    return parsed
