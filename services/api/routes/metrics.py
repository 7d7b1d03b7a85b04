"""``/metrics``: Prometheus text format (needs a key, like everything but ``/health``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..deps import CurrentKey

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request, _key: CurrentKey) -> Response:
    """Jobs by state, steps, queue depth, live workers and request latency."""
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
