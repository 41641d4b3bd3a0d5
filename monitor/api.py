"""The daemon's one HTTP port: /metrics, /healthz, /readyz and the read-only JSON API (SPEC 7).

Starlette, served by uvicorn in the scheduler's own event loop: the API needs a handful of
routes, JSON and query parsing, and nothing of a full framework; being ASGI it shares the loop
(and so the process's one database engine and registry) with the checks instead of a thread.
Database reads run in worker threads so a slow query never stalls the scheduler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from monitor.config import parse_duration
from monitor.errors import MonitorError
from monitor.model import CHANGE_KINDS
from monitor.store import daemon as store
from monitor.store import db

__all__ = ["create_app"]

MAX_LIMIT = 1000
# /readyz answers within this, database or not: under the chart's probe timeout (3 s).
READY_TIMEOUT = 2.0
_SUFFIXES = ("snapshots", "changes")


class _BadRequest(Exception):
    """A query parameter that cannot be used; answered with 400."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)


def _int(request: Request, key: str, default: int | None, low: int, high: int) -> int | None:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _BadRequest(f"{key}: not an integer: {raw!r}") from None
    if not low <= value <= high:
        raise _BadRequest(f"{key}: must be between {low} and {high}")
    return value


def parse_since(raw: str, now: datetime) -> datetime:
    """An ISO 8601 date or time (UTC unless it says otherwise), or a duration ago (``24h``)."""
    text = raw.strip()
    # A bare number would be ambiguous (a year, or seconds?): a duration needs its unit.
    if text[-1:] in ("s", "m", "h", "d"):
        try:
            return now - timedelta(seconds=parse_duration(text))
        except ValueError:
            pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise _BadRequest(
            f"since: not an ISO 8601 time or a duration: {raw!r} "
            "(e.g. 2024-05-01T12:00:00Z or 24h)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _kinds(request: Request) -> set[str] | None:
    raw = request.query_params.getlist("kind")
    kinds = {k.strip() for value in raw for k in value.split(",") if k.strip()}
    unknown = kinds - set(CHANGE_KINDS)
    if unknown:
        raise _BadRequest(
            f"kind: unknown {', '.join(sorted(unknown))} (one of {', '.join(CHANGE_KINDS)})")
    return kinds or None


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
            return f"the database did not answer within {self._timeout:g} s"
        except MonitorError as exc:
            return str(exc)
        return None


def create_app(
    *,
    engine: Engine,
    registry: CollectorRegistry,
    alive: Callable[[], bool],
    configured: Callable[[], Collection[str]],
    on_scrape: Callable[[], Awaitable[None]] | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ready_timeout: float = READY_TIMEOUT,
) -> Starlette:
    """The ASGI application of the daemon's HTTP port."""

    async def metrics(_request: Request) -> Response:
        if on_scrape is not None:
            await on_scrape()
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

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

    async def targets(_request: Request) -> Response:
        names = set(configured())
        found = await asyncio.to_thread(store.list_targets, engine)
        for item in found:
            item["configured"] = item["name"] in names
        return JSONResponse({"targets": found})

    async def target_routes(request: Request) -> Response:
        path: str = request.path_params["rest"]
        name, _, suffix = path.rpartition("/")
        # A target's name may itself contain "/": the whole path wins if it names a target.
        whole = await asyncio.to_thread(store.get_target, engine, path)
        if whole is not None or suffix not in _SUFFIXES or not name:
            if whole is None:
                return _error(404, f"no target named {path!r}")
            whole["configured"] = whole["name"] in set(configured())
            return JSONResponse(whole)
        try:
            if suffix == "snapshots":
                return await _snapshots(request, name)
            return await _changes(request, name)
        except _BadRequest as exc:
            return _error(400, str(exc))

    async def _snapshots(request: Request, name: str) -> Response:
        limit = _int(request, "limit", 50, 1, MAX_LIMIT)
        before = _int(request, "before", None, 1, 2**62)
        assert limit is not None
        rows = await asyncio.to_thread(
            store.list_snapshots, engine, name, limit=limit + 1, before=before)
        if rows is None:
            return _error(404, f"no target named {name!r}")
        more = len(rows) > limit
        rows = rows[:limit]
        return JSONResponse({
            "target": name,
            "snapshots": rows,
            "next": _next_link(request, before=rows[-1]["id"], limit=limit) if more else None,
        })

    async def _changes(request: Request, name: str) -> Response:
        limit = _int(request, "limit", 100, 1, MAX_LIMIT)
        assert limit is not None
        cursor = request.query_params.get("cursor") or None
        before = None
        if cursor is not None:
            if not cursor.isdigit():
                raise _BadRequest(f"cursor: not a cursor from this API: {cursor!r}")
            before = int(cursor)
        raw_since = request.query_params.get("since")
        since = parse_since(raw_since, clock()) if raw_since else None
        rows = await asyncio.to_thread(
            store.list_changes, engine, name,
            limit=limit + 1, since=since, kinds=_kinds(request), before=before,
        )
        if rows is None:
            return _error(404, f"no target named {name!r}")
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = str(rows[-1]["id"]) if more else None
        return JSONResponse({
            "target": name,
            "changes": rows,
            "next_cursor": next_cursor,
            "next": _next_link(request, cursor=next_cursor) if next_cursor else None,
        })

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(exc.status_code, str(exc.detail))

    async def internal_error(_request: Request, exc: Exception) -> Response:
        return _error(503 if isinstance(exc, MonitorError) else 500, str(exc))

    return Starlette(
        routes=[
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/api/v1/targets", targets),
            Route("/api/v1/targets/{rest:path}", target_routes),
        ],
        exception_handlers={HTTPException: http_error, MonitorError: internal_error},
    )
