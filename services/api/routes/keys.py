"""API keys (admin only): create (the key is shown once), list, revoke."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select

from services.db import keys

from ..deps import AdminKey, SessionDep
from ..schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyPublic, ApiKeysPublic

router = APIRouter(prefix="/keys", tags=["keys"])


@router.post("", status_code=status.HTTP_201_CREATED)
def create_key(data: ApiKeyCreate, _admin: AdminKey, session: SessionDep) -> ApiKeyCreated:
    row, key = keys.create_key(session, data.name, admin=data.admin)
    session.commit()
    return ApiKeyCreated(**ApiKeyPublic.model_validate(row).model_dump(), key=key)


@router.get("")
def list_keys(_admin: AdminKey, session: SessionDep) -> ApiKeysPublic:
    rows = session.scalars(select(keys.ApiKey).order_by(keys.ApiKey.created_at)).all()
    return ApiKeysPublic(data=[ApiKeyPublic.model_validate(r) for r in rows], count=len(rows))


@router.delete("/{key_id}")
def revoke_key(key_id: str, _admin: AdminKey, session: SessionDep) -> ApiKeyPublic:
    """Revoke a key: it stops working at once; its jobs stay."""
    row = keys.revoke(session, key_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no key {key_id!r}")
    session.commit()
    return ApiKeyPublic.model_validate(row)
