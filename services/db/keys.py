"""API keys: made here, shown once, stored as their SHA-256 only."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kloom.clock import utcnow

from .models import ApiKey

KEY_PREFIX = "kl_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_key(session: Session, name: str, *, admin: bool = False, key: str | None = None) -> tuple[ApiKey, str]:
    """A new key row and the key itself (the only time it exists in the clear)."""
    key = key or new_key()
    row = ApiKey(name=name, key_hash=hash_key(key), prefix=key[:10], is_admin=admin)
    session.add(row)
    session.flush()
    return row, key


def lookup(session: Session, key: str, admin_key: str | None = None) -> ApiKey | None:
    """The live key row for ``key``; the environment's admin key gets (and keeps) a row of its own
    so that it can own jobs like any key."""
    digest = hash_key(key)
    row = session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))
    if row is not None:
        return None if row.revoked_at is not None else row
    if admin_key and hmac.compare_digest(key, admin_key):
        try:
            row, _ = create_key(session, "admin (environment)", admin=True, key=key)
            session.commit()
        except IntegrityError:  # a concurrent first request made the row
            session.rollback()
            row = session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))
        return row if row is not None and row.revoked_at is None else None
    return None


def revoke(session: Session, key_id: str) -> ApiKey | None:
    row = session.get(ApiKey, key_id)
    if row is None:
        return None
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return row
