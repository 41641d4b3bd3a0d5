"""The web pages of the daemon's port: server-rendered HTML for the people who get
the alerts, over the same reads as the JSON API.

``/`` lists the targets (state, URL count with a zero-based sparkline of the last snapshots
as inline SVG, last change, current issues, URL health); ``/targets/{name}`` is one target
(charts of its URLs, changes and URL health per snapshot, snapshots, changes by kind, URL
health by state, issues by rule, a diff between two snapshots);
``/targets/{name}/{changes,urls,issues,diff}`` are the listings of the CLI, a page of rows at a
time with the cursor that goes on, their filters and a search of the locs as a plain form,
sortable by their column heads, and the CSV and NDJSON export links of the API; and
``/targets/{name}/url?loc=`` is one URL's whole story. Jinja2 templates and a stylesheet in
the package: no JavaScript, no asset from elsewhere. Every page reads a bounded number of
rows, whatever a target's size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import pass_context
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from monitor.core import times
from monitor.core.model import (
    BROKEN_STATES,
    CHANGE_RULES,
    REMOVAL_REASONS,
    RULES,
    URL_NOTES,
    URL_STATES,
)
from monitor.listing import params as listing
from monitor.listing import sorting, story
from monitor.robots import tester, versiondiff
from monitor.robots.matcher import GOOGLEBOT, RobotsRules
from monitor.serve import charts
from monitor.serve import listingapi as api_listings
from monitor.serve.links import external_link
from monitor.store import indexnowrows, targetrows, trends, urlstates
from monitor.store import robotsversions as robots_versions

__all__ = ["PAGE_ROWS", "STYLESHEET", "routes", "sort_values"]

PAGE_ROWS = 100  # rows of a listing page
INDEX_TARGETS = 200  # targets on a page of the index
SPARK_POINTS = 30
TARGET_SUBMISSIONS = 10  # the last IndexNow submissions on a target's page
_TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))




@pass_context
def _when(context: Any, value: str | None) -> str:
    """A stored time as every page shows it: ``2026-11-28 00:44:40 UTC (3 min ago)``."""
    return times.when(value, context.get("now"))


_TEMPLATES.env.filters["when"] = _when
# Every loc or URL a page shows goes through this filter: a link only for http(s).
_TEMPLATES.env.filters["external_link"] = external_link
# The stylesheet is a file of its own, not inline: the pages' policy allows no inline style.
_STYLE = Path(__file__).with_name("templates").joinpath("style.css").read_bytes()
STYLESHEET = f"/static/style.css?v={hashlib.sha256(_STYLE).hexdigest()[:12]}"
_TEMPLATES.env.globals["stylesheet"] = STYLESHEET
_TEMPLATES.env.globals["max_search"] = listing.MAX_SEARCH  # the search boxes' maxlength


def _robots_diff(change: dict[str, Any]) -> str:
    """A ``robots`` change row's unified diff (rows from the listings carry it already)."""
    found = change.get("diff")
    if isinstance(found, dict):
        return str(found.get("text") or "")
    return versiondiff.of_change(change.get("before"), change.get("after"),
                                str(change.get("loc") or "robots.txt")).text


# ``{{ row | robots_diff }}`` on any page that shows a robots.txt change
_TEMPLATES.env.filters["robots_diff"] = _robots_diff
_BROKEN = list(BROKEN_STATES)  # error states only: redirects and canonicals are warnings
# The URL-health states of error severity: listed beside the current issues, as they are.
_ERRORS = [state for state, rule in URL_STATES.items() if rule is not None and rule[1] == "error"]
_TITLES = {"changes": "Changes", "urls": "URLs", "issues": "Issues", "diff": "Diff",
           "snapshots": "Snapshots", "url": "URL", "robots": "robots.txt"}
TESTED_URLS = 100  # URLs the robots.txt tester answers at once
TARGET_SNAPSHOTS = 20  # snapshots on a target's page (the snapshots page has PAGE_ROWS)


def sparkline(values: Sequence[int], width: int = 120, height: int = 28) -> str:
    """An inline SVG line of the URL counts of the last snapshots, from zero up."""
    return charts.sparkline(values, width, height)


def sort_values(target: dict[str, Any]) -> dict[str, Any]:
    """What the index sorts a target by: its name, its last check's outcome, URLs, time and
    current issues, and its changes."""
    last = target.get("last_snapshot") or {}
    return {"name": target["name"], "state": last.get("outcome"), "urls": last.get("urls"),
            "last_check": last.get("finished_at"), "changes": target.get("changes"),
            "issues": sum(last.get("issues", {}).values()) if last else None}


def _shown(sort: sorting.Sort | None) -> tuple[str, bool] | None:
    """The sort as the templates compare it: (column, descending)."""
    return None if sort is None else (sort.column, sort.descending)


def _charts(found: dict[str, Any] | None) -> dict[str, str]:
    """The target page's charts: URLs, changes by kind and URL health, per snapshot."""
    points = (found or {}).get("points") or []
    if not points:
        return {}
    labels = [f"#{p['id']} {times.when(p['at'], relative=False)[5:16]}" for p in points]
    drawn = {
        "urls": charts.lines({"valid": [p["urls"] for p in points],
                              "invalid": [p["invalid"] for p in points]}, labels,
                             label="URLs per snapshot", axis="URLs",
                             title=f"the last {len(points)} snapshots (UTC)"),
        "changes": charts.bars([p["changes"] for p in points], labels, listing.KINDS,
                               label="Changes per check, by kind", axis="changes",
                               title=f"the last {len(points)} checks (UTC)"),
    }
    if found and found.get("health"):
        states = [s for s in URL_STATES if any(p.get("health", {}).get(s) for p in points)]
        drawn["health"] = charts.lines(
            {s: [p.get("health", {}).get(s, 0) for p in points] for s in states}, labels,
            label="Listed URLs by health state", axis="URLs",
            title="after each snapshot (of the URLs listed now)")
    return drawn

# A URL's health as the exports have it: since when it is in its state, when last checked.
_HEALTH_COLUMNS = ["status", "http_status", "loc", "detail", "since", "checked_at"]
_LASTMOD = ("lastmod before", "lastmod after")
# Columns of short values read whole, never broken at a hyphen (a date, a state, a kind).
_NOWRAP = frozenset({"kind", "status", "http_status", "lastmod", *_LASTMOD})


def _page_columns(suffix: str, found: listing.Listing, rows: list[dict[str, Any]],
                  status: str | None) -> list[str]:
    """The columns a listing page shows, as many as its export's (nested values made into
    columns of their own: a diff's lastmod before and after); each row gets what they need."""
    if suffix == "changes":
        for row in rows:
            row["detail"] = listing.change_detail(row)
        return ["at", "kind", "rule", "loc", "reason", "detail"]
    if suffix == "diff":
        for row in rows:
            before, after = row.get("before") or {}, row.get("after") or {}
            row[_LASTMOD[0]], row[_LASTMOD[1]] = before.get("lastmod"), after.get("lastmod")
            # what else moved; the lastmods have their columns
            row["detail"] = listing.change_detail({
                "kind": row.get("kind"),
                "before": {k: v for k, v in before.items() if k != "lastmod"},
                "after": {k: v for k, v in after.items() if k != "lastmod"}})
        return ["kind", "loc", *_LASTMOD, "detail"]
    if api_listings.sorts_of(suffix, status) == "health":
        redirects = any(row.get("final_url") for row in rows)
        return [*_HEALTH_COLUMNS[:3], *(["final_url"] if redirects else []),
                *_HEALTH_COLUMNS[3:]]
    return list(found.table or found.columns)


def _target_path(name: str) -> str:
    return f"/targets/{quote(name, safe='')}"


def estimate_lines(found: dict[str, Any] | None) -> list[str]:
    """A target not checked through yet: each state's estimated share of its listing, one line
    a state ("about 2.1% not-found, +/- 0.4%, from 3,412 checked of 2,500,000"); none once
    every URL was checked (the counts say it all)."""
    if not found or found["complete"] or not found["checked"]:
        return []
    tail = f"from {found['checked']:,} checked of {found['listed']:,}"
    return [f"about {e['share']:.1%} {state}, +/- {e['margin']:.1%}, {tail}"
            for state, e in found["estimate"].items() if e["share"] > 0]


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

    def render(request: Request, template: str, status: Any = 200, **context: Any) -> Response:
        context.setdefault("target_path", _target_path)
        context.setdefault("now", clock())
        return _TEMPLATES.TemplateResponse(request, template, context, status_code=status)

    def bad(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 400, title="Bad parameter", message=str(exc))

    def not_found(request: Request, message: str) -> Response:
        return render(request, "error.html", 404, title="Not found", message=message)

    async def index(request: Request) -> Response:
        after = request.query_params.get("after", "")
        if "\x00" in after:
            after = ""
        try:
            sort = sorting.parse(request.query_params.get("sort"), "targets")
            if sort == sorting.Sort("name"):
                sort = None  # the order they are paged in anyway
            shown, total, next_after = await _index_page(sort, after)
        except listing.BadParameter as exc:
            return bad(request, exc)
        names = [t["name"] for t in shown]
        series = await read(targetrows.url_series, names, SPARK_POINTS)
        health = await read(urlstates.states_by_target, names)
        wanted = set(configured())
        for target in shown:
            target["spark"] = sparkline(series.get(target["name"], []))
            target["health"] = health.get(target["name"], {})
            target["broken"] = sum(target["health"].get(s, 0) for s in _BROKEN)
            target["configured"] = target["name"] in wanted
            last = target["last_snapshot"] or {}
            target["open_issues"] = sum(last.get("issues", {}).values())
        return render(request, "index.html", title="Targets", targets=shown,
                      next_after=next_after, total=total,
                      sort=request.query_params.get("sort", ""))

    async def _index_page(sort: sorting.Sort | None, after: str,
                          ) -> tuple[list[dict[str, Any]], int, str | None]:
        """A page of the index: by name, the targets after ``after``; sorted otherwise, every
        target read and ordered here, the page after the cursor ``after`` (the targets of a
        configuration: thousands at most)."""
        if sort is None:  # one more than shown: whether a next page exists
            shown, total = await read(targetrows.page_targets, after, INDEX_TARGETS + 1)
            more = len(shown) > INDEX_TARGETS
            shown = shown[:INDEX_TARGETS]
            return shown, total, shown[-1]["name"] if more and shown else None
        every = await read(targetrows.list_targets)
        by_name = {target["name"]: target for target in every}
        ordered = sorting.ordered(map(sort_values, every), sort, "name")
        if after:  # the value as JSON: a number stays a number
            empty, value, tie = listing.read_cursor(after, "targets", [sort.text],
                                                    (int, str, str))
            try:
                last = (empty, json.loads(value), tie)
            except ValueError:
                raise listing.BadParameter("cursor: not a cursor of this listing") from None
            ordered = [row for row in ordered
                       if sorting.follows(row["_key"], last, sort.descending)]
        page = ordered[:INDEX_TARGETS]
        next_after = None
        if len(ordered) > INDEX_TARGETS:
            empty, value, tie = page[-1]["_key"]
            next_after = listing.cursor("targets", [sort.text], (empty, json.dumps(value), tie))
        return [by_name[row["name"]] for row in page], len(every), next_after

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
        if suffix == "url":
            return await story_page(request, name)
        if suffix == "robots":
            return await robots_page(request, name)
        return await listing_page(request, name, suffix)

    async def story_page(request: Request, name: str) -> Response:
        loc = request.query_params.get("loc", "").strip()
        if not loc:  # the search form, empty
            return render(request, "story.html", title=f"One URL of {name}", name=name,
                          story=None, loc="")
        try:
            found = await api_listings.story(request, name, read)
        except listing.BadParameter as exc:
            return bad(request, exc)
        except listing.NotFound as exc:
            return not_found(request, str(exc))
        for event in found["changes"]:
            event["detail"] = listing.change_detail(event)
        found["told"] = story.told(found, datetime.now(UTC))  # in the CLI's words
        return render(request, "story.html", title=loc, name=name, story=found, loc=loc,
                      errors=_ERRORS, notes=URL_NOTES,
                      api=f"/api/v1/targets/{quote(name, safe='')}/url?{urlencode({'loc': loc})}")

    async def robots_page(request: Request, name: str) -> Response:
        hosts = await read(robots_versions.history, name)
        if hosts is None:
            return not_found(request, f"no target named {name!r}")
        for host in hosts:
            for version in host["versions"]:
                version["diff"] = versiondiff.unified(version["before"], version["text"],
                                                     host["url"]).text
        params = request.query_params
        chosen = params.get("robots") or (hosts[0]["url"] if hosts else "")
        agent = params.get("agent", GOOGLEBOT)
        urls = [line.strip() for line in params.get("urls", "").splitlines() if line.strip()]
        tested = None
        if "urls" in params and hosts:
            held = next((host for host in hosts if host["url"] == chosen), None)
            if held is None:
                return bad(request, ValueError(
                    f"robots: {chosen[:200]!r} is not a robots.txt this target watches"))
            if len(urls) > TESTED_URLS:
                return bad(request, ValueError(
                    f"urls: {len(urls)} given; at most {TESTED_URLS} at once"))
            rules = RobotsRules(held["text"])
            tested = []
            for url in urls:
                decision = rules.decide(url, agent)
                tested.append({**tester.answer(url, agent, decision),
                               "why": tester.describe(decision)})
        return render(request, "robots.html", title=f"robots.txt of {name}", name=name,
                      hosts=hosts, chosen=chosen, agent=agent, urls=urls, tested=tested)

    async def target_page(request: Request, target: dict[str, Any]) -> Response:
        name = target["name"]
        snapshots, more = _with_previous(
            await read(targetrows.list_snapshots, name, limit=TARGET_SNAPSHOTS + 1) or [],
            TARGET_SNAPSHOTS)
        drawn = _charts(await read(trends.trend, name))
        found = await read(urlstates.health, name)
        health = found["url_health"] if found else {}
        estimate = estimate_lines(found) if health else []
        last = target["last_snapshot"] or {}
        issues = sorted(last.get("issues", {}).items(), key=lambda kv: (-kv[1], kv[0]))
        submitted = await read(indexnowrows.recent, name, TARGET_SUBMISSIONS)
        return render(request, "target.html", title=name, target=target, submitted=submitted,
                      snapshots=snapshots, more_snapshots=more, charts=drawn, health=health,
                      estimate=estimate,
                      states=list(URL_STATES), broken=_BROKEN, issues=issues,
                      broken_count=sum(health.get(s, 0) for s in _BROKEN),
                      health_errors=[(s, URL_STATES[s], health[s]) for s in _ERRORS
                                     if health.get(s)],
                      severity=RULES, kinds=listing.KINDS)

    async def snapshots_page(request: Request, name: str) -> Response:
        raw = request.query_params.get("before", "")
        before = int(raw) if raw.isdigit() and 0 < int(raw) <= listing.MAX_ID else None
        if raw and before is None:
            return render(request, "error.html", 400, title="Bad parameter",
                          message=f"before: not a snapshot id: {raw[:40]!r}")
        cursor = request.query_params.get("cursor") or None
        try:
            sort = sorting.parse(request.query_params.get("sort"), "snapshots")
            sort = None if sort == targetrows.NEWEST else sort
            found = await read(targetrows.list_snapshots, name, limit=PAGE_ROWS + 1,
                               before=before, sort=sort, cursor=cursor)
        except listing.BadParameter as exc:
            return bad(request, exc)
        if found is None:
            return not_found(request, f"no target named {name!r}")
        rows, more = _with_previous(found, PAGE_ROWS)
        if sort is not None:  # the snapshot before each is not the row below it
            for row in rows:
                row.pop("previous", None)
        here = f"{_target_path(name)}/snapshots"
        api = f"/api/v1/targets/{quote(name, safe='')}/snapshots"
        query: dict[str, Any] = {} if before is None else {"before": before}
        if sort is not None:
            query = {"sort": sort.text}
        exports = {fmt: f"{api}?{urlencode({**query, 'format': fmt})}" for fmt in ("csv", "ndjson")}
        older = None
        if more and sort is None:
            older = f"{here}?before={rows[-1]['id']}"
        elif more and sort is not None:
            going_on = targetrows.snapshot_cursor(sort, rows[-1])
            older = f"{here}?{urlencode({**query, 'cursor': going_on})}"
        paged = before is not None or cursor is not None
        return render(request, "snapshots.html", title=f"Snapshots of {name}", name=name,
                      snapshots=rows, exports=exports, here=here, sort=_shown(sort),
                      sorting={}, sortable=sorting.SORTS["snapshots"],
                      api=f"{api}?{urlencode(query)}" if query else api,
                      page_rows=PAGE_ROWS,
                      newest=f"{here}?{urlencode(query)}" if paged else None, older=older)

    async def listing_page(request: Request, name: str, suffix: str) -> Response:
        params = {k: v for k, v in request.query_params.multi_items() if v != ""}
        here = f"{_target_path(name)}/{suffix}"
        choices: dict[str, Any] = {"kinds": listing.KINDS, "diff_kinds": listing.DIFF_KINDS,
                   "statuses": listing.STATUSES, "reasons": REMOVAL_REASONS,
                   "change_rules": CHANGE_RULES, "broken": _BROKEN}
        if suffix == "diff" and "from" not in params:  # the form to fill in, not an error
            exists = await read(targetrows.get_target, name)
            if exists is None:
                return not_found(request, f"no target named {name!r}")
            return render(request, "listing.html", title=f"Diff of {name}", name=name,
                          suffix=suffix, rows=[], columns=[], head={}, params=params,
                          exports=None, next_page=None, first_page=None, empty_form=True,
                          sort=None, here=here, **choices)
        try:
            sort = sorting.parse(params.get("sort"), api_listings.sorts_of(suffix,
                                                                       params.get("status")))
            opening = api_listings.opening(request, name, suffix, clock())
        except listing.BadParameter as exc:
            return bad(request, exc)

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
            return bad(request, exc)
        columns = _page_columns(suffix, found, rows, params.get("status"))
        query = {k: v for k, v in params.items() if k not in ("cursor", "format", "limit")}
        api = f"/api/v1/targets/{quote(name, safe='')}/{suffix}"
        exports = {fmt: f"{api}?{urlencode({**query, 'format': fmt})}"
                   for fmt in ("csv", "ndjson")}
        next_page = (None if found.next_cursor is None
                     else f"{here}?{urlencode({**query, 'cursor': found.next_cursor})}")
        # A column head sorts the whole listing from its first page.
        unsorted = {k: v for k, v in query.items() if k != "sort"}
        return render(request, "listing.html", title=f"{_TITLES[suffix]} of {name}", name=name,
                      suffix=suffix, rows=rows, columns=columns, head=found.head,
                      params=query, exports=exports, next_page=next_page,
                      first_page=f"{here}?{urlencode(query)}" if "cursor" in params else None,
                      empty_form=False, here=here, sort=_shown(sort), sorting=unsorted,
                      sortable=sorting.SORTS[api_listings.sorts_of(suffix, params.get("status"))],
                      time_columns=listing.TIME_COLUMNS, nowrap=_NOWRAP, **choices)

    async def stylesheet(_request: Request) -> Response:
        # Its address changes with its content, so a browser may keep it for a day.
        return Response(_STYLE, media_type="text/css",
                        headers={"cache-control": "max-age=86400"})

    return [Route("/", index), Route("/targets/{rest:path}", target_routes),
            Route("/static/style.css", stylesheet)]

