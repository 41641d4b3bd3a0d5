"""The database: schema (the Alembic target) and the queries of every stage."""
