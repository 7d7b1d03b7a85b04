"""``create_app``: the FastAPI application, built from ``Settings`` (nothing at import time).

Routes live under ``/api/v1`` (OpenAPI at ``/openapi.json``); the dashboard's static files, where
they are installed, at ``/``. Every error answers ``{"detail": "<what is wrong>"}``; a database
that is down answers 503, and the engine's connection checks let the API recover by itself.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from celery import Celery
from fastapi import Depends, FastAPI, HTTPException, Request, params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from kloom import __version__
from kloom.db import create_db_engine, session_factory
from kloom.settings import Settings
from services.worker import hardening
from services.worker.celery_app import create_celery_app

from . import API_PREFIX
from .metrics import LatencyMiddleware, Metrics, record_route
from .routes import batches, dashboard_data, health, jobs, kb, keys, metrics, workers

log = logging.getLogger(__name__)

#: Room for the form fields around an uploaded file.
_FORM_OVERHEAD = 64 * 1024


def create_app(settings: Settings | None = None, *, celery: Celery | None = None) -> FastAPI:
    """The API for ``settings`` (default: from the environment)."""
    settings = settings or Settings()
    # The API's environment holds the admin key and the database URL; ranks may share its user.
    hardening.protect_process()
    engine = create_db_engine(settings.db_url)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        engine.dispose()

    app = FastAPI(
        title="kloom",
        version=__version__,
        description="Submit multi-GPU workloads, follow the agents' steps, fetch the fastest correct kernel.",
        openapi_url="/openapi.json",
        lifespan=lifespan,
        dependencies=[Depends(record_route)],
    )
    if celery is None:
        celery = create_celery_app(settings)
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = session_factory(engine)
    app.state.celery = celery
    app.state.metrics = Metrics(app.state)

    for module in (jobs, batches, workers, keys, health, metrics, kb, dashboard_data):
        app.include_router(module.router, prefix=API_PREFIX)
    # Probes (load balancers, Prometheus) expect these at the root too.
    app.include_router(health.router, include_in_schema=False)
    app.include_router(metrics.router, include_in_schema=False)
    _add_error_handlers(app)
    app.add_middleware(BodySizeLimit, limit=settings.max_upload_bytes + _FORM_OVERHEAD)
    app.add_middleware(LatencyMiddleware, metrics=app.state.metrics)

    if settings.dashboard_dir.is_dir():
        app.mount("/", StaticFiles(directory=settings.dashboard_dir, html=True), name="dashboard")
    else:

        @app.get("/", include_in_schema=False)
        def root() -> RedirectResponse:
            return RedirectResponse("/docs")

    return app


def _takes_form(request: Request) -> bool:
    """Whether the matched endpoint reads its body as form fields (a file upload, say)."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    return any(isinstance(p.field_info, params.Form) for p in getattr(dependant, "body_params", None) or [])


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # One readable sentence, plus the structured list; never the input itself (it may be a whole file).
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
        text = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'request'}: {e['msg']}" for e in errors)
        if _takes_form(request) and "json" in request.headers.get("content-type", ""):
            # Form fields read from a JSON body all look missing: say what the endpoint takes instead.
            text = f"this endpoint takes form fields (multipart/form-data, e.g. curl -F world_size=2), not a JSON body ({text})"
        return JSONResponse({"detail": f"invalid request: {text}", "errors": errors}, status_code=422)

    @app.exception_handler(OperationalError)
    @app.exception_handler(PoolTimeout)
    async def database_down(_request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable: %s", type(exc).__name__)
        return JSONResponse(
            {"detail": "the database is unavailable; try again shortly (nothing was changed)"},
            status_code=503,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(OverflowError)
    async def out_of_range(request: Request, exc: OverflowError) -> JSONResponse:
        # A number the database driver cannot bind (SQLite: past 64 bits). Answered here, not by
        # the catch-all: a 500 from there ends the keep-alive connection too.
        log.info("out-of-range number in %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": f"a number in the request is out of range: {exc}"}, status_code=422)

    @app.exception_handler(DataError)
    async def unstorable_value(request: Request, exc: DataError) -> JSONResponse:
        # A value the client sent that PostgreSQL cannot hold or compare (a NUL character, a
        # number past its column's range): the request's fault, and its transaction is undone.
        reason = str(getattr(exc.orig, "args", [""])[0] or type(exc.orig).__name__).splitlines()[0][:200]
        log.info("unstorable value in %s %s: %s", request.method, request.url.path, reason)
        return JSONResponse({"detail": f"a value in the request cannot be used: {reason}"}, status_code=422)

    @app.exception_handler(DBAPIError)
    async def database_error(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return await database_down(request, exc)
        log.error("database error on %s %s: %s", request.method, request.url.path, type(exc.orig).__name__)
        return JSONResponse({"detail": "the database refused the request (see the server log)"}, status_code=500)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": f"internal error ({type(exc).__name__}); see the server log"}, status_code=500)


class BodySizeLimit:
    """Refuses request bodies over ``limit`` bytes with 413, by their Content-Length or as they stream."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._refuse(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # An HTTPException, so that the body parser passes it on as it is.
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, counted, send)

    def _message(self) -> str:
        return f"the request body is over the size limit of {self.limit} bytes"

    async def _refuse(self, scope, receive, send) -> None:
        await JSONResponse({"detail": self._message()}, status_code=413)(scope, receive, send)
