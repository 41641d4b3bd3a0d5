"""Shared fixtures. Keep this small and additive: each fixture says what it gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from databases import (  # noqa: F401 - fixtures for every test
    database_url,
    finish_databases,
    migrated_database_url,
    migrated_postgres_url,
    postgres_template,
    postgres_url,
    sqlite_template,
)
from httpserver import TestServer
from skips import summary
from smtpserver import SmtpServer, serve


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first test: what this machine will skip, and how to run everything."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    for line in summary(session.items):
        reporter.write_line(line, yellow=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The databases the tests dropped in the background, and those made ahead, are gone
    before pytest exits."""
    finish_databases()


@pytest.fixture
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio only (the daemon's event loop)."""
    return "asyncio"


@pytest.fixture
def http_server() -> Iterator[TestServer]:
    """A real HTTP server on 127.0.0.1 (see tests/httpserver.py), stopped after the test."""
    with TestServer() as server:
        yield server


@pytest.fixture
def smtp_plain(tmp_path: Path) -> Iterator[SmtpServer]:
    """A real SMTP server on 127.0.0.1 (see tests/smtpserver.py), AUTH offered without TLS."""
    with serve(tmp_path, tls=False) as server:
        yield server
