"""The OpenAPI document against a running daemon that checked a real local site: it
names every route; each route's real answers (pages, CSV, NDJSON, 400s, 404s) validate against
it; schemathesis, fuzzing the API from it, finds no server error and no answer that breaks it.
Once on SQLite and once on PostgreSQL. A database error is a 503 that does not say where the
database is."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from databases import BACKENDS, fresh_database
from harness import Daemon, sitemap, write_config
from httpserver import Reply, TestServer
from prometheus_client import CollectorRegistry
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from monitor.serve import api
from monitor.store import db

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]
TARGET = "/api/v1/targets/{name}"


@pytest.fixture(scope="module", params=BACKENDS)
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[Daemon]:
    """A daemon that has checked "shop" twice (URLs added, removed and changed, an invalid
    entry and a bad lastmod) and "a/b" once. One a module and database: the API only reads."""
    folder = tmp_path_factory.mktemp("openapi")
    # Migrated, as `sitemap-monitor db upgrade` leaves it before a daemon on PostgreSQL.
    with TestServer() as http_server, fresh_database(request, folder,
                                                     migrated=True) as database_url:
        page = http_server.url("/p")
        first = {f"{page}{i}": "2024-01-01" for i in range(30)}
        second = {**dict(list(first.items())[5:]), f"{page}new": None, f"{page}7": "2024-02-02",
                  f"{page}8": "the day before"}
        http_server.route("/shop.xml", Reply(body=sitemap(first)))
        http_server.route("/ab.xml", Reply(body=sitemap({f"{page}x": None, "ftp://a/b": None})))
        config = write_config(folder / "c.yaml", database_url,
                              [("shop", http_server.url("/shop.xml")),
                               ("a/b", http_server.url("/ab.xml"))], interval="1s")
        running = Daemon(config)
        try:
            running.started()
            running.more_checks("shop", 1, timeout=30)
            http_server.route("/shop.xml", Reply(body=sitemap(second)))
            running.wait_for(lambda line: line.get("event") == "check"
                             and line.get("target") == "shop" and line.get("removed"),
                             timeout=30)
            running.more_checks("a/b", 1, timeout=30)
            yield running
        finally:
            running.stop()


def test_the_document_names_every_route(daemon: Daemon) -> None:
    document = daemon.get("/api/v1/openapi.json").json()
    assert document["openapi"] == "3.1.0"
    routes = {"/metrics", "/healthz", "/readyz", "/api/v1/openapi.json", "/api/v1/targets",
              TARGET, *(f"{TARGET}/{suffix}" for suffix in api._SUFFIXES)}
    assert set(document["paths"]) == routes
    # schemathesis refuses a document that is not valid OpenAPI (and leaves out its own route).
    schema = schemathesis.openapi.from_url(daemon.base + "/api/v1/openapi.json")
    operations = {result.ok().path for result in schema.get_all_operations()}
    assert operations == routes - {"/api/v1/openapi.json"}


def _calls(first: dict[str, Any], last: dict[str, Any],
           ) -> list[tuple[str, dict[str, Any], dict[str, Any], int]]:
    """(path, path parameters, query, expected status) of requests a user would send, given
    shop's first and last snapshots."""
    then = first["finished_at"]
    first, last = str(first["id"]), str(last["id"])
    shop, ab = {"name": "shop"}, {"name": "a/b"}
    listed = [(f"{TARGET}/{suffix}", shop, query, 200)
              for suffix, queries in {
                  "urls": [{}, {"at": first}, {"status": "invalid"}, {"limit": 3},
                           {"format": "csv"}, {"format": "ndjson", "limit": 2}],
                  "issues": [{}, {"rule": ["lastmod-*"]}, {"at": then}, {"format": "csv"}],
                  "diff": [{"from": first}, {"from": first, "to": last, "kind": ["removed"]},
                           {"from": first, "limit": 2}, {"from": then, "format": "ndjson"}],
                  "changes": [{}, {"since": "1h"}, {"since": then},
                              {"kind": ["added", "changed"], "limit": 1},
                              {"format": "csv"}],
              }.items() for query in queries]
    return [
        ("/healthz", {}, {}, 200), ("/readyz", {}, {}, 200), ("/metrics", {}, {}, 200),
        ("/api/v1/targets", {}, {}, 200),
        (TARGET, shop, {}, 200), (TARGET, ab, {}, 200), (TARGET, {"name": "nope"}, {}, 404),
        (f"{TARGET}/snapshots", shop, {"limit": 1}, 200),
        (f"{TARGET}/snapshots", ab, {}, 200),
        (f"{TARGET}/snapshots", shop, {"before": 0}, 400),
        *listed,
        (f"{TARGET}/urls", ab, {"status": "invalid"}, 200),
        (f"{TARGET}/urls", shop, {"at": "9999"}, 404),
        (f"{TARGET}/urls", shop, {"cursor": "nope"}, 400),
        (f"{TARGET}/diff", shop, {}, 400),
        (f"{TARGET}/changes", {"name": "nope"}, {}, 404),
        (f"{TARGET}/changes", shop, {"since": "99999999999h"}, 400),
        (f"{TARGET}/url", shop, {"loc": "https://not.listed.example/x"}, 200),
        (f"{TARGET}/url", shop, {}, 400),
        (f"{TARGET}/url", {"name": "nope"}, {"loc": "https://x.example/"}, 404),
        (f"{TARGET}/url-health", shop, {}, 200),
        (f"{TARGET}/url-health", {"name": "nope"}, {}, 404),
    ]


def test_every_route_answers_as_the_document_says(daemon: Daemon) -> None:
    schema = schemathesis.openapi.from_url(daemon.base + "/api/v1/openapi.json")
    # Every snapshot (it checks once a second): the first is the last of the list.
    snapshots = daemon.get("/api/v1/targets/shop/snapshots?limit=1000").json()["snapshots"]
    seen: dict[str, set[int]] = {}
    for path, params, query, status in _calls(snapshots[-1], snapshots[0]):
        case = schema[path]["GET"].Case(path_parameters=params, query=query)
        response = case.call(base_url=daemon.base)
        assert response.status_code == status, (path, params, query, response.text)
        case.validate_response(response, checks=CHECKS)
        seen.setdefault(path, set()).add(status)
    assert set(seen) == set(schema.raw_schema["paths"]) - {"/api/v1/openapi.json"}
    # A cut page is continued by its cursor, and the document describes that page too.
    case = schema[f"{TARGET}/urls"]["GET"].Case(path_parameters={"name": "shop"},
                                                query={"limit": 20})
    first = case.call(base_url=daemon.base).json()
    rest = schema[f"{TARGET}/urls"]["GET"].Case(
        path_parameters={"name": "shop"}, query={"limit": 20, "cursor": first["next_cursor"]})
    answer = rest.call(base_url=daemon.base)
    rest.validate_response(answer, checks=CHECKS)
    assert len(first["urls"]) + len(answer.json()["urls"]) == 26


def test_schemathesis_finds_no_server_error(daemon: Daemon, tmp_path: Path) -> None:
    """The field's API fuzzer over the whole document, every phase (examples, coverage,
    fuzzing, stateful through the document's links). Not run: ``positive_data_acceptance``
    (a pattern cannot say that 2024-02-30 is not a date, nor which globs match a rule).

    One worker: with two, Hypothesis describes its strategies' lambdas with ``ast.parse`` in
    two threads at once, and Python 3.11 keeps the AST constructor's recursion depth where
    both threads change it (CPython gh-106905): once in a while the run ended in "SystemError:
    AST constructor recursion depth mismatch", a runtime error of the fuzzer, not the API's."""
    run = subprocess.run(
        [str(Path(sys.executable).with_name("schemathesis")), "run",
         f"{daemon.base}/api/v1/openapi.json", "--checks", "all",
         "--exclude-checks", "positive_data_acceptance", "--max-examples", "60",
         "--seed", "22", "--workers", "1", "--report", "json",
         "--report-json-path", str(tmp_path / "run.json")],
        capture_output=True, text=True, timeout=600, check=False,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    report = json.loads((tmp_path / "run.json").read_text())
    counts = {"operations": report["operations"]["tested"],
              "generated": report["test_cases"]["generated"],
              "failures": report["test_cases"]["with_failures"],
              "errored": report["test_cases"]["errored"]}
    print(f"schemathesis {report['schemathesis_version']}: {counts}")
    assert run.returncode == 0, run.stdout[-4000:]
    assert report["failures"] == []
    assert report["errors"] == []
    assert counts["operations"] == report["operations"]["total"] == 12
    assert counts["generated"] >= 500
    assert all(p["status"] == "success" for p in report["phases"].values()), report["phases"]
    assert daemon.proc.poll() is None  # and the daemon is still up


def test_a_database_error_is_a_503_that_does_not_locate_the_database() -> None:
    """A real PostgreSQL driver against a port where no server listens."""
    engine = db.make_engine("postgresql://secret_user:pw@127.0.0.1:9/secret_db",
                            connect_args={"connect_timeout": 2})
    app = api.create_app(engine=engine, registry=CollectorRegistry(), alive=lambda: True,
                         configured=list)

    async def get(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get(path)

    for path in ("/api/v1/targets", "/api/v1/targets/shop/urls",
                 "/api/v1/targets/shop/snapshots"):
        answer = asyncio.run(get(path))
        assert answer.status_code == 503, (path, answer.text)
        assert answer.headers["retry-after"] == "1"
        message = answer.json()["error"]["message"]
        assert message == "the database is unavailable; retry later", path
        for secret in ("secret_user", "secret_db", "127.0.0.1", "postgresql"):
            assert secret not in answer.text
    engine.dispose()


def test_a_nul_in_a_name_is_a_400(daemon: Daemon) -> None:
    for path in ("/api/v1/targets/sh%00op", "/api/v1/targets/sh%00op/urls",
                 "/api/v1/targets/shop%00/changes?kind=added"):
        answer = daemon.get(path)
        assert answer.status_code == 400, path
        assert answer.json()["error"]["message"] == "name: holds a NUL character"
