"""The web pages of the daemon's port (SPEC 14): server-rendered HTML for the people who get
the alerts, over the same reads as the JSON API.

``/`` lists the targets (state, URL count with a sparkline of the last snapshots as inline
SVG, last change, current issues, URL health); ``/targets/{name}`` is one target (snapshots,
changes by kind, URL health by state, issues by rule, a diff between two snapshots); and
``/targets/{name}/{changes,urls,issues,diff}`` are the listings of SPEC 5, a page of rows at a
time with the cursor that goes on, their filters as a plain form, and the CSV and NDJSON
export links of the API. Jinja2 templates and a stylesheet in the package: no JavaScript, no
asset from elsewhere. Every page reads a bounded number of rows, whatever a target's size.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from monitor import api_listings, listing, robotsdiff
from monitor.model import BROKEN_STATES, CHANGE_RULES, REMOVAL_REASONS, RULES, URL_STATES
from monitor.store import daemon as store
from monitor.store import health as health_store

__all__ = ["PAGE_ROWS", "routes"]

PAGE_ROWS = 100  # rows of a listing page
INDEX_TARGETS = 200  # targets on a page of the index
SPARK_POINTS = 30
_TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))


def _when(iso: str | None) -> str:
    """``2026-11-25T18:57:06.885484Z`` as ``2026-11-25 18:57:06 UTC``."""
    if not iso:
        return ""
    return iso[:19].replace("T", " ") + " UTC"


_TEMPLATES.env.filters["when"] = _when


def _robots_diff(change: dict[str, Any]) -> str:
    """A ``robots`` change row's unified diff (rows from the listings carry it already)."""
    found = change.get("diff")
    if isinstance(found, dict):
        return str(found.get("text") or "")
    return robotsdiff.of_change(change.get("before"), change.get("after"),
                                str(change.get("loc") or "robots.txt")).text


# ``{{ row | robots_diff }}`` on any page that shows a robots.txt change
_TEMPLATES.env.filters["robots_diff"] = _robots_diff
_BROKEN = list(BROKEN_STATES)  # error states only: redirects and canonicals are warnings
_TITLES = {"changes": "Changes", "urls": "URLs", "issues": "Issues", "diff": "Diff",
           "snapshots": "Snapshots"}
TARGET_SNAPSHOTS = 20  # snapshots on a target's page (the snapshots page has PAGE_ROWS)


def sparkline(values: Sequence[int], width: int = 120, height: int = 24) -> str:
    """An inline SVG polyline of the values (the URL counts of the last snapshots)."""
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1
    step = width / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v - low) / span * (height - 4):.1f}"
                      for i, v in enumerate(values))
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" '
            f'aria-label="URLs over the last {len(values)} snapshots: {values[0]} to '
            f'{values[-1]}"><polyline fill="none" stroke="currentColor" stroke-width="1.5" '
            f'points="{points}"/></svg>')


def _target_path(name: str) -> str:
    return f"/targets/{quote(name, safe='')}"


def _with_previous(rows: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The first ``limit`` of a target's snapshots read newest first (``limit`` + 1 of them),
    each with ``previous``, the id of the target's snapshot before it (ids are shared by all
    targets: ``id - 1`` is another target's), and whether there are more."""
    for row, older in pairwise(rows):
        row["previous"] = older["id"]
    return rows[:limit], len(rows) > limit


def routes(read: api_listings.Read, configured: Callable[[], Collection[str]],
           clock: Callable[[], datetime]) -> list[Route]:
    """The pages, reading through ``read`` (the API's own database threads)."""

    def render(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("target_path", _target_path)
        return _TEMPLATES.TemplateResponse(request, template, context, status_code=status)

    def not_found(request: Request, message: str) -> Response:
        return render(request, "error.html", 404, title="Not found", message=message)

    async def index(request: Request) -> Response:
        after = request.query_params.get("after", "")
        if "\x00" in after:
            after = ""
        # one more than shown: whether a next page exists
        shown, total = await read(store.page_targets, after, INDEX_TARGETS + 1)
        more = len(shown) > INDEX_TARGETS
        shown = shown[:INDEX_TARGETS]
        names = [t["name"] for t in shown]
        series = await read(store.url_series, names, SPARK_POINTS)
        health = await read(health_store.states_by_target, names)
        wanted = set(configured())
        for target in shown:
            target["spark"] = sparkline(series.get(target["name"], []))
            target["health"] = health.get(target["name"], {})
            target["broken"] = sum(target["health"].get(s, 0) for s in _BROKEN)
            target["configured"] = target["name"] in wanted
            last = target["last_snapshot"] or {}
            target["open_issues"] = sum(last.get("issues", {}).values())
        return render(request, "index.html", title="Targets", targets=shown,
                      next_after=shown[-1]["name"] if more and shown else None, total=total)

    async def target_routes(request: Request) -> Response:
        path: str = request.path_params["rest"]
        if "\x00" in path:
            return not_found(request, "no such target")
        whole, name, suffix = await api_listings.split_path(read, path, _TITLES)
        if not suffix:
            if whole is None:
                return not_found(request, f"no target named {path!r}")
            return await target_page(request, whole)
        if suffix == "snapshots":
            return await snapshots_page(request, name)
        return await listing_page(request, name, suffix)

    async def target_page(request: Request, target: dict[str, Any]) -> Response:
        name = target["name"]
        snapshots, more = _with_previous(
            await read(store.list_snapshots, name, limit=TARGET_SNAPSHOTS + 1) or [],
            TARGET_SNAPSHOTS)
        series = (await read(store.url_series, [name], 90)).get(name, [])
        health = (await read(health_store.states_by_target, [name])).get(name, {})
        last = target["last_snapshot"] or {}
        issues = sorted(last.get("issues", {}).items(), key=lambda kv: (-kv[1], kv[0]))
        return render(request, "target.html", title=name, target=target,
                      snapshots=snapshots, more_snapshots=more,
                      spark=sparkline(series, 360, 48), health=health,
                      states=list(URL_STATES), broken=_BROKEN, issues=issues,
                      severity=RULES, kinds=listing.KINDS)

    async def snapshots_page(request: Request, name: str) -> Response:
        raw = request.query_params.get("before", "")
        before = int(raw) if raw.isdigit() and 0 < int(raw) <= listing.MAX_ID else None
        if raw and before is None:
            return render(request, "error.html", 400, title="Bad parameter",
                          message=f"before: not a snapshot id: {raw[:40]!r}")
        found = await read(store.list_snapshots, name, limit=PAGE_ROWS + 1, before=before)
        if found is None:
            return not_found(request, f"no target named {name!r}")
        rows, more = _with_previous(found, PAGE_ROWS)
        here = f"{_target_path(name)}/snapshots"
        api = f"/api/v1/targets/{quote(name, safe='')}/snapshots"
        query = {} if before is None else {"before": before}
        exports = {fmt: f"{api}?{urlencode({**query, 'format': fmt})}" for fmt in ("csv", "ndjson")}
        return render(request, "snapshots.html", title=f"Snapshots of {name}", name=name,
                      snapshots=rows, exports=exports,
                      api=api if before is None else f"{api}?before={before}",
                      page_rows=PAGE_ROWS, newest=here if before is not None else None,
                      older=f"{here}?before={rows[-1]['id']}" if more else None)

    async def listing_page(request: Request, name: str, suffix: str) -> Response:
        params = {k: v for k, v in request.query_params.multi_items() if v != ""}
        try:
            opening = api_listings.opening(request, name, suffix, clock())
        except listing.BadParameter as exc:
            return render(request, "error.html", 400, title="Bad parameter", message=str(exc))

        def page(engine: Any) -> tuple[listing.Listing, list[dict[str, Any]]]:
            found = opening(engine)
            try:
                return found, listing.take(found, PAGE_ROWS)
            finally:
                listing.close(found)

        try:
            found, rows = await read(page)
        except listing.NotFound as exc:
            return not_found(request, str(exc))
        except listing.BadParameter as exc:
            return render(request, "error.html", 400, title="Bad parameter", message=str(exc))
        columns = list(found.table or found.columns)
        if suffix == "changes":
            columns = ["at", "kind", "rule", "loc", "reason", "detail"]
            for row in rows:
                row["detail"] = _change_detail(row)
        here = f"{_target_path(name)}/{suffix}"
        query = {k: v for k, v in params.items() if k not in ("cursor", "format", "limit")}
        api = f"/api/v1/targets/{quote(name, safe='')}/{suffix}"
        exports = {fmt: f"{api}?{urlencode({**query, 'format': fmt})}"
                   for fmt in ("csv", "ndjson")}
        next_page = (None if found.next_cursor is None
                     else f"{here}?{urlencode({**query, 'cursor': found.next_cursor})}")
        return render(request, "listing.html", title=f"{_TITLES[suffix]} of {name}", name=name,
                      suffix=suffix, rows=rows, columns=columns, head=found.head,
                      params=query, exports=exports, next_page=next_page,
                      first_page=f"{here}?{urlencode(query)}" if "cursor" in params else None,
                      kinds=listing.KINDS, diff_kinds=listing.DIFF_KINDS,
                      statuses=listing.STATUSES, reasons=REMOVAL_REASONS,
                      change_rules=CHANGE_RULES)

    return [Route("/", index), Route("/targets/{rest:path}", target_routes)]


def _lines(text: str | None) -> str:
    return "none" if text is None else f"{len(text.splitlines())} lines"


def _change_detail(row: dict[str, Any]) -> str:
    """One line for a change: what moved (a lastmod, a health state)."""
    before, after = row.get("before") or {}, row.get("after") or {}
    if row.get("kind") == "robots":
        diff = row.get("diff") or {}
        return (f"robots.txt: {_lines(before.get('text'))} -> {_lines(after.get('text'))}, "
                f"{diff.get('added', 0)} added, {diff.get('removed', 0)} removed")
    if row.get("kind") == "health":
        return f"{before.get('state')} -> {after.get('state')}" + (
            f" ({after.get('http_status')})" if after.get("http_status") else "")
    moved = [f"{key}: {before.get(key)} -> {after.get(key)}"
             for key in sorted(set(before) | set(after))
             if before.get(key) != after.get(key) and key not in ("document",)]
    return "; ".join(moved)[:200] if before and after else ""
