"""Engines and migrations: one place that knows how to open and upgrade a database.

Alembic is imported only when a migration runs or the schema is not at head: importing it costs
more than a whole ``check`` of a small sitemap, and a database at head needs only one
plain query of ``alembic_version`` compared with the head read from the migration files. An
empty database that ``check`` sets up (SQLite) gets the newest schema whole, without Alembic:
see ``create_schema``.
"""

from __future__ import annotations

import ast
import os
import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    create_engine,
    event,
    inspect,
    make_url,
    text,
)
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from monitor.core.errors import ConfigError, SchemaError, StoreError

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

__all__ = [
    "SchemaError",
    "bring_to_head",
    "check_writable",
    "create_schema",
    "current_revision",
    "head_revision",
    "in_memory",
    "is_sqlite",
    "make_engine",
    "migrations_dir",
    "redact",
    "refused",
    "require_head",
    "upgrade",
]

# PostgreSQL: how long a connection may take to open, and a statement to run, before the
# client (connect) or the server (statement) gives up: a frozen or locked database then fails
# a check or a probe instead of holding it for ever. Migrations run without the statement
# timeout (``upgrade``). Either can be set in the URL instead (``?connect_timeout=``,
# ``?options=-c statement_timeout=...``).
CONNECT_TIMEOUT = 10
STATEMENT_TIMEOUT = 60.0
# SQLite waits this long for another connection's write lock (sqlite3's ``timeout``).
_SQLITE_BUSY = 30.0
# ``check_writable`` on SQLite: less free space than this on the database's file system is
# a full disk (a check writes whole entry sets, a megabyte and more for a large document).
MIN_FREE_BYTES = 4 * 2**20

_VERSION_TABLE = "alembic_version"  # Alembic's default, which migrations/env.py keeps
# The version table as Alembic creates it (alembic.runtime.migration.MigrationContext).
_VERSION = Table(
    _VERSION_TABLE, MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name=f"{_VERSION_TABLE}_pkc"),
)
# A migration file's identifiers, as Alembic's template writes them: `revision: str = "0001"`.
_HEADER = re.compile(
    r"^(revision|down_revision|branch_labels|depends_on)\s*(?::[^=\n]*)?=(.*)$", re.MULTILINE
)
# Tables an earlier migration made and a later one dropped: a start of an earlier release killed
# between the two left them in a half-made schema (0001 made "entries", 0002 replaced it).
_PAST_TABLES = ("entries",)
_PASSWORD = re.compile(r"(://[^:/@]*:).*@")  # the password of a URL make_url refused
# SQLite's primary result codes that mean this file cannot be used here, whatever is retried.
_SQLITE_CANNOT_WRITE = {3, 8, 14}  # SQLITE_PERM, SQLITE_READONLY (_DIRECTORY...), _CANTOPEN
_SQLITE_DAMAGED = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB


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
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        # What the user wrote, but whatever stands between "user:" and "@" is hidden.
        return _PASSWORD.sub(r"\1***@", url)


def is_sqlite(engine: Engine) -> bool:
    """Whether this is the embedded SQLite database."""
    return engine.dialect.name == "sqlite"


def in_memory(engine: Engine) -> bool:
    """Whether the database lives only in this engine (SQLite ``:memory:``)."""
    return is_sqlite(engine) and engine.url.database in (None, "", ":memory:")


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; ``postgresql://`` means psycopg 3, SQLite gets WAL and FKs."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"database_url: not a database URL: {redact(url)}") from None
    except ValueError:  # SQLAlchemy's int() of the port
        raise ConfigError(f"database_url: the port is not a number: {redact(url)}") from None
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ConfigError(f"database_url: port {parsed.port} is out of range: {redact(url)}")
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername.startswith("sqlite"):
        database = parsed.database
        if database and database != ":memory:":
            folder = Path(database).expanduser().parent
            if not folder.is_dir():
                raise ConfigError(f"database_url: folder {folder} does not exist")
        # A check uses its connection from worker threads, one at a time.
        kwargs.setdefault("connect_args", {"timeout": _SQLITE_BUSY, "check_same_thread": False})
    elif not parsed.drivername.startswith("postgresql"):
        raise ConfigError(f"database_url: unsupported database {parsed.drivername!r}")
    else:
        kwargs.setdefault("pool_pre_ping", True)
        connect_args = kwargs["connect_args"] = dict(kwargs.get("connect_args", {}))
        if "connect_timeout" not in parsed.query:
            connect_args.setdefault("connect_timeout", CONNECT_TIMEOUT)
        if "options" not in parsed.query:
            milliseconds = round(STATEMENT_TIMEOUT * 1000)
            connect_args.setdefault("options", f"-c statement_timeout={milliseconds}")
    try:
        engine = create_engine(parsed, **kwargs)
    except (ArgumentError, ImportError) as exc:
        raise ConfigError(f"database_url: {exc}") from None
    if is_sqlite(engine):
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # A new file (no page yet, before WAL writes the first) gives a prune's free pages back
    # to the file system (store.retention.give_back). Set on a file in use, the
    # pragma would wait for another connection's write.
    if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
        cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def refused(engine: Engine, exc: SQLAlchemyError, doing: str) -> ConfigError | StoreError:
    """The error to raise when the database refused ``doing``: for a SQLite file this process
    cannot use (not a database, damaged, not writable, in a folder it cannot write) a
    ConfigError that names the file and what to do about it, for anything else a StoreError."""
    where = redact(str(engine.url))
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlite_errorcode", None) if is_sqlite(engine) else None
    if code is not None:
        reason, path = _first_line(exc), engine.url.database
        if code & 0xFF in _SQLITE_DAMAGED:
            return ConfigError(
                f"database_url: {path} is not a usable SQLite database ({reason}): restore it "
                "from a backup, or point database_url at another file")
        if code & 0xFF in _SQLITE_CANNOT_WRITE:
            folder = Path(path).expanduser().resolve().parent if path else "its folder"
            return ConfigError(
                f"database_url: cannot write the SQLite database {path} ({reason}): the file "
                f"and its folder {folder} must be writable by this user")
    if doing == "reach":
        # The driver's own line tells a refused port from a missing database or host.
        return StoreError(f"database {where} is unreachable: {_first_line(exc)}")
    return StoreError(f"{doing} failed on {where}: {_first_line(exc)}")


def _first_line(exc: SQLAlchemyError) -> str:
    """The driver's message without SQLAlchemy's SQL and link lines."""
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [orig.__class__.__name__])[0]


def _alembic_config(engine: Engine) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str | None:
    """The newest migration this installation ships."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(migrations_dir()))
    return script.get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The migration the database is at, or None for an empty database."""
    from alembic.runtime.migration import MigrationContext

    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except SQLAlchemyError as exc:
        raise refused(engine, exc, "reach") from None


def upgrade(engine: Engine) -> None:
    """Apply every migration up to the newest (``db upgrade``), all in one transaction: a kill
    at any moment leaves the database as it was or at the newest schema, never between."""
    from alembic import command

    migrating = _transactional_sqlite(engine) if is_sqlite(engine) else engine
    if engine.dialect.name == "postgresql":
        # A migration's statement may rewrite a large table: no statement timeout for it.
        migrating = create_engine(engine.url, poolclass=NullPool, connect_args={
            "connect_timeout": CONNECT_TIMEOUT, "options": "-c statement_timeout=0"})
    try:
        command.upgrade(_alembic_config(migrating), "head")
    except SQLAlchemyError as exc:
        raise refused(engine, exc, "migration") from None
    finally:
        if migrating is not engine:
            migrating.dispose()


def _transactional_sqlite(engine: Engine) -> Engine:
    """An engine on the same SQLite file whose transactions hold DDL too.

    Python's sqlite3 module begins a transaction only before INSERT, UPDATE or DELETE, so a
    CREATE TABLE runs on its own and a migration killed halfway leaves half a schema (tables,
    no version row: every later start failed). SQLite itself has transactional DDL: here the
    driver is left in autocommit and every transaction is an explicit BEGIN, SQLAlchemy's
    recipe for SQLite. Only migrations use it: a check's long transaction keeps the driver's
    deferred start, which does not take a read snapshot it could not later write from.
    """
    migrating = make_engine(engine.url.render_as_string(hide_password=False),
                            poolclass=NullPool)

    @event.listens_for(migrating, "connect")
    def _autocommit_driver(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(migrating, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return migrating


def require_head(engine: Engine) -> None:
    """Raise SchemaError unless the schema is at the newest migration."""
    if _known_at_head(engine):
        return
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise SchemaError(
            f"database schema is at {current or 'nothing'}, this version needs {head}: "
            "run 'sitemap-monitor db upgrade'"
        )


def check_writable(engine: Engine, *, timeout: float) -> None:
    """Raise StoreError unless the database is at head and takes a write now (``/readyz``).

    The write is cheap and leaves nothing: a one-row ``UPDATE`` of the version table in a
    transaction rolled back. It needs the write lock, so a database locked by another writer
    (SQLite) or by a migration, read-only, or a standby fails it within ``timeout``. On SQLite
    a file system with less than ``MIN_FREE_BYTES`` free is full: a rolled-back write never
    reaches the disk, and the checks' writes would fail there.
    """
    require_head(engine)
    where = redact(str(engine.url))
    milliseconds = max(1, round(timeout * 1000))
    sqlite = is_sqlite(engine)
    try:
        with engine.connect() as connection:
            try:
                if sqlite:
                    connection.exec_driver_sql(f"PRAGMA busy_timeout = {milliseconds}")
                else:
                    connection.exec_driver_sql(f"SET LOCAL statement_timeout = {milliseconds}")
                    connection.exec_driver_sql(f"SET LOCAL lock_timeout = {milliseconds}")
                connection.execute(text(f"UPDATE {_VERSION_TABLE} SET version_num = version_num"))
            finally:
                connection.rollback()
                if sqlite:  # the pooled connection's own wait again
                    busy = round(_SQLITE_BUSY * 1000)
                    connection.exec_driver_sql(f"PRAGMA busy_timeout = {busy}")
                    connection.rollback()
    except SQLAlchemyError as exc:
        raise StoreError(f"database {where} cannot be written: {_first_line(exc)}",
                         public=f"the database cannot be written: {_public_reason(exc)}"
                         ) from None
    if sqlite and engine.url.database and engine.url.database != ":memory:":
        folder = Path(engine.url.database).expanduser().resolve().parent
        try:
            free = os.statvfs(folder)
        except OSError as exc:
            raise StoreError(f"database {where}: {folder}: {exc.strerror}",
                             public=f"the database's folder: {exc.strerror}") from None
        if free.f_bavail * free.f_frsize < MIN_FREE_BYTES:
            raise StoreError(f"database {where} cannot be written: its file system is full "
                             f"({free.f_bavail * free.f_frsize} bytes free)",
                             public="the database cannot be written: its file system is full")


def _public_reason(exc: SQLAlchemyError) -> str:
    """Why a write failed, without the file, host or user a driver's message may name: SQLite's
    messages name none; of PostgreSQL's, only the server's own primary message (a lock
    timeout, a read-only server), a connection that failed is said so."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, sqlite3.Error):
        return _first_line(exc)
    diag = getattr(orig, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if getattr(orig, "sqlstate", None) and primary:
        return str(primary)
    return "no connection to the database server"


def bring_to_head(engine: Engine) -> None:
    """Make the schema the newest this installation ships: nothing to do when it is, the
    whole schema at once for an empty database (``create_schema``), else the migrations.

    A database an earlier release left half made (a start killed while it created the schema:
    tables and no version, or a version behind the tables made, no row in any of them) is
    made again; any other such database is refused with a message that says so."""
    if _known_at_head(engine) or create_schema(engine):
        return
    current = current_revision(engine)
    if current is None:
        _remake_half_made(engine, "no schema version", "restore it from a backup, or "
                          "'sitemap-monitor db upgrade' after stamping its revision with alembic")
        if create_schema(engine):
            return
    if current == head_revision():
        return
    try:
        upgrade(engine)
    except StoreError as exc:
        if current is None or isinstance(exc, SchemaError):
            raise
        # Earlier releases migrated SQLite outside any transaction: one killed in a
        # migration left its version behind the tables it had made, and this one fails.
        _remake_half_made(engine, f"a migration from {current} that fails ({exc})",
                          "restore it from the backup taken before the upgrade")
        if not create_schema(engine):
            raise


def _remake_half_made(engine: Engine, why: str, fix: str) -> None:
    """Drop the tables of a schema that was never finished, if they are ours and empty;
    else raise SchemaError saying ``why`` the schema cannot be used as it is."""
    from monitor.store.schema import metadata

    ours = set(metadata.tables) | set(_PAST_TABLES) | {_VERSION_TABLE}
    try:
        with engine.begin() as connection:
            found = set(inspect(connection).get_table_names())
            if not found <= ours:
                raise SchemaError(
                    f"database {redact(str(engine.url))} holds tables that are not "
                    f"sitemap-monitor's ({', '.join(sorted(found - ours))}) and {why}: "
                    "point database_url at a database of its own")
            for name in sorted(found - {_VERSION_TABLE}):
                count = connection.execute(text(f'SELECT count(*) FROM "{name}"')).scalar()
                if count:
                    raise SchemaError(
                        f"database {redact(str(engine.url))} has data and {why} "
                        f"(table {name}): {fix}")
            for name in _PAST_TABLES:  # first: they refer to the tables of today
                if name in found:
                    connection.execute(text(f'DROP TABLE "{name}"'))
            for table in reversed(metadata.sorted_tables):
                if table.name in found:
                    table.drop(connection)
            if _VERSION_TABLE in found:
                _VERSION.drop(connection)
    except SQLAlchemyError as exc:
        raise refused(engine, exc, "remaking a half-made schema") from None


def create_schema(engine: Engine) -> bool:
    """Give an empty database the newest schema in one transaction, without Alembic, and say
    so; False (nothing done) for a database with any table, or migration files whose head
    cannot be read as text: ``upgrade`` is for those.

    This is Alembic's recipe for a database built from scratch: the models' ``create_all``,
    then the version table stamped with the head. The migrations build the same schema (their
    test holds them to the models with Alembic's autogenerate), and an empty database has no
    data for them to move. Importing Alembic and running every migration took 0.14 s of a
    first check's start; this takes 0.01 s.
    """
    from monitor.store.schema import metadata  # here: the other paths need no models

    try:
        with engine.begin() as connection:
            if inspect(connection).get_table_names():
                return False
            head = _plain_head()
            if head is None:
                return False
            metadata.create_all(connection)
            _VERSION.create(connection)
            connection.execute(_VERSION.insert().values(version_num=head))
    except SQLAlchemyError as exc:
        raise refused(engine, exc, "creating the schema") from None
    return True


def _known_at_head(engine: Engine) -> bool:
    """True when, without Alembic, the database is surely at head; False means "ask Alembic"."""
    head = _plain_head()
    if head is None:
        return False
    try:
        with engine.connect() as connection:
            # Alembic's own test for the table (default schema), so an empty database, where
            # the query would fail, never sends it.
            if not inspect(connection).has_table(_VERSION_TABLE):
                return False
            stored = connection.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}"))
            return stored.scalars().all() == [head]
    except SQLAlchemyError as exc:
        raise refused(engine, exc, "reach") from None


def _plain_head() -> str | None:
    """The installation's head read without Alembic, or None: Alembic is to be asked."""
    try:
        return _shipped_head(migrations_dir() / "versions")
    except SchemaError:
        return None  # no migrations here: Alembic's path reports it, as it always has


def _shipped_head(versions: Path) -> str | None:
    """The head of the migration files in ``versions`` read as text, or None unless plain.

    Plain: every file names its revision and down_revision as string literals (or None) and has
    no branch labels or dependencies, and the revisions form one chain. Anything else is left to
    Alembic, which imports the files.
    """
    try:
        files = [f for f in versions.iterdir()
                 if f.suffix == ".py" and not f.name.startswith((".#", "__init__"))]
        sources = [f.read_text(encoding="utf-8") for f in files]
    except (OSError, UnicodeDecodeError):
        return None
    parents: dict[str, str | None] = {}
    for source in sources:
        header: dict[str, object] = {}
        for match in _HEADER.finditer(source):
            name, value = match.groups()
            if name in header:
                return None
            try:
                header[name] = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                return None
        revision, parent = header.get("revision"), header.get("down_revision", ...)
        if (not isinstance(revision, str) or not (parent is None or isinstance(parent, str))
                or header.get("branch_labels") is not None
                or header.get("depends_on") is not None or revision in parents):
            return None
        parents[revision] = parent
    heads = set(parents) - set(parents.values())
    if len(heads) != 1:
        return None
    head = heads.pop()
    step: str | None = head
    for _ in parents:  # the chain from the head down must hold every file, once
        step = parents.get(step, "") if step is not None else ""
    return head if step is None else None
