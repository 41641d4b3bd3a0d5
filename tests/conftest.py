"""Shared fixtures. Keep this small and additive: each fixture says what it gives."""

from __future__ import annotations

import fcntl
import os
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

# Each test says which database, config and workers it uses. One from the environment (a
# developer's shell, or a make target's export) reached every CLI check run without
# --database-url: they all wrote into one ./sitemap-monitor.db, and a second suite run found
# its targets already checked there.
for _name in [name for name in os.environ if name.startswith("SITEMAP_MONITOR_")]:
    del os.environ[_name]


def _say(config: pytest.Config, lines: list[str]) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in lines if reporter is not None else ():
        reporter.write_line(line, yellow=True)


def _workers(config: pytest.Config) -> bool:
    """Whether this process hands the tests to worker processes (``pytest -n N``)."""
    return bool(getattr(config.option, "numprocesses", None))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Before the first test of a run spread over workers: what this machine will skip."""
    if _workers(session.config):
        _say(session.config, summary(None))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first test: what this machine will skip, and how to run everything (a
    worker's output is not shown: the process that spreads the tests said it)."""
    if not hasattr(session.config, "workerinput"):
        _say(session.config, summary(session.items))


@pytest.fixture
def one_flood_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold the lock that every worker of this run shares, for the whole test: tests that
    flood the machine's sockets, or read a count the whole machine shares (the kernel's
    dropped connections), run one at a time whatever worker runs them."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's basetemp lies in the run's own
    with (root / "floods.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


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
