"""Dependencies of the routes, as ``Annotated`` aliases: ``SessionDep``, ``CurrentKey``, ``AdminKey``,
``SettingsDep``, ``CeleryDep``.

A key comes as ``Authorization: Bearer <key>``, ``X-API-Key: <key>``, or the ``kloom_key`` cookie
(which lets the dashboard's EventSource follow an event stream; browsers send no headers there).
Never in the query string: URLs end up in access logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from celery import Celery
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyCookie, APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from kloom.settings import Settings
from services.db import keys
from services.db.models import ApiKey, Job

_bearer = HTTPBearer(auto_error=False, description="An API key as a bearer token.")
_header = APIKeyHeader(name="X-API-Key", auto_error=False)
_cookie = APIKeyCookie(name="kloom_key", auto_error=False)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


def get_celery(request: Request) -> Celery:
    return request.app.state.celery


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
CeleryDep = Annotated[Celery, Depends(get_celery)]


def get_current_key(
    session: SessionDep,
    settings: SettingsDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header: Annotated[str | None, Depends(_header)],
    cookie: Annotated[str | None, Depends(_cookie)],
) -> ApiKey:
    """The caller's live API key, or 401."""
    presented = (bearer.credentials if bearer else None) or header or cookie
    if not presented:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "an API key is required: send it as 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    row = keys.lookup(session, presented, settings.admin_key_value())
    # End the lookup's transaction: on SQLite every transaction holds the write lock, and a route
    # may open another session (metrics, event streams) before it uses this one again.
    session.commit()
    if row is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    return row


CurrentKey = Annotated[ApiKey, Depends(get_current_key)]


def get_admin_key(key: CurrentKey) -> ApiKey:
    if not key.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this needs an admin key")
    return key


AdminKey = Annotated[ApiKey, Depends(get_admin_key)]


def owned_job(session: Session, key: ApiKey, job_id: str) -> Job:
    """The key's job, or 404: another key's job is indistinguishable from a missing one."""
    job = session.get(Job, job_id)
    if job is None or job.owner_key_id != key.id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id!r}")
    return job
