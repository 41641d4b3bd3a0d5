"""The API's listings: ``urls``, ``issues``, ``diff`` and ``changes`` of a target.

The same listings as the command line (monitor.listing.params, monitor.store.listingreads)
over HTTP: JSON, NDJSON or CSV (``?format=``, or ``Accept: text/csv`` /
``application/x-ndjson``). A page (a ``limit``, and every JSON answer: 1,000 rows unless it
says) is read whole in one of the API's threads and carries the cursor that continues it
(``next_cursor``, ``next`` and a ``Link`` header); CSV and NDJSON without a limit stream
every row to the end, read a document or a few thousand rows at a time, in constant memory.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from monitor.core.model import CHANGE_RULES, RULES
from monitor.listing import params as listing
from monitor.listing import sorting
from monitor.read import validate
from monitor.store import listingreads, targetrows

__all__ = [
    "MAX_LIMIT", "MEDIA", "ROUTES", "SNAPSHOTS_MAX_LIMIT", "download", "error", "format_of",
    "one", "opening", "respond", "sorts_of", "split_path", "story",
]

ROUTES = ("urls", "issues", "diff", "changes")
MAX_LIMIT = 10_000  # rows of one page: what is read whole before it is sent
SNAPSHOTS_MAX_LIMIT = 1_000  # snapshots of one page of /snapshots (monitor.serve.api)
DEFAULT_LIMIT = 1_000
MEDIA = {"json": "application/json", "ndjson": "application/x-ndjson",
          "csv": "text/csv; charset=utf-8"}
_ACCEPT = (("text/csv", "csv"), ("application/x-ndjson", "ndjson"),
           ("application/ndjson", "ndjson"))
_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")
Read = Callable[..., Awaitable[Any]]


async def split_path(read: Read, path: str, suffixes: Collection[str],
                     ) -> tuple[dict[str, Any] | None, str, str]:
    """``NAME`` or ``NAME/SUFFIX`` of a target route: (the target the whole path names, or
    None; the name; the suffix, "" for the target itself). A target's name may itself contain
    "/": the whole path wins if it names a target."""
    name, _, suffix = path.rpartition("/")
    whole = await read(targetrows.get_target, path)
    if whole is not None or suffix not in suffixes or not name:
        return whole, path, ""
    return None, name, suffix


def one(request: Request, key: str) -> str | None:
    """A parameter that takes one value: given twice is a mistake to say, not to guess at."""
    values = request.query_params.getlist(key)
    if len(values) > 1:
        raise listing.BadParameter(f"{key}: given {len(values)} times; give it once")
    return values[0] if values else None


def format_of(request: Request) -> str:
    """The answer's form: ``format=``, else by Accept (CSV, NDJSON), else JSON."""
    raw = one(request, "format")
    if raw:
        if raw not in MEDIA:
            raise listing.BadParameter(f"format: {raw!r} is not one of json, ndjson, csv")
        return raw
    accept = request.headers.get("accept", "")
    return next((fmt for media, fmt in _ACCEPT if media in accept), "json")


def _limit(request: Request, fmt: str) -> int | None:
    raw = one(request, "limit")
    if raw is None or raw == "":
        return DEFAULT_LIMIT if fmt == "json" else None
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:
        raise listing.BadParameter(f"limit: not a number from 1 to {MAX_LIMIT}: {raw[:40]!r}")
    return int(raw)


def _text(request: Request, key: str) -> str | None:
    raw = one(request, key)
    if raw is not None and "\x00" in raw:
        raise listing.BadParameter(f"{key}: holds a NUL character")
    return raw or None


def opening(request: Request, name: str, suffix: str, now: datetime) -> Callable[[Any], Any]:
    """The listing's opening, to run in a database thread: ``open(engine) -> Listing``. Its
    parameters are read here, so that a bad one is a 400 before the database is asked."""
    after = _text(request, "cursor")
    params = request.query_params
    if suffix == "urls":
        at = listing.parse_snapshot(_text(request, "at"), "at", now)
        status = _text(request, "status")
        if status is not None and status not in listing.STATUSES:
            raise listing.BadParameter(f"status: {status!r} is not one of "
                                       f"{', '.join(listing.STATUSES)}")
        q = listing.parse_search(one(request, "q"))
        sort = sorting.parse(_text(request, "sort"), sorts_of(suffix, status))
        return lambda engine: listingreads.open_urls(engine, name, at, status, after, q, sort)
    sort = sorting.parse(_text(request, "sort"), suffix)
    if suffix == "issues":
        at = listing.parse_snapshot(_text(request, "at"), "at", now)
        rules = listing.parse_rules(params.getlist("rule"), RULES)
        return lambda engine: listingreads.open_issues(engine, name, at, rules, after,
                                                validate.describe, sort)
    known = listing.DIFF_KINDS if suffix == "diff" else listing.KINDS
    kinds = listing.parse_kinds(params.getlist("kind"), known=known)
    if suffix == "diff":
        start = listing.parse_snapshot(_text(request, "from"), "from", now)
        if start is None:
            raise listing.BadParameter("from: required (a snapshot id, an ISO time or a "
                                       "duration back from now)")
        end = listing.parse_snapshot(_text(request, "to"), "to", now)
        return lambda engine: listingreads.open_diff(engine, name, start, end, kinds, after, sort)
    raw_since = _text(request, "since")
    since = listing.parse_snapshot(raw_since, "since", now)
    until = listing.parse_snapshot(_text(request, "until"), "until", now)
    reasons = listing.parse_reasons(params.getlist("reason"))
    rules = listing.rule_ids(params.getlist("rule"), CHANGE_RULES)
    q = listing.parse_search(one(request, "q"))
    return lambda engine: listingreads.open_changes(engine, name, since, kinds, after,
                                             (raw_since or "").strip(), reasons, rules, q, sort,
                                             until=until)


def sorts_of(suffix: str, status: str | None) -> str:
    """The name of a listing's sortable columns (``sorting.SORTS``): the URLs in a health
    state (or broken) sort as the URL states do, the URL set as its entries."""
    return "health" if suffix == "urls" and status in listing.HEALTH_FILTERS else suffix


async def story(request: Request, name: str, read: Read) -> dict[str, Any]:
    """One URL's whole story (``?loc=``); raises ``BadParameter`` and ``NotFound``."""
    from monitor.store.storyreads import read_story

    loc = (_text(request, "loc") or "").strip()
    if not loc:
        raise listing.BadParameter("loc: required: the URL as the sitemap lists it")
    found: dict[str, Any] = await read(read_story, name, loc, validate.describe)
    return found


def _link(request: Request) -> Callable[[str], str]:
    raw = request.scope.get("raw_path")  # as the client sent it: a name's "/" stays %2F
    path = raw.decode("latin-1") if raw else request.url.path

    def link(next_cursor: str) -> str:
        query = dict(request.query_params)
        query["cursor"] = next_cursor
        return f"{path}?{urlencode(query)}"

    return link


async def respond(request: Request, name: str, suffix: str, read: Read, now: datetime,
                  ) -> Response:
    """The listing ``suffix`` of the target ``name``."""
    try:
        fmt = format_of(request)
        limit = _limit(request, fmt)
        opener = opening(request, name, suffix, now)
        if limit is None:  # every row, streamed: opened here, read as the client takes it
            opened = await read(opener)
            return StreamingResponse(listing.render(opened, fmt), media_type=MEDIA[fmt],
                                     headers=download(name, suffix, fmt))
        link = _link(request)

        def page(engine: Any) -> tuple[str, str | None]:
            found = opener(engine)
            try:
                body = "".join(listing.render(found, fmt, limit=limit, link=link))
            finally:
                listing.close(found)
            return body, found.next_cursor

        body, next_cursor = await read(page)
    except listing.BadParameter as exc:
        return error(400, str(exc))
    except listing.NotFound as exc:
        return error(404, str(exc))
    headers = download(name, suffix, fmt)
    if next_cursor is not None:
        headers["link"] = f'<{link(next_cursor)}>; rel="next"'
    return Response(body, media_type=MEDIA[fmt], headers=headers)


def download(name: str, suffix: str, fmt: str) -> dict[str, str]:
    """The headers that make a CSV export a file named after the target and listing."""
    if fmt != "csv":
        return {}
    filename = _UNSAFE_FILENAME.sub("_", f"{name}-{suffix}")[:100]
    return {"content-disposition": f'attachment; filename="{filename}.csv"'}


def error(status: int, message: str) -> JSONResponse:
    """The API's JSON error: ``{"error": {"status", "message"}}``."""
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)
