"""Opening the knowledge base's database, and the view of it that the optimization loop uses.

The URL is kloom's (``kloom.settings``: ``KLOOM_DATABASE_URL``, else the embedded SQLite file);
the schema is brought up to date by Alembic on opening, never by ``create_all``.
"""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from agents.records import Trajectory
from agents.roles import KBAdvice
from kloom.db import create_db_engine, session_factory, upgrade
from kloom.settings import Settings

from . import advice as kb_advice, ingest as kb_ingest
from .signature import environment_of


def database_url(url: str | None = None) -> str:
    """``url`` if given, else the one kloom's settings name."""
    if url:
        return url
    return Settings().db_url


def open_kb(url: str | None = None, *, migrate: bool = True) -> tuple[Engine, sessionmaker[Session]]:
    """An engine and session factory for the knowledge base, its schema upgraded first."""
    url = database_url(url)
    if migrate:
        upgrade(url)
    engine = create_db_engine(url)
    return engine, session_factory(engine)


class KnowledgeBaseAdapter:
    """The loop's ``KnowledgeBase`` (``agents.loop``): advice before planning, ingestion when the
    job finishes, each in a session of its own."""

    def __init__(self, sessions: sessionmaker[Session]):
        self.sessions = sessions

    @classmethod
    def from_settings(cls, url: str | None = None) -> "KnowledgeBaseAdapter":
        """The knowledge base in kloom's database (``url`` overrides the settings), migrated."""
        return cls(open_kb(url)[1])

    def advice(self, trajectory: Trajectory) -> KBAdvice:
        gpu = str(environment_of(trajectory).get("gpu") or "")
        source = kb_ingest.read_workload_source(trajectory)
        with self.sessions() as session:
            return kb_advice.advice(
                session, trajectory.analysis, trajectory.workload_sha256, trajectory.job.device, gpu, workload_source=source
            )

    def ingest(self, trajectory: Trajectory) -> kb_ingest.IngestReport:
        with self.sessions() as session:
            return kb_ingest.ingest(session, trajectory)
