"""Database fixtures: the same tests run on SQLite and on PostgreSQL (STYLE 8).

PostgreSQL comes from TEST_DATABASE_URL (a server URL; each test gets its own fresh database,
dropped afterwards), else from testcontainers when a Docker engine answers, else the
PostgreSQL cases skip with the reason. CI sets TEST_DATABASE_URL, so nothing skips there.

A test that wants the schema at head (``migrated_database_url``, ``migrated_postgres_url``)
gets a copy of a database migrated once a session, not a migration of its own: the copy is
the same database, made in a few milliseconds on SQLite and a tenth of a second on
PostgreSQL, where migrating takes a third of a second and more on a busy machine.

On PostgreSQL the waits no test needs happen in the background: the next database of each
kind (empty, or a copy of the template) is made while the test before runs, and a dropped
one goes while the next runs (DROP DATABASE waits for a checkpoint of the whole server, up
to a second and more when other work writes to it). ``finish_databases``, at the end of the
session, waits for the drops and drops what was made ahead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from skips import EVERYTHING, postgres_missing
from sqlalchemy import create_engine, make_url, text

from monitor.store import db

_container_url: str | None = None
# One thread each: a create never waits behind a drop's checkpoint.
_making = ThreadPoolExecutor(max_workers=1, thread_name_prefix="make-database")
_dropping = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drop-database")
_made_ahead: dict[str | None, Future[str]] = {}  # by template (None: an empty database)
_drops: list[Future[None]] = []


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


def _admin_sql(url: str, statement: str) -> None:
    admin = create_engine(make_url(_admin(url)).set(database="postgres"),
                          isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(statement))
    admin.dispose()


def _create(server: str, template: str | None) -> str:
    name = f"sm_test_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    _admin_sql(server, f'CREATE DATABASE "{name}"{copy}')
    return make_url(_admin(server)).set(database=name).render_as_string(hide_password=False)


def create_postgres_database(template: str | None = None) -> str:
    """A fresh, uniquely named database on the test server (a copy of ``template``, a
    database name, when given); returns its URL."""
    server = _server_url()
    ahead = _made_ahead.pop(template, None)
    _made_ahead[template] = _making.submit(_create, server, template)
    return ahead.result() if ahead is not None else _create(server, template)


def _drop(url: str) -> None:
    _admin_sql(url, f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')


def drop_postgres_database(url: str) -> None:
    """Drop a database made by ``create_postgres_database``, in the background."""
    _drops.append(_dropping.submit(_drop, url))


def finish_databases() -> None:
    """Wait for every drop begun so far and drop the databases made ahead; raise the first
    error."""
    while _made_ahead:
        _drop(_made_ahead.popitem()[1].result())
    while _drops:
        _drops.pop(0).result()


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """The name of a PostgreSQL database at the newest schema, made once a session."""
    url = create_postgres_database()
    engine = db.make_engine(url)
    db.upgrade(engine)
    engine.dispose()
    name = make_url(url).database
    # Nobody connects to it again (autovacuum neither): a copy needs it without connections.
    _admin_sql(url, f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
    assert name is not None
    yield name
    _drop(url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the newest schema, made once a session."""
    path = tmp_path_factory.mktemp("template") / "monitor.db"
    engine = db.make_engine(f"sqlite:///{path}")
    db.upgrade(engine)
    engine.dispose()
    # The last connection's close checkpoints the write-ahead log into the file: the file alone
    # is the database.
    assert not path.with_name(path.name + "-wal").exists()
    return path


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test."""
    url = create_postgres_database()
    yield url
    drop_postgres_database(url)


@pytest.fixture
def migrated_postgres_url(postgres_template: str) -> Iterator[str]:
    """A fresh PostgreSQL database at the newest schema for one test."""
    url = create_postgres_database(postgres_template)
    yield url
    drop_postgres_database(url)


@contextlib.contextmanager
def fresh_database(request: pytest.FixtureRequest, folder: Path, *, migrated: bool,
                   ) -> Iterator[str]:
    """A new database of the backend ``request.param`` names (a fixture parametrized by
    ``BACKENDS``, of any scope), empty or at the newest schema; dropped on exit."""
    if request.param == "sqlite":
        path = folder / "monitor.db"
        if migrated:
            shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    url = create_postgres_database(
        request.getfixturevalue("postgres_template") if migrated else None)
    try:
        yield url
    finally:
        drop_postgres_database(url)


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each store test once on a SQLite file and once on a fresh PostgreSQL database."""
    with fresh_database(request, tmp_path, migrated=False) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def migrated_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """``database_url`` with the schema at head, as ``sitemap-monitor db upgrade`` leaves it."""
    with fresh_database(request, tmp_path, migrated=True) as url:
        yield url
