"""A search of the locs is bounded: a text longer than any loc is a 400 that says so, on the
API, the pages and the command line, before the database is asked (SQLite refused a long LIKE
pattern, which the API answered as a database outage, 503). On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest
from conftest import T0, add_snapshot, add_target
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from starlette.types import ASGIApp

from monitor.cli.commands import main
from monitor.serve import api

BOUND = 2_048  # characters: the longest loc the protocol allows
LONG = "a" * 60_000  # over SQLite's LIKE pattern bound, within httpx's bound of a URL
LONGEST = "€%_/é" * (BOUND // 5) + "x" * (BOUND % 5)


def _get(app: ASGIApp, path: str, params: dict[str, str]) -> httpx.Response:
    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get(path, params=params)

    return asyncio.run(get())


@pytest.fixture
def app(engine: Engine) -> ASGIApp:
    """The daemon's app over a database with a target "shop" and a change of one loc."""
    shop = add_target(engine, "shop")
    add_snapshot(engine, shop, at=T0, urls=1, change_list=(("added", "https://shop.example/a"),))
    return api.create_app(engine=engine, registry=CollectorRegistry(), alive=lambda: True,
                          configured=lambda: ["shop"], clock=lambda: T0 + timedelta(hours=1))


@pytest.mark.parametrize("path", [
    "/api/v1/targets/shop/changes", "/api/v1/targets/shop/urls",
])
def test_a_search_longer_than_a_loc_is_a_400_that_says_so(app: ASGIApp, path: str) -> None:
    answer = _get(app, path, {"q": LONG})
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"error": {"status": 400, "message": (
        "q: 60,000 characters; a search is at most 2,048 (a loc, or a part of one)")}}
    # The longest allowed, every character one LIKE must escape or several bytes: answered.
    assert len(LONGEST) == BOUND
    longest = _get(app, path, {"q": LONGEST})
    assert longest.status_code == 200, longest.text
    if path.endswith("changes"):  # (the rows of this database hold no URL sets)
        found = _get(app, path, {"q": "SHOP.example/A"}).json()["changes"]
        assert [row["loc"] for row in found] == ["https://shop.example/a"]


@pytest.mark.parametrize("path", ["/targets/shop/changes", "/targets/shop/urls"])
def test_the_pages_search_box_is_bounded_too(app: ASGIApp, path: str) -> None:
    answer = _get(app, path, {"q": LONG})
    assert answer.status_code == 400
    assert "q: 60,000 characters; a search is at most 2,048" in answer.text
    assert _get(app, path, {"q": LONGEST}).status_code == 200
    assert f'maxlength="{BOUND}"' in _get(app, path, {}).text


def test_the_openapi_document_states_the_bound(app: ASGIApp) -> None:
    document = _get(app, "/api/v1/openapi.json", {}).json()
    searches = [param for item in document["paths"].values() for param in
                item["get"].get("parameters", []) if param["name"] == "q"]
    assert len(searches) == 2
    for param in searches:
        assert param["schema"] == {"type": "string", "maxLength": BOUND}


@pytest.mark.parametrize("command", ["changes", "urls"])
def test_the_command_lines_loc_is_bounded_too(
    engine: Engine, capsys: pytest.CaptureFixture[str], command: str,
) -> None:
    add_snapshot(engine, add_target(engine, "shop"), at=T0, urls=1,
                 change_list=(("added", "https://shop.example/a"),))
    url = engine.url.render_as_string(hide_password=False)
    assert main([command, "shop", "--database-url", url, "--loc", LONG]) == 2
    assert capsys.readouterr().err == ("sitemap-monitor: --loc: 60,000 characters; a search is "
                                       "at most 2,048 (a loc, or a part of one)\n")
    assert main([command, "shop", "--database-url", url, "--loc", LONGEST, "--json"]) == 0
