"""Shared fixtures. Keep this small and additive: each fixture says what it gives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from databases import database_url, postgres_url  # noqa: F401 - fixtures for every test
from httpserver import TestServer


@pytest.fixture
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio only (the daemon's event loop)."""
    return "asyncio"


@pytest.fixture
def http_server() -> Iterator[TestServer]:
    """A real HTTP server on 127.0.0.1 (see tests/httpserver.py), stopped after the test."""
    with TestServer() as server:
        yield server
