"""Databases for the knowledge-base tests: a PostgreSQL database of their own on the local server
(``KLOOM_TEST_PG_ADMIN`` names the database used to create and drop them)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import psycopg
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

PG_ADMIN = os.environ.get("KLOOM_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class KBDatabase:
    url: str
    engine: Engine
    sessions: sessionmaker[Session]
    name: str = ""  # the PostgreSQL database's name


def create_pg_database(template: str | None = None) -> str:
    """A new, uniquely named database (a copy of ``template`` if given)."""
    name = f"kb_test_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    return name


def drop_pg_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_url(name: str) -> str:
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return f"{base}/{name}"
