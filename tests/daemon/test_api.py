"""The HTTP surface through Starlette's test client, on a real SQLite database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from conftest import T0, add_snapshot, add_target
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from starlette.types import ASGIApp
from waiting import until_async

from monitor import config
from monitor.observe.metrics import Metrics
from monitor.serve import api
from monitor.store import db


class ApiClient:
    """Synchronous requests to an ASGI app in process (httpx's ASGI transport)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.scraped: list[bool] = []

    def get(self, path: str) -> httpx.Response:
        """One GET request."""
        return asyncio.run(self._get(path))

    async def _get(self, path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get(path)


@pytest.fixture
def client(sqlite_engine: Engine) -> ApiClient:
    """An API client over a database with a target "shop" (3 snapshots) and "a/b"."""
    shop = add_target(sqlite_engine, "shop")
    add_target(sqlite_engine, "a/b")
    add_snapshot(sqlite_engine, shop, at=T0, urls=2, change_list=(("added", "u1"), ("added", "u2")))
    add_snapshot(sqlite_engine, shop, at=T0 + timedelta(hours=1), urls=2)
    add_snapshot(sqlite_engine, shop, at=T0 + timedelta(hours=2), urls=1,
                 change_list=(("removed", "u2"), ("invalid", "u1")))
    registry = CollectorRegistry()
    Metrics(registry, ["shop"], [])
    scraped: list[bool] = []

    async def on_scrape() -> None:
        scraped.append(True)


    app = api.create_app(
        engine=sqlite_engine, registry=registry, alive=lambda: True,
        configured=lambda: ["shop"], on_scrape=on_scrape, clock=lambda: T0 + timedelta(hours=3))
    test_client = ApiClient(app)
    test_client.scraped = scraped
    return test_client


def test_metrics_health_and_readiness(client: ApiClient) -> None:
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'sitemap_monitor_checks_total{outcome="ok",target="shop"} 0.0' in metrics.text
    assert client.scraped == [True]
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}


def test_readyz_fails_on_a_database_behind(tmp_path: object) -> None:
    empty = db.make_engine(f"sqlite:///{tmp_path}/empty.db")
    app = api.create_app(engine=empty, registry=CollectorRegistry(), alive=lambda: False,
                         configured=list)
    c = ApiClient(app)
    ready = c.get("/readyz")
    assert ready.status_code == 503
    assert "db upgrade" in ready.json()["error"]
    assert c.get("/healthz").status_code == 503
    empty.dispose()


def test_targets_with_last_snapshot(client: ApiClient) -> None:
    body = client.get("/api/v1/targets").json()
    by_name = {t["name"]: t for t in body["targets"]}
    assert by_name["shop"]["configured"] is True
    assert by_name["a/b"]["configured"] is False
    assert by_name["shop"]["last_snapshot"]["urls"] == 1
    assert by_name["shop"]["snapshots"] == 3
    one = client.get("/api/v1/targets/shop").json()
    assert one["name"] == "shop"
    assert one["changes"] == 4
    # A name with a slash is still one target.
    assert client.get("/api/v1/targets/a/b").json()["name"] == "a/b"


def test_unknown_things_are_json_404s(client: ApiClient) -> None:
    for path in ("/api/v1/targets/nope", "/api/v1/targets/nope/changes",
                 "/api/v1/targets/nope/snapshots", "/api/v2"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["status"] == 404


def test_snapshots_are_paged(client: ApiClient) -> None:
    first = client.get("/api/v1/targets/shop/snapshots?limit=2").json()
    assert [s["urls"] for s in first["snapshots"]] == [1, 2]
    assert first["next"] is not None
    second = client.get(first["next"]).json()
    assert len(second["snapshots"]) == 1
    assert second["snapshots"][0]["started_at"] == "2024-05-01T12:00:00Z"
    assert second["next"] is None
    assert client.get("/api/v1/targets/a/b/snapshots").json()["snapshots"] == []


def test_changes_are_filtered_and_paged(client: ApiClient) -> None:
    every = client.get("/api/v1/targets/shop/changes").json()
    assert [c["kind"] for c in every["changes"]] == ["invalid", "removed", "added", "added"]
    since = client.get("/api/v1/targets/shop/changes?since=2024-05-01T13:00:00Z").json()
    assert [c["loc"] for c in since["changes"]] == ["u1", "u2"]
    relative = client.get("/api/v1/targets/shop/changes?since=90m").json()
    assert [c["kind"] for c in relative["changes"]] == ["invalid", "removed"]
    kinds = client.get("/api/v1/targets/shop/changes?kind=added,removed&limit=2").json()
    assert [c["kind"] for c in kinds["changes"]] == ["removed", "added"]
    more = client.get(
        f"/api/v1/targets/shop/changes?kind=added,removed&limit=2&cursor={kinds['next_cursor']}"
    ).json()
    assert [c["kind"] for c in more["changes"]] == ["added"]
    assert more["next_cursor"] is None


@pytest.mark.parametrize("query", [
    "changes?kind=deleted", "changes?since=yesterday", "changes?limit=0",
    "changes?limit=x", "changes?cursor=abc", "snapshots?before=-1", "snapshots?limit=5000",
    # A one-value parameter given twice (schemathesis found the second one taken silently).
    "changes?limit=1&limit=", "urls?cursor=a&cursor=b", "snapshots?before=3&before=4",
])
def test_bad_parameters_are_json_400s(client: ApiClient, query: str) -> None:
    response = client.get(f"/api/v1/targets/shop/{query}")
    assert response.status_code == 400
    assert response.json()["error"]["message"].split(":")[0] in (
        "kind", "since", "limit", "cursor", "before")


def test_requests_beyond_their_bound_get_503_at_once_and_probes_pass(
    sqlite_engine: Engine,
) -> None:
    refused: list[str] = []
    release = asyncio.Event()

    scraping: list[None] = []

    async def slow_scrape() -> None:
        scraping.append(None)
        await release.wait()

    app = api.create_app(
        engine=sqlite_engine, registry=CollectorRegistry(), alive=lambda: True,
        configured=list, on_scrape=slow_scrape, on_refused=refused.append,
        limits=config.Http(max_requests=1, database_connections=1))

    async def scenario() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            # Two scrapes fill the /metrics lane; the third is refused, the probe is not.
            held = [asyncio.create_task(c.get("/metrics")) for _ in range(2)]
            await until_async(lambda: len(scraping) == 2, what="two scrapes admitted")
            answers = [await c.get("/metrics"), await c.get("/healthz"),
                       await c.get("/api/v1/targets")]
            release.set()
            return [*answers, *await asyncio.gather(*held)]

    third, health, targets, *scrapes = asyncio.run(scenario())
    assert third.status_code == 503
    assert int(third.headers["retry-after"]) >= 1
    assert third.json()["error"]["status"] == 503
    assert health.status_code == 200
    assert targets.status_code == 200  # the API's own bound is not the scrapes'
    assert [s.status_code for s in scrapes] == [200, 200]
    assert refused == ["metrics"]


def test_a_cursor_goes_on_from_the_snapshots_its_first_page_resolved(
    sqlite_engine: Engine,
) -> None:
    """Pages are read while the daemon checks: the next page of `since=5h` is asked a minute
    later, and a new snapshot lands between pages of the latest URLs. A cursor goes on with what
    its first page resolved (before, both answered 400 "it continues another query")."""
    shop = add_target(sqlite_engine, "shop")
    add_snapshot(sqlite_engine, shop, at=T0, urls=2,
                 change_list=(("added", "u1"), ("added", "u2"), ("added", "u3")))
    first = add_snapshot(sqlite_engine, shop, at=T0 + timedelta(hours=1), urls=2,
                         change_list=(("removed", "u3"), ("added", "u4"), ("added", "u5")))
    now = [T0 + timedelta(hours=3)]
    app = api.create_app(engine=sqlite_engine, registry=CollectorRegistry(), alive=lambda: True,
                         configured=lambda: ["shop"], clock=lambda: now[0])
    c = ApiClient(app)

    def every(path: str, between: Callable[[], object]) -> list[dict[str, Any]]:
        body = c.get(path).json()
        rows = [*body["changes"]]
        while body["next"] is not None:
            between()
            answer = c.get(body["next"])
            assert answer.status_code == 200, answer.text
            body = answer.json()
            rows.extend(body["changes"])
        return rows

    def a_minute_later() -> None:
        now[0] += timedelta(minutes=1)

    found = every("/api/v1/targets/shop/changes?since=5h&limit=2", a_minute_later)
    assert [x["loc"] for x in found] == ["u5", "u4", "u3", "u3", "u2", "u1"]

    def a_new_check() -> None:
        add_snapshot(sqlite_engine, shop, at=now[0], urls=0, change_list=(("added", "u9"),))

    # A net diff to the latest snapshot: the one the first page saw, not the one checked since.
    found = every("/api/v1/targets/shop/diff?from=1&limit=1", a_new_check)
    assert [x["loc"] for x in found] == ["u4", "u5"]  # (u3's removal row has no before)
    assert first == 2
