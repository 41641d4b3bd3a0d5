"""Fixtures of the pipeline tests: a changing sitemap site and a database per backend."""

from __future__ import annotations

import pytest
from httpserver import TestServer
from site_fixture import Site


@pytest.fixture
def site(http_server: TestServer) -> Site:
    """A sitemap site on the test server."""
    return Site(http_server)
