"""Alembic migrations of the service and knowledge-base tables (one history)."""
