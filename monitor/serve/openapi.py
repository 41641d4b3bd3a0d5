"""The OpenAPI 3.1 document of the daemon's HTTP port, served at /api/v1/openapi.json.

Written out here rather than derived from the routes: the routes are a handful of Starlette
functions, and what a client needs (each parameter's form, each answer's shape, that every bad
parameter is a 400 naming it) is the contract, not an accident of the code. The values that the
code also checks (rule ids, change kinds, limits) come from the code, so the two cannot drift;
tests/daemon/test_openapi.py validates the daemon's real answers against this document and
fuzzes it with schemathesis.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from monitor import __version__
from monitor.core.model import CHANGE_RULES, REMOVAL_REASONS, RULES, URL_STATES
from monitor.listing import params as listing
from monitor.listing import sorting
from monitor.serve import listingapi as api_listings

__all__ = ["body", "document"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str | list[str]) -> dict[str, Any]:
    kinds = [kind] if isinstance(kind, str) else kind
    return {"type": [*kinds, "null"]}


_TIME = {"type": "string", "format": "date-time"}
_TIME_OR_NULL = {"type": ["string", "null"], "format": "date-time"}
_ANY: dict[str, Any] = {}  # a field's value as the sitemap wrote it, or as a change recorded it

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {
            "type": "object",
            "required": ["status", "message"],
            "properties": {"status": {"type": "integer"},
                           "message": {"type": "string",
                                       "description": "One line; a 400 starts with the "
                                                      "parameter's name."}},
        }},
    },
    "Status": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string", "enum": ["ok", "stopping", "unavailable"]},
                       "error": {"type": "string"}},
    },
    "Snapshot": {
        "type": "object",
        "required": ["id", "started_at", "finished_at", "outcome", "urls", "invalid", "added",
                     "removed", "changed", "issues", "error"],
        "properties": {
            "id": {"type": "integer"},
            "started_at": _TIME,
            "finished_at": _TIME_OR_NULL,
            "outcome": {"type": "string", "enum": ["ok", "unchanged", "partial", "failed"],
                        "description": "partial: some documents failed while others were "
                                       "read (failed_documents names them)."},
            "failed_documents": {
                "type": "array", "description": "The documents the check could not read.",
                "items": {"type": "object", "required": ["url"], "properties": {
                    "url": {"type": "string"}, "http_status": _nullable("integer"),
                    "error": _nullable("string")}}},
            **{key: _nullable("integer") for key in (
                "urls", "invalid", "duplicates", "added", "removed", "changed", "invalid_new",
                "documents_ok", "documents_failed", "fetched_bytes")},
            "duration_seconds": _nullable("number"),
            "issues": {"type": "object", "additionalProperties": {"type": "integer"},
                       "description": "Issues counted per rule id."},
            "error": {"oneOf": [{"type": "null"}, {
                "type": "object", "required": ["kind", "message"],
                "properties": {"kind": {"type": "string"},
                               "message": _nullable("string")}}]},
        },
    },
    "Target": {
        "type": "object",
        "required": ["name", "url", "snapshots", "changes", "last_snapshot", "configured"],
        "properties": {
            "name": {"type": "string"},
            "url": {"type": "string"},
            "next_due_at": _TIME_OR_NULL,
            "leased_by": _nullable("string"),
            "snapshots": {"type": "integer"},
            "changes": {"type": "integer"},
            "last_snapshot": {"oneOf": [{"type": "null"}, _ref("Snapshot")]},
            "configured": {"type": "boolean",
                           "description": "In the daemon's configuration now (a target "
                                          "removed from it keeps its history)."},
        },
    },
    "Url": {
        "type": "object",
        "description": "A listed URL: its entry (status valid or invalid), or, when the "
                       "status asked is a health state, its health now.",
        "required": ["loc", "status"],
        "properties": {
            "loc": {"type": "string"},
            "document": {"type": "string"},
            "status": {"type": "string", "enum": [*listing.VALIDITY, *listing.HEALTH]},
            "lastmod": _ANY, "changefreq": _ANY, "priority": _ANY, "extensions": _ANY,
            "rule": _nullable("string"), "http_status": _nullable("integer"),
            "final_url": _nullable("string"), "hops": {"type": "integer"},
            "detail": _nullable("string"), "since": _ANY, "checked_at": _ANY,
        },
    },
    "Issue": {
        "type": "object",
        "required": ["rule", "severity", "loc", "document", "message"],
        "properties": {
            "rule": {"type": "string"},
            "severity": {"type": "string", "enum": sorted(set(RULES.values()))},
            "loc": _nullable("string"),
            "document": _nullable("string"),
            "message": {"type": "string"},
        },
    },
    "DiffRow": {
        "type": "object",
        "required": ["kind", "loc", "before", "after"],
        "properties": {"kind": {"type": "string", "enum": list(listing.DIFF_KINDS)},
                       "loc": {"type": "string"}, "before": _ANY, "after": _ANY},
    },
    "Change": {
        "type": "object",
        "required": ["id", "snapshot_id", "at", "kind", "loc", "before", "after"],
        "properties": {"id": {"type": "integer",
                              "description": "The stored row: the changed entries a check "
                                             "packs together share one (the cursor tells "
                                             "them apart)."},
                       "snapshot_id": {"type": "integer"},
                       "at": _TIME, "kind": {"type": "string", "enum": list(listing.KINDS)},
                       "loc": {"type": "string"}, "before": _ANY, "after": _ANY,
                       "reason": {"oneOf": [
                           {"type": "null"},
                           {"type": "string", "enum": list(REMOVAL_REASONS)}],
                           "description": "A removed URL's fate once checked."},
                       "answer": {"type": "object",
                                  "description": "A removal the URL checks looked at: what "
                                                 "its URL answered (state, http_status, "
                                                 "final_url, hops, detail, checked_at)."},
                       "rule": {"oneOf": [
                           {"type": "null"},
                           {"type": "string", "enum": list(CHANGE_RULES)}],
                           "description": "The rule id the change is about: an entry that "
                                          "became invalid, a URL whose health broke."}},
    },
    "UrlHealth": {
        "type": "object",
        "description": "A target's URL health. Until every listed URL was checked, the URLs "
                       "checked so far are a random sample of the listing (URLs listed since "
                       "are checked ahead of it and counted as they are), and each state's "
                       "share of the listing is estimated with a 95% interval (Wilson's); "
                       "once every URL was checked, the share is the count's and the margin 0.",
        "required": ["target", "listed", "checked", "unchecked", "complete", "url_health",
                     "estimate"],
        "properties": {
            "target": {"type": "string"},
            "listed": {"type": "integer", "description": "URLs the target lists now."},
            "checked": {"type": "integer", "description": "Listed URLs checked at least once."},
            "unchecked": {"type": "integer", "description": "Listed URLs never checked."},
            "complete": {"type": "boolean", "description": "Every listed URL was checked."},
            "url_health": {"type": "object", "additionalProperties": {"type": "integer"},
                           "description": "Listed URLs per state now (never checked: "
                                          "unknown)."},
            "estimate": {"type": "object", "propertyNames": {"enum": list(URL_STATES)},
                         "additionalProperties": {
                "type": "object", "required": ["share", "margin", "low", "high", "exact"],
                "properties": {
                    "share": {"type": "number", "description": "Estimated share of the listed "
                                                               "URLs in the state (0..1)."},
                    "margin": {"type": "number", "description": "The 95% interval lies within "
                                                                "share +/- margin."},
                    "low": {"type": "number", "description": "Lower end of the 95% interval."},
                    "high": {"type": "number", "description": "Upper end of the 95% interval."},
                    "exact": {"type": "boolean", "description": "Every listed URL was checked: "
                                                                "the share is a count's."}}}},
        },
    },
    "Story": {
        "type": "object",
        "description": "One URL's whole story: listed now or not, where, its fields, its "
                       "health and every change recorded about it, newest first.",
        "required": ["target", "loc", "snapshot_id", "listed", "documents", "entry", "issues",
                     "health", "changes", "changes_left"],
        "properties": {
            "target": {"type": "string"},
            "loc": {"type": "string"},
            "snapshot_id": _nullable("integer"),
            "listed": {"type": "boolean", "description": "In the latest snapshot's URL set."},
            "documents": {"type": "array", "items": {"type": "string"},
                          "description": "The documents that list it now."},
            "entry": {"oneOf": [{"type": "null"}, {
                "type": "object",
                "properties": {"document": {"type": "string"},
                               "status": {"type": "string", "enum": list(listing.VALIDITY)},
                               "lastmod": _ANY, "changefreq": _ANY, "priority": _ANY,
                               "extensions": _ANY}}]},
            "issues": {"type": "array", "items": _ref("Issue")},
            "health": {"oneOf": [{"type": "null"}, {
                "type": "object",
                "properties": {"state": {"type": "string"}, "rule": _nullable("string"),
                               "http_status": _nullable("integer"),
                               "final_url": _nullable("string"), "hops": {"type": "integer"},
                               "detail": _nullable("string"), "since": _TIME_OR_NULL,
                               "checked_at": _TIME_OR_NULL, "listed": {"type": "boolean"},
                               "attempts": {"type": "integer"}, "due_at": _TIME_OR_NULL}}],
                       "description": "Its state now; once the sitemap dropped it, the last "
                                      "state its checks found while it was listed (listed "
                                      "false)."},
            "removal": {"oneOf": [{"type": "null"}, {
                "type": "object",
                "description": "Not listed now: the removal, its reason and what the URL "
                               "answered when the URL checks looked (null: not yet).",
                "properties": {"snapshot_id": {"type": "integer"}, "at": _TIME_OR_NULL,
                               "reason": _nullable("string"), "answer": _ANY}}]},
            "first_listed": {"oneOf": [{"type": "null"}, {
                "type": "object",
                "description": "The snapshot that first listed it: its added change, or the "
                               "first check kept (first_check), whose baseline writes none.",
                "properties": {"snapshot_id": {"type": "integer"}, "at": _TIME_OR_NULL,
                               "first_check": {"type": "boolean"}}}]},
            "changes": {"type": "array", "items": _ref("Change")},
            "changes_left": {"type": "integer",
                             "description": "Older changes not in this answer."},
        },
    },
}

# The forms parse_snapshot reads (a real date within them is checked by the daemon).
# The forms parse_snapshot reads (that a date is a real one is checked by the daemon). An empty
# value, here and in every parameter, is the same as none (as an HTML form sends it).
_TIME_PATTERN = (r"[0-9]+(\.[0-9]+)?[smhd]|[0-9]{4}-[0-9]{2}-[0-9]{2}"
                 r"([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?")
_WHEN_SCHEMA = {"type": "string", "examples": ["1", "24h", "2026-05-01T12:00:00Z"],
                "pattern": f"^(|[1-9][0-9]{{0,17}}|{_TIME_PATTERN})$"}
_WHEN = ("a snapshot id, an ISO 8601 time (the last snapshot at or before it) or a duration "
         "back from now such as 90m, 6h, 2d")


def _query(name: str, description: str, schema: dict[str, Any] | None = None, *,
           many: bool = False) -> dict[str, Any]:
    schema = schema or {"type": "string"}
    if many:
        schema = {"type": "array", "items": schema}
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema, **({"style": "form", "explode": True} if many else {})}


def _count(maximum: int) -> dict[str, Any]:
    """An integer parameter from 1 to ``maximum``; empty is the same as none (an HTML form's)."""
    return {"anyOf": [{"type": "integer", "minimum": 1, "maximum": maximum},
                      {"type": "string", "maxLength": 0}]}


_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"},
         "description": "The target's configured name (a '/' in it is sent as %2F)."}
_PAGING = [
    _query("limit", f"Rows in this page (JSON: {api_listings.DEFAULT_LIMIT} unless given; "
           "CSV and NDJSON: every row, streamed, unless given).", _count(api_listings.MAX_LIMIT)),
    _query("cursor", "Where the previous page stopped: its next_cursor, as it was given."),
    _query("format", "The answer's form; also chosen by Accept: text/csv or "
           "application/x-ndjson.", {"type": "string", "enum": ["json", "ndjson", "csv", ""]}),
]
_KIND = _query("kind", "Change kinds to keep (repeated, or comma-separated); all by default.",
               {"type": "string", "enum": [*listing.KINDS, ""]}, many=True)
_DIFF_KIND = _query("kind", "Change kinds to keep (repeated, or comma-separated); all by "
                    "default.", {"type": "string", "enum": [*listing.DIFF_KINDS, ""]}, many=True)


_SEARCH = _query("q", "Only the locs that hold this text (case aside), at most "
                 f"{listing.MAX_SEARCH:,} characters.",
                 {"type": "string", "maxLength": listing.MAX_SEARCH})


def _sort(listing_name: str, also: str = "") -> dict[str, Any]:
    """``sort=COLUMN`` (``-COLUMN`` down) of a listing's sortable columns."""
    columns = sorting.SORTS[listing_name] + tuple(
        c for c in sorting.SORTS.get(also, ()) if c not in sorting.SORTS[listing_name])
    return _query("sort", "Sort the whole listing by a column, page after page (-COLUMN: "
                  f"down; empty values last either way): {', '.join(columns)}.",
                  {"type": "string",
                   "enum": [*columns, *(f"-{c}" for c in columns), ""]})


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": _ref("Error")}}}


_BAD = _error("A parameter cannot be used: the message names it.")
_UNKNOWN = _error("No such target, or no such snapshot of it.")
_BUSY = {**_error("Too many requests in progress, or the database is unavailable; retry "
                  "after the Retry-After header's seconds."),
         "headers": {"Retry-After": {"schema": {"type": "integer"}}}}


def _listing(key: str, head: dict[str, Any], row: str, params: list[dict[str, Any]],
             summary: str) -> dict[str, Any]:
    page = {
        "type": "object",
        "required": [*head, key, "next_cursor"],
        "properties": {
            **head,
            key: {"type": "array", "items": _ref(row)},
            "next_cursor": _nullable("string"),
            "next": {**_nullable("string"), "description": "The URL of the next page."},
        },
    }
    return {"get": {
        "summary": summary,
        "parameters": [_NAME, *params, *_PAGING],
        "responses": {
            "200": {
                "description": "One page (JSON), or every row from the cursor on (CSV, NDJSON "
                               "without a limit). A cut page has a Link: rel=\"next\" header.",
                "headers": {"Link": {"schema": {"type": "string"}}},
                "content": {
                    "application/json": {"schema": page},
                    "application/x-ndjson": {"schema": {"type": "string"}},
                    "text/csv": {"schema": {"type": "string"}},
                },
            },
            "400": _BAD, "404": _UNKNOWN, "503": _BUSY,
        },
    }}


def _json_get(summary: str, schema: dict[str, Any], *, params: Sequence[dict[str, Any]] = (),
              errors: tuple[str, ...] = ("404",), links: dict[str, Any] | None = None,
              exports: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": schema}}
    if exports:  # format=csv|ndjson
        content |= {"application/x-ndjson": {"schema": {"type": "string"}},
                    "text/csv": {"schema": {"type": "string"}}}
    responses: dict[str, Any] = {"200": {"description": summary, "content": content}}
    if links:
        responses["200"]["links"] = links
    for status in errors:
        responses[status] = {"400": _BAD, "404": _UNKNOWN}[status]
    responses["503"] = _BUSY
    return {"get": {"summary": summary, "parameters": list(params), "responses": responses}}


_TARGET = "/api/v1/targets/{name}"
_SNAPSHOT = {"type": "integer"}
_HEAD = {"target": {"type": "string"}}


def _operation_id(path: str) -> str:
    """``target-urls`` for a target's route, ``api-v1-targets`` or ``healthz`` for others."""
    if path.startswith(_TARGET):
        return "target" + path[len(_TARGET):].replace("/", "-")
    return path.strip("/").replace("/", "-").replace(".", "-")


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document, as a dict."""
    status = {"application/json": {"schema": _ref("Status")}}
    paths = {
        "/healthz": {"get": {"summary": "The process and its scheduler are alive.",
                             "responses": {"200": {"description": "Alive.", "content": status},
                                           "503": {"description": "Stopping.",
                                                   "content": status}}}},
        "/readyz": {"get": {"summary": "The database can be written and its schema is the "
                                       "newest.",
                            "responses": {"200": {"description": "Ready.", "content": status},
                                          "503": {"description": "Not ready: why.",
                                                  "content": status}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics.", "responses": {
            "200": {"description": "The text exposition format.",
                    "content": {"text/plain": {"schema": {"type": "string"}}}},
            "503": _BUSY}}},
        "/api/v1/openapi.json": {"get": {"summary": "This document.", "responses": {
            "200": {"description": "OpenAPI 3.1.",
                    "content": {"application/json": {"schema": {"type": "object"}}}}}}},
        "/api/v1/targets": _json_get(
            "Every stored target, configured or not, with its last snapshot.",
            {"type": "object", "required": ["targets"],
             "properties": {"targets": {"type": "array", "items": _ref("Target")}}},
            params=[{**_sort("targets"), "description": "Sort by a column (-COLUMN: down; "
                     "empty values last): name, state (the last check's outcome), urls, "
                     "last_check, changes, issues (current). By name unless given."}],
            errors=("400",), links={
                _operation_id(f"{_TARGET}{suffix}"): {
                    "operationId": _operation_id(f"{_TARGET}{suffix}"),
                    "parameters": {"name": "$response.body#/targets/0/name"}}
                for suffix in ("", "/snapshots", "/urls", "/issues", "/diff", "/changes")}),
        _TARGET: _json_get("One target.", _ref("Target"), params=[_NAME]),
        f"{_TARGET}/snapshots": _json_get(
            "A target's snapshots, newest first.",
            {"type": "object", "required": ["target", "snapshots", "next"],
             "properties": {"target": {"type": "string"},
                            "snapshots": {"type": "array", "items": _ref("Snapshot")},
                            "next": _nullable("string")}},
            params=[_NAME,
                    _query("limit", "Snapshots in this page (50 unless given).",
                           _count(api_listings.SNAPSHOTS_MAX_LIMIT)),
                    _query("before", "Only snapshots with a smaller id (the next page's "
                           "link sets it).", _count(listing.MAX_ID)),
                    _sort("snapshots"),
                    _query("cursor", "Where the previous page of a sorted listing stopped "
                           "(the next page's link sets it)."),
                    _query("format", "json: a page; csv or ndjson (also chosen by Accept): "
                           "every snapshot, streamed.",
                           {"type": "string", "enum": ["json", "ndjson", "csv", ""]})],
            errors=("400", "404"), exports=True),
        f"{_TARGET}/urls": _listing(
            "urls", {**_HEAD, "snapshot_id": _SNAPSHOT}, "Url",
            [_query("at", f"The snapshot: {_WHEN}; the latest by default.", _WHEN_SCHEMA),
             _query("status", "valid or invalid: those entries; a health state: the URLs in "
                    "it now; broken: the URLs in any error state now (the pages' N broken).",
                    {"type": "string", "enum": [*listing.STATUSES, ""]}), _SEARCH,
             {**_sort("urls", "health"),
              "description": "Sort the whole listing by a column, page after page (-COLUMN: "
                             "down; empty values last either way): loc, status, lastmod, "
                             "document; with a health status: loc, http_status, since, "
                             "checked_at."}],
            "The URL set at a snapshot."),
        f"{_TARGET}/issues": _listing(
            "issues", {**_HEAD, "snapshot_id": _SNAPSHOT}, "Issue",
            [_query("at", f"The snapshot: {_WHEN}; the latest by default.", _WHEN_SCHEMA),
             _query("rule", "Rule ids or globs (repeated or comma-separated), such as "
                    f"lastmod-* ; known ids: {', '.join(sorted(RULES))}.",
                    {"type": "string", "pattern": r"^([a-z*?][a-z0-9*?-]*)?$"}, many=True),
             _sort("issues")],
            "The issues found at a snapshot, each with its rule, severity and URL."),
        f"{_TARGET}/diff": _listing(
            "changes", {**_HEAD, "from_snapshot_id": _SNAPSHOT, "to_snapshot_id": _SNAPSHOT},
            "DiffRow",
            [{**_query("from", f"The first snapshot: {_WHEN}.", _WHEN_SCHEMA), "required": True},
             _query("to", f"The second snapshot: {_WHEN}; the latest by default.",
                    _WHEN_SCHEMA), _DIFF_KIND, _sort("diff")],
            "The net difference between two snapshots."),
        f"{_TARGET}/changes": _listing(
            "changes", _HEAD, "Change",
            [_query("since", "Changes of this snapshot and later ones: a snapshot id, or the "
                    "changes recorded at or after an ISO 8601 time or a duration back from "
                    "now (90m, 6h, 2d).", _WHEN_SCHEMA),
             _query("until", f"Changes of this snapshot and earlier ones: {_WHEN}.",
                    _WHEN_SCHEMA), _KIND,
             _query("reason", "Removals the URL checks gave one of these reasons (repeated, "
                    "or comma-separated): moved, gone, live, unknown.",
                    {"type": "string", "enum": [*REMOVAL_REASONS, ""]}, many=True),
             _query("rule", "Changes about these rule ids or globs (repeated, or "
                    "comma-separated): " + ", ".join(CHANGE_RULES) + ".",
                    {"type": "string"}, many=True), _SEARCH, _sort("changes")],
            "The changes recorded by each check, newest first (or sorted)."),
        f"{_TARGET}/url": _json_get(
            "One URL's whole story.", _ref("Story"),
            params=[_NAME, {**_query("loc", "The URL, as the sitemap lists it.",
                                     {"type": "string", "minLength": 1}), "required": True}],
            errors=("400", "404")),
        f"{_TARGET}/url-health": _json_get(
            "The health of the listed URLs: counts, and each state's estimated share of the "
            "listing until every URL was checked.", _ref("UrlHealth"), params=[_NAME],
            errors=("404",)),
    }
    for path, item in paths.items():
        item["get"]["operationId"] = _operation_id(path)
    return {
        "openapi": "3.1.0",
        "info": {"title": "sitemap-monitor", "version": __version__,
                 "description": "The read-only HTTP API of the sitemap-monitor daemon "
                                "Every list is paged by an opaque cursor; every "
                                "bad parameter is a JSON 400 that names it; an empty "
                                "parameter is the same as none."},
        "paths": paths,
        "components": {"schemas": _SCHEMAS},
    }


@functools.cache
def body() -> bytes:
    """The document as the daemon serves it."""
    return json.dumps(document(), separators=(",", ":")).encode()
