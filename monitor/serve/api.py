"""The daemon's one HTTP port: /metrics, /healthz, /readyz and the read-only JSON API.

Starlette, served by uvicorn in the scheduler's own event loop: the API needs a handful of
routes, JSON and query parsing, and nothing of a full framework; being ASGI it shares the loop
(and so the process's registry) with the checks instead of a thread. Database reads run in
worker threads so a slow query never stalls the scheduler.

Admission: the HTTP port shares the event loop with the checks, so what it accepts
is bounded before any route runs. ``Admission`` sits in front of the routes: ``/healthz``
passes untouched (it reads only memory); the JSON API, ``/metrics`` and ``/readyz`` each have a
bound on requests in progress, and a request beyond its bound is answered 503 with
``Retry-After`` at once, without the database. The API reads through ``ApiReads``: its own
engine with a small pool and as many threads, so a flood can neither queue the checks' database
work behind its own in the shared thread pool nor take the checks' connections. Past
``max_connections`` open connections, a refused API request also closes its connection.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlencode

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from monitor.config import Http, Web
from monitor.core.errors import MonitorError, SchemaError, StoreError
from monitor.listing import params as listing
from monitor.listing import sorting
from monitor.serve import auth as webauth
from monitor.serve import listingapi as api_listings
from monitor.serve import openapi, pages
from monitor.serve.auth import BasicAuth
from monitor.serve.headers import SecurityHeaders
from monitor.serve.listingapi import error
from monitor.store import db, listingreads, targetrows, urlstates

__all__ = ["Admission", "ApiReads", "create_app"]

# /readyz answers within this, database or not: under the chart's probe timeout (3 s).
READY_TIMEOUT = 2.0
_SUFFIXES = ("snapshots", "url", "url-health", *api_listings.ROUTES)
# Requests in progress at once on /metrics and on /readyz: a scrape and a probe or two.
_SMALL_LANE = 2
# A refused client is asked to come back after at least this many seconds, and its connection
# is not read again before then (see HOLD).
RETRY_AFTER = 1
# Refused requests read per second at most, whatever the number of connections: a refused
# connection waits its turn (number of connections / this) before it is read again.
REFUSALS_PER_SECOND = 200
# The scope key in which Admission (and BasicAuth) tell the server how long not to read a
# refused connection.
HOLD = webauth.HOLD
_T = TypeVar("_T")
log = structlog.get_logger("monitor.serve.api")


class ApiReads:
    """The API's own way to the database: an engine with a small pool, as many threads."""

    def __init__(self, engine: Engine, connections: int) -> None:
        self.engine = engine
        self._threads = ThreadPoolExecutor(connections, thread_name_prefix="api-db")

    async def __call__(self, read: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``read(engine, *args, **kwargs)`` in one of the API's threads."""
        call = functools.partial(read, self.engine, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    def close(self) -> None:
        """Let the threads end once their reads are done."""
        self._threads.shutdown(wait=False)


_REFUSAL = json.dumps({"error": {
    "status": 503, "message": "too many requests in progress; retry later"}}).encode()


@functools.cache
def _refusal(retry_after: int, close: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    headers = [(b"content-type", b"application/json"),
               (b"content-length", b"%d" % len(_REFUSAL)),
               (b"retry-after", b"%d" % retry_after)]
    if close:
        headers.append((b"connection", b"close"))
    return ({"type": "http.response.start", "status": 503, "headers": headers},
            {"type": "http.response.body", "body": _REFUSAL})


class Admission:
    """In front of the routes: each lane admits a bounded number of requests, refuses the rest.

    A refusal is a fixed 503, sent without touching the routes or the database. Its
    ``Retry-After`` grows with the open connections so that, all connections together, at most
    ``REFUSALS_PER_SECOND`` refused requests are read a second; the same time goes in the
    request's scope under ``HOLD`` for the server to stop reading that connection until then
    (serve.server). Past ``max_connections`` the refusal closes its connection instead.
    """

    def __init__(
        self,
        app: ASGIApp,
        limits: Http,
        *,
        open_connections: Callable[[], int] = lambda: 0,
        on_refused: Callable[[str], None] = lambda _lane: None,
    ) -> None:
        self._app = app
        self._bounds = {"api": limits.max_requests, "metrics": _SMALL_LANE,
                        "readyz": _SMALL_LANE}
        self._busy = dict.fromkeys(self._bounds, 0)
        self._max_connections = limits.max_connections
        self._open_connections = open_connections
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit, refuse, or (``/healthz``) pass straight through."""
        path = scope.get("path", "")
        if scope["type"] != "http" or path == "/healthz":
            await self._app(scope, receive, send)
            return
        lane = path[1:] if path in ("/metrics", "/readyz") else "api"
        connections = self._open_connections()
        crowded = lane == "api" and connections > self._max_connections
        if crowded or self._busy[lane] >= self._bounds[lane]:
            self._on_refused(lane)
            # Spread around the mean, so held connections come back a few at a time.
            spread = random.uniform(0.5, 1.5)  # noqa: S311
            hold = max(RETRY_AFTER, round(spread * connections / REFUSALS_PER_SECOND))
            if not crowded:
                scope[HOLD] = hold
            start, body = _refusal(hold, crowded)
            await send(start)
            await send(body)
            return
        self._busy[lane] += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self._busy[lane] -= 1


def _int(request: Request, key: str, default: int | None, low: int, high: int) -> int | None:
    raw = api_listings.one(request, key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise listing.BadParameter(f"{key}: not an integer: {raw!r}") from None
    if not low <= value <= high:
        raise listing.BadParameter(f"{key}: must be between {low} and {high}")
    return value


def _next_link(request: Request, **params: Any) -> str:
    query = dict(request.query_params)
    query.update({k: str(v) for k, v in params.items()})
    return f"{request.url.path}?{urlencode(query)}"


class _WriteProbe:
    """``/readyz``'s database probe: a cheap write (``db.check_writable``) with its own timeout.

    At most one probe runs at a time: while the database hangs (a frozen server), later
    requests wait for the same one, each for ``timeout`` at most, instead of each leaving one
    more thread and connection stuck behind it.
    """

    def __init__(self, engine: Engine, timeout: float) -> None:
        self._engine = engine
        self._timeout = timeout
        self._running: asyncio.Future[None] | None = None
        self._logged: str | None = None

    async def __call__(self) -> str | None:
        """None when the database took the write in time, else why not."""
        if self._running is None or self._running.done():
            # The database's own waits (a lock, a statement) end well within the timeout,
            # so a locked database is reported as such.
            self._running = asyncio.ensure_future(asyncio.to_thread(
                db.check_writable, self._engine, timeout=self._timeout / 2))
            # Read its outcome even when no request waits for it any more.
            self._running.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.wait_for(asyncio.shield(self._running), self._timeout)
        except TimeoutError:
            return self._said(f"the database did not answer within {self._timeout:g} s", None)
        except MonitorError as exc:
            # The answer is open to anyone: what is wrong, not where (the log says where).
            # A schema behind names only revisions and the command that helps.
            public = (str(exc) if isinstance(exc, SchemaError)
                      else exc.public if isinstance(exc, StoreError) else None)
            return self._said(public or "the database cannot be written", str(exc))
        self._logged = None
        return None

    def _said(self, public: str, detail: str | None) -> str:
        """Log a failure once until it changes or the database is ready again."""
        if detail is not None and detail != self._logged:
            log.warning("database not ready", error=detail, answer=public)
        self._logged = detail
        return public


def create_app(
    *,
    engine: Engine,
    registry: CollectorRegistry,
    alive: Callable[[], bool],
    configured: Callable[[], Collection[str]],
    on_scrape: Callable[[], Awaitable[None]] | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ready_timeout: float = READY_TIMEOUT,
    reads: ApiReads | None = None,
    limits: Http | None = None,
    open_connections: Callable[[], int] = lambda: 0,
    on_refused: Callable[[str], None] = lambda _lane: None,
    exposition: Callable[[], bytes] | None = None,
    web: Web | None = None,
) -> ASGIApp:
    """The ASGI application of the daemon's HTTP port, behind its admission gate; every
    answer carries the security headers (``monitor.serve.headers``).

    ``engine`` serves the probes; the API reads through ``reads`` (by default its own threads
    over ``engine``); ``/metrics`` sends ``exposition()`` (by default the registry's text).
    """
    limits = limits or Http()
    read = reads or ApiReads(engine, limits.database_connections)

    async def metrics(_request: Request) -> Response:
        if on_scrape is not None:
            await on_scrape()
        # 10,000 targets are 400,000 samples, seconds of rendering: not on the event loop.
        body = await asyncio.to_thread(exposition or functools.partial(generate_latest, registry))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def healthz(_request: Request) -> Response:
        if alive():
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "stopping"}, status_code=503)

    probe = _WriteProbe(engine, ready_timeout)

    async def readyz(_request: Request) -> Response:
        error = await probe()
        if error is not None:
            return JSONResponse({"status": "unavailable", "error": error}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def targets(request: Request) -> Response:
        try:
            sort = sorting.parse(api_listings.one(request, "sort"), "targets")
        except listing.BadParameter as exc:
            return error(400, str(exc))
        names = set(configured())
        found = await read(targetrows.list_targets)
        for item in found:
            item["configured"] = item["name"] in names
        if sort is not None:
            by_name = {item["name"]: item for item in found}
            found = [by_name[row["name"]]
                     for row in sorting.ordered(map(pages.sort_values, found), sort, "name")]
        return JSONResponse({"targets": found})

    async def openapi_json(_request: Request) -> Response:
        return Response(openapi.body(), media_type="application/json")

    async def target_routes(request: Request) -> Response:
        path: str = request.path_params["rest"]
        if "\x00" in path:  # no target has one, and a database refuses to compare with it
            return error(400, "name: holds a NUL character")
        whole, name, suffix = await api_listings.split_path(read, path, _SUFFIXES)
        if not suffix:
            if whole is None:
                return error(404, f"no target named {path!r}")
            whole["configured"] = whole["name"] in set(configured())
            return JSONResponse(whole)
        try:
            if suffix == "snapshots":
                return await _snapshots(request, name)
            if suffix == "url":
                return JSONResponse(await api_listings.story(request, name, read))
            if suffix == "url-health":
                found = await read(urlstates.health, name)
                if found is None:
                    return error(404, f"no target named {name!r}")
                return JSONResponse(found)
            return await api_listings.respond(request, name, suffix, read, clock())
        except listing.BadParameter as exc:
            return error(400, str(exc))
        except listing.NotFound as exc:
            return error(404, str(exc))

    async def _snapshots(request: Request, name: str) -> Response:
        limit = _int(request, "limit", 50, 1, api_listings.SNAPSHOTS_MAX_LIMIT)
        before = _int(request, "before", None, 1, listing.MAX_ID)
        sort = sorting.parse(api_listings.one(request, "sort"), "snapshots")
        cursor = api_listings.one(request, "cursor") or None
        fmt = api_listings.format_of(request)
        if fmt != "json":  # an export: every snapshot, streamed
            try:
                opened = await read(listingreads.open_snapshots, name, before, sort)
            except listing.NotFound:
                return error(404, f"no target named {name!r}")
            return StreamingResponse(listing.render(opened, fmt),
                                     media_type=api_listings.MEDIA[fmt],
                                     headers=api_listings.download(name, "snapshots", fmt))
        assert limit is not None
        rows = await read(targetrows.list_snapshots, name, limit=limit + 1, before=before,
                          sort=sort, cursor=cursor)
        if rows is None:
            return error(404, f"no target named {name!r}")
        more = len(rows) > limit
        rows = rows[:limit]
        after: dict[str, Any] = {"before": rows[-1]["id"]} if rows else {}
        if sort is not None and sort != targetrows.NEWEST and rows:
            after = {"cursor": targetrows.snapshot_cursor(sort, rows[-1])}
        return JSONResponse({
            "target": name,
            "snapshots": rows,
            "next": _next_link(request, **after, limit=limit) if more else None,
        })

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        answer = error(exc.status_code, str(exc.detail))
        answer.headers.update(exc.headers or {})  # a 405's Allow
        return answer

    async def internal_error(request: Request, exc: Exception) -> Response:
        # The details go to the log, for the operator; the client learns what to do, not
        # where the database is or who the daemon is to it.
        if isinstance(exc, StoreError):
            log.warning("api_database_error", path=request.url.path, error=str(exc))
            answer = error(503, "the database is unavailable; retry later")
            answer.headers["retry-after"] = str(RETRY_AFTER)
            return answer
        log.error("api_error", path=request.url.path, error=f"{type(exc).__name__}: {exc}",
                  exc_info=exc)
        return error(500, "internal error: the daemon's log has the details")

    routes = Starlette(
        routes=[
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/api/v1/openapi.json", openapi_json),
            Route("/api/v1/targets", targets),
            Route("/api/v1/targets/{rest:path}", target_routes),
            *pages.routes(read, configured, clock),
        ],
        # StoreError is answered here; any other exception is a bug, answered by Starlette's
        # outermost layer, which also raises it again for the server to log.
        exception_handlers={HTTPException: http_error, StoreError: internal_error,
                            Exception: internal_error},
    )
    guarded: ASGIApp = routes
    if web is not None and web.basic_auth_users:
        guarded = BasicAuth(routes, web.basic_auth_users, protect_metrics=web.protect_metrics,
                            on_refused=on_refused)
    admitted = Admission(guarded, limits, open_connections=open_connections,
                         on_refused=on_refused)
    return SecurityHeaders(admitted, tls=web is not None and web.tls_cert_file is not None)
