"""Alembic environment: the URL comes from the app (or SITEMAP_MONITOR_DATABASE_URL).

On PostgreSQL a transaction-level advisory lock serialises migrations, so two pods (or two
migration Jobs) cannot migrate at once.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import text

from monitor.store.db import make_engine
from monitor.store.schema import metadata

LOCK_ID = 0x5173_4D4F  # "sitemap-monitor" migrations


def run() -> None:
    """Run migrations online against the engine the app passed, or the configured URL."""
    config = context.config
    engine = config.attributes.get("engine")
    if engine is None:
        url = os.environ.get("SITEMAP_MONITOR_DATABASE_URL") or config.get_main_option(
            "sqlalchemy.url"
        ) or "sqlite:///./sitemap-monitor.db"
        engine = make_engine(url)
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": LOCK_ID})
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
            # Every migration in the one transaction the connection is in: on SQLite too (see
            # monitor.store.db._transactional_sqlite), a kill leaves no half-made schema.
            transactional_ddl=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run 'sitemap-monitor db upgrade'")
run()
