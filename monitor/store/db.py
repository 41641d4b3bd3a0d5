"""Engines and migrations: one place that knows how to open and upgrade a database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from monitor.errors import ConfigError, SchemaError, StoreError

__all__ = [
    "SchemaError",
    "current_revision",
    "head_revision",
    "is_sqlite",
    "make_engine",
    "migrations_dir",
    "redact",
    "require_head",
    "upgrade",
]


def migrations_dir() -> Path:
    """The Alembic script directory: inside the wheel, else the source checkout's."""
    packaged = Path(__file__).resolve().parent.parent / "_migrations"
    if (packaged / "env.py").exists():
        return packaged
    source = Path(__file__).resolve().parents[2] / "migrations"
    if (source / "env.py").exists():
        return source
    raise SchemaError("the migrations directory is missing from this installation")


def redact(url: str) -> str:
    """The database URL without its password, fit for logs and messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<invalid database URL>"


def is_sqlite(engine: Engine) -> bool:
    """Whether this is the embedded SQLite database."""
    return engine.dialect.name == "sqlite"


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; ``postgresql://`` means psycopg 3, SQLite gets WAL and FKs."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"database_url: not a database URL: {redact(url)}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername.startswith("sqlite"):
        database = parsed.database
        if database and database != ":memory:":
            folder = Path(database).expanduser().parent
            if not folder.is_dir():
                raise ConfigError(f"database_url: folder {folder} does not exist")
        # A check uses its connection from worker threads, one at a time.
        kwargs.setdefault("connect_args", {"timeout": 30, "check_same_thread": False})
    elif not parsed.drivername.startswith("postgresql"):
        raise ConfigError(f"database_url: unsupported database {parsed.drivername!r}")
    else:
        kwargs.setdefault("pool_pre_ping", True)
    try:
        engine = create_engine(parsed, **kwargs)
    except (ArgumentError, ImportError) as exc:
        raise ConfigError(f"database_url: {exc}") from None
    if is_sqlite(engine):
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _alembic_config(engine: Engine) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str | None:
    """The newest migration this installation ships."""
    script = ScriptDirectory(str(migrations_dir()))
    return script.get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The migration the database is at, or None for an empty database."""
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except SQLAlchemyError as exc:
        where = redact(str(engine.url))
        raise StoreError(f"database {where} is unreachable: {exc.__class__.__name__}") from None


def upgrade(engine: Engine) -> None:
    """Apply every migration up to the newest (``db upgrade``)."""
    try:
        command.upgrade(_alembic_config(engine), "head")
    except SQLAlchemyError as exc:
        raise StoreError(f"migration failed on {redact(str(engine.url))}: {exc}") from None


def require_head(engine: Engine) -> None:
    """Raise SchemaError unless the schema is at the newest migration."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise SchemaError(
            f"database schema is at {current or 'nothing'}, this version needs {head}: "
            "run 'sitemap-monitor db upgrade'"
        )

