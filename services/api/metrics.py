"""Prometheus metrics of one app (its own registry, no process-wide state): request latency,
measured by a middleware, and jobs by state, steps, queue depth and live workers, read from the
database and the broker at each scrape."""

from __future__ import annotations

import datetime as dt
import time

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.requests import Request

from agents.records import JOB_STATES
from kloom.clock import utcnow
from services.api import API_PREFIX
from services.db.models import Job, StepRecord, Worker
from services.worker.broker import queue_depths

ROUTE_KEY = "kloom.route"
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class StoreCollector(Collector):
    """Gauges computed from the database and the broker when Prometheus scrapes."""

    def __init__(self, app_state):
        self.state = app_state

    def collect(self):
        settings = self.state.settings
        cutoff = utcnow() - dt.timedelta(seconds=settings.worker_dead_after_s)
        with self.state.sessions() as session:
            by_state = dict(session.execute(select(Job.state, func.count()).group_by(Job.state)).all())
            steps = session.scalar(select(func.count()).select_from(StepRecord))
            workers = session.scalars(select(Worker).where(Worker.last_heartbeat >= cutoff, Worker.stopped_at.is_(None))).all()
            queued_kinds = set(session.scalars(select(Job.device_kind).where(Job.state == "queued").distinct()))
        jobs = GaugeMetricFamily("kloom_jobs", "Jobs by state.", labels=["state"])
        for state in JOB_STATES:
            jobs.add_metric([state], by_state.get(state, 0))
        yield jobs
        yield CounterMetricFamily("kloom_steps", "Steps recorded.", value=steps)
        yield GaugeMetricFamily("kloom_workers_alive", "Workers with a recent heartbeat.", value=len(workers))
        queues = sorted(queued_kinds | {q for w in workers for q in w.queues})
        depth = GaugeMetricFamily("kloom_queue_depth", "Tasks waiting in each device kind's queue.", labels=["queue"])
        for queue, count in queue_depths(self.state.celery, queues).items():
            depth.add_metric([queue], count)
        yield depth


class Metrics:
    def __init__(self, app_state):
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "kloom_http_request_duration_seconds",
            "Time to the first byte of each response, by route.",
            ["method", "route", "status"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(StoreCollector(app_state))


class LatencyMiddleware:
    """Times each request to the start of its response (an event stream counts until it opens),
    labelled by route template (``record_route`` fills it in) so that ids do not make a series each."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        # Routers copy the scope on the way down; this dict is shared by every copy.
        seen = scope[ROUTE_KEY] = {"route": "unmatched"}

        async def timed_send(message):
            if message["type"] == "http.response.start":
                elapsed = time.perf_counter() - started
                self.metrics.latency.labels(scope["method"], seen["route"], str(message["status"])).observe(elapsed)
            await send(message)

        await self.app(scope, receive, timed_send)


def record_route(request: Request) -> None:
    """An app-wide dependency: tells ``LatencyMiddleware`` which route template answered."""
    seen = request.scope.get(ROUTE_KEY)
    route = request.scope.get("route")
    if seen is not None and route is not None:
        # Routes of included routers know their path without the prefix they were included at.
        path = getattr(route, "path", "other")
        seen["route"] = API_PREFIX + path if request.url.path.startswith(API_PREFIX + "/") and not path.startswith(API_PREFIX) else path
