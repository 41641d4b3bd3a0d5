"""Fixtures of the pipeline tests: a changing sitemap site and a database per backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from databases import BACKENDS
from httpserver import TestServer
from site_fixture import Site


@pytest.fixture
def site(http_server: TestServer) -> Site:
    """A sitemap site on the test server."""
    return Site(http_server)


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test database's URL as a user writes it, its schema at head: ``check`` sets up only
    SQLite itself (an empty file here, as a user's first check finds it), a PostgreSQL database
    takes ``db upgrade`` first (a copy of one so migrated)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/monitor.db"
    url: str = request.getfixturevalue("migrated_postgres_url")
    return url.replace("postgresql+psycopg://", "postgresql://")
