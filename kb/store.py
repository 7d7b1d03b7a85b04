"""The knowledge base's entry points: ``ingest`` (``ingest.py``) fills it, ``advice``
(``advice.py``) is what the planner reads, and ``search``, ``get_kernel``, ``get_workload`` and
``get_strategy`` (here) serve the CLI and the REST API.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, defer, selectinload

from .embeddings import Embedder, LexicalEmbedder, cosine, sentence_embedder
from .models import KBKernel, KBStrategy, KBWorkload
from .signature import Signature


@dataclass
class KernelMatch:
    kernel: KBKernel
    score: float

def kernel_text(kernel: KBKernel) -> str:
    """What text search matches a kernel on: its workload, strategy, structure and rationale."""
    sig = Signature.from_dict(kernel.signature)
    return " ".join([kernel.workload_name, kernel.strategy, sig.text(), kernel.rationale])


def search(
    session: Session,
    text: str | None = None,
    family: str | None = None,
    collective: str | None = None,
    limit: int = 20,
    *,
    embedder: Embedder | None = None,
) -> list[KernelMatch]:
    """Kernels that match: by family and collective exactly, by ``text`` ranked by relevance
    (the local sentence model when one is installed, else word overlap); without text, the
    fastest first. Ties are broken by id, so that equal databases give equal answers."""
    stmt = select(KBKernel).options(defer(KBKernel.evaluation))  # the full records stay on disk until asked for
    if family:
        stmt = stmt.where(KBKernel.family == family)
    if collective:
        stmt = stmt.where(KBKernel.collectives.like(f"% {collective} %"))
    if not text:
        rows = session.scalars(stmt.order_by(KBKernel.speedup.desc(), KBKernel.id).limit(limit)).all()
        return [KernelMatch(k, k.speedup) for k in rows]
    rows = session.scalars(stmt.order_by(KBKernel.id)).all()
    if not rows:
        return []
    embedder = embedder or sentence_embedder() or LexicalEmbedder()
    query, *docs = embedder.embed([text] + [kernel_text(k) for k in rows])
    scored = [KernelMatch(k, round(cosine(query, d), 6)) for k, d in zip(rows, docs)]
    if not embedder.semantic:
        scored = [m for m in scored if m.score > 0]  # no shared word: no match
    scored.sort(key=lambda m: (-m.score, -m.kernel.speedup, m.kernel.id))
    return scored[:limit]


def parse_id(public_id: str | int, prefix: str) -> int | None:
    """``k12``, ``12`` or 12 -> 12 (for kernels; ``s`` for strategies); None if malformed."""
    text = str(public_id).strip().lower()
    if text.startswith(prefix):
        text = text[len(prefix):]
    # ASCII digits only ("²" is a digit to str.isdigit), and within the id column's range.
    if not (text.isascii() and text.isdigit()) or int(text) >= 2**31:
        return None
    return int(text)


def get_kernel(session: Session, kernel_id: str | int) -> KBKernel | None:
    key = parse_id(kernel_id, "k")
    return session.get(KBKernel, key) if key is not None else None


def get_workload(session: Session, sha256: str) -> KBWorkload | None:
    return session.get(KBWorkload, sha256)


def get_strategy(session: Session, strategy_id: str | int) -> KBStrategy | None:
    key = parse_id(strategy_id, "s")
    if key is None:
        return None
    return session.scalars(
        select(KBStrategy).where(KBStrategy.id == key).options(selectinload(KBStrategy.evidence))
    ).one_or_none()


def list_strategies(session: Session, family: str | None = None, name: str | None = None, limit: int = 50) -> list[KBStrategy]:
    """Strategies by number of wins, then fewest losses."""
    stmt = select(KBStrategy)
    if family:
        stmt = stmt.where(KBStrategy.family == family)
    if name:
        stmt = stmt.where(KBStrategy.name == name)
    stmt = stmt.order_by(KBStrategy.wins.desc(), KBStrategy.losses, KBStrategy.id).limit(limit)
    return list(session.scalars(stmt).all())
