"""Fixtures of the pipeline tests: a changing sitemap site and a database per backend."""

from __future__ import annotations

import pytest
from httpserver import TestServer
from site_fixture import Site

from monitor.cli import main


@pytest.fixture
def site(http_server: TestServer) -> Site:
    """A sitemap site on the test server."""
    return Site(http_server)


@pytest.fixture
def db(database_url: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The test database's URL as a user writes it, its schema at head: ``check`` sets up only
    SQLite itself, a PostgreSQL database takes ``db upgrade`` first."""
    url = database_url.replace("postgresql+psycopg://", "postgresql://")
    if url.startswith("postgresql"):
        assert main(["db", "upgrade", "--database-url", url]) == 0
        capsys.readouterr()
    return url
