"""The one clock: now in UTC, as a timezone-aware datetime (what the database columns hold), and
``timestamp``, the same instant as the ISO text that the JSON records carry."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def timestamp(when: dt.datetime | None = None) -> str:
    """``when`` (default: now) as ISO 8601 text in UTC, to the millisecond."""
    return (when or utcnow()).astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")
