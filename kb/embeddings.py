"""Text vectors for searching the knowledge base.

Two embedders share one small interface: a lexical one (hashed word and sub-word counts, always
available, deterministic) and, only when ``sentence_transformers`` is installed *and* the model
is already on disk, a sentence-embedding model. Loading never downloads: the hub is forced
offline and ``local_files_only`` is set, so a missing model falls back to the lexical embedder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import re
from collections import Counter
from functools import lru_cache
from typing import Protocol

#: The model tried when none is configured (``KLOOM_KB_EMBEDDING_MODEL``); used only if cached.
DEFAULT_SENTENCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DIM = 1024


class Embedder(Protocol):
    name: str
    semantic: bool  # True for a language model, False for word matching

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One L2-normalised vector per text."""


def tokens(text: str) -> list[str]:
    """Lower-case words (dots, colons and dashes separate them), with compound names split too:
    ``dist.all_gather_into_tensor`` gives ``dist``, ``all_gather_into_tensor``, ``all``, ``gather``,
    ``into``, ``tensor``."""
    out = []
    for word in re.findall(r"[a-z0-9_]+", text.lower()):
        word = word.strip("_")
        parts = [p for p in word.split("_") if p]
        if word:
            out.append(word)
        if len(parts) > 1:
            out.extend(parts)
    return out


def _normalise(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec] if norm else vec


class LexicalEmbedder:
    """Hashed bag of words: texts that share words (and parts of compound names) score high."""

    name = "lexical"
    semantic = False

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            vec = [0.0] * _DIM
            for token, count in Counter(tokens(text)).items():
                slot = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "little") % _DIM
                vec[slot] += 1.0 + math.log(count)
            vectors.append(_normalise(vec))
        return vectors


class SentenceEmbedder:
    """A sentence-transformers model loaded from the local cache only."""

    semantic = True

    def __init__(self, model_name: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a load must never reach the network
        from sentence_transformers import SentenceTransformer  # optional: sentence-transformers, after HF_HUB_OFFLINE is set

        self.name = model_name
        self._model = SentenceTransformer(model_name, local_files_only=True, device="cpu")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in self._model.encode(texts, normalize_embeddings=True)]


@lru_cache(maxsize=1)
def sentence_embedder() -> SentenceEmbedder | None:
    """The configured sentence model if it is installed and cached locally, else None."""
    if importlib.util.find_spec("sentence_transformers") is None:
        return None
    model = os.environ.get("KLOOM_KB_EMBEDDING_MODEL", DEFAULT_SENTENCE_MODEL)
    try:
        return SentenceEmbedder(model)
    except Exception:  # not cached, or a broken install: search still works lexically
        return None


def default_embedder() -> Embedder:
    """The best embedder available here without a download."""
    return sentence_embedder() or LexicalEmbedder()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))
