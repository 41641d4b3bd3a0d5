"""Database fixtures: the same tests run on SQLite and on PostgreSQL (STYLE 8).

PostgreSQL comes from TEST_DATABASE_URL (a server URL; each test gets its own fresh database,
dropped afterwards), else from testcontainers when a Docker engine answers, else the
PostgreSQL cases skip with the reason. CI sets TEST_DATABASE_URL, so nothing skips there.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator

import pytest
from skips import EVERYTHING, postgres_missing
from sqlalchemy import create_engine, make_url, text

_container_url: str | None = None


def _server_url() -> str:
    """A PostgreSQL server URL, or pytest.skip with the reason."""
    global _container_url
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return url
    if _container_url is not None:
        return _container_url
    # Said in our words: a library's exception text (a deprecation warning raised as an
    # error, a socket path) is no reason a reader can act on.
    reason = postgres_missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide PostgreSQL: {reason}; set TEST_DATABASE_URL")
        pytest.skip(f"no PostgreSQL: {reason}; run everything with: {EVERYTHING}")
    with warnings.catch_warnings():
        # Its postgres module warns that it moved; the warning is the library's to fix.
        warnings.simplefilter("ignore", DeprecationWarning)
        from testcontainers.postgres import PostgresContainer
    container = PostgresContainer("postgres:16-alpine", driver="psycopg")
    container.start()
    _container_url = container.get_connection_url()
    return _container_url


def _admin(url: str) -> str:
    return make_url(url).set(drivername="postgresql+psycopg").render_as_string(
        hide_password=False
    )


def create_postgres_database() -> str:
    """A fresh, uniquely named database on the test server; returns its URL."""
    server = _server_url()
    name = f"sm_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_admin(server), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(_admin(server)).set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(url: str) -> None:
    """Drop a database made by ``create_postgres_database``."""
    name = make_url(url).database
    admin = create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test."""
    url = create_postgres_database()
    yield url
    drop_postgres_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[str]:
    """Each store test once on a SQLite file and once on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/monitor.db"
        return
    url = create_postgres_database()
    yield url
    drop_postgres_database(url)
