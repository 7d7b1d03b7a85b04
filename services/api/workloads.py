"""Workloads of submissions: an uploaded file or a suite workload, checked statically (never run)
before anything is written. Every refusal is an ``HTTPException`` whose message says what is wrong."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fastapi import HTTPException, UploadFile, status

from kloom import suite
from kloom.settings import Settings
from kloom.workload import WorkloadError, WorkloadInfo, decode_source, inspect_workload, read_source

from .schemas import JobSettings

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_GPU_COUNT = re.compile(r"x([0-9]+)$")


@dataclass(frozen=True)
class Workload:
    info: WorkloadInfo
    source: str


def _unprocessable(message: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, message)


def from_upload(upload: UploadFile, settings: Settings) -> Workload:
    """An uploaded workload file, size-limited, UTF-8, and of the workload format."""
    limit = settings.max_upload_bytes
    raw = upload.file.read(limit + 1)
    if len(raw) > limit:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE, f"the workload file is over the size limit of {limit} bytes"
        )
    label = Path(upload.filename or "workload.py").name or "workload.py"
    try:
        text = decode_source(raw, label)
        return Workload(inspect_workload(label, text), text)
    except WorkloadError as exc:
        raise _unprocessable(f"malformed workload: {exc}") from None


def suite_root(name: str, settings: Settings) -> Path:
    """The directory of a named suite: ``kloom`` (built in) or one under ``suites_dir``."""
    known = ["kloom"]
    if settings.suites_dir and settings.suites_dir.is_dir():
        known += sorted(p.name for p in settings.suites_dir.iterdir() if p.is_dir() and _NAME.match(p.name))
    if name in ("kloom", "builtin"):
        return suite.resolve_suite(None)
    if _NAME.match(name) and name in known:
        return settings.suites_dir / name
    raise _unprocessable(f"unknown suite {name!r} (known: {', '.join(known)})")


def from_suite(name: str, settings: Settings, suite_name: str = "kloom") -> Workload:
    """A workload of a suite, by its name (never by path: users do not read the server's files)."""
    root = suite_root(suite_name, settings)
    for info in suite.workloads(root):
        if info.name == name:
            return Workload(info, read_source(info.path))
    known = ", ".join(sorted(w.name for w in suite.workloads(root))) or "none"
    raise _unprocessable(f"no workload named {name!r} in the {suite_name} suite (known: {known})")


def check_settings(info: WorkloadInfo, job: JobSettings, settings: Settings) -> None:
    """World size, device and limits that this workload and this service accept."""
    if job.world_size > settings.max_world_size:
        raise _unprocessable(f"world size {job.world_size} is over this service's limit of {settings.max_world_size}")
    try:
        info.check_world_size(job.world_size)
    except WorkloadError as exc:
        raise _unprocessable(f"unsupported world size: {exc}") from None
    gpus = _GPU_COUNT.search(job.device_kind)
    if gpus and job.world_size > int(gpus.group(1)):
        raise _unprocessable(
            f"device kind {job.device_kind} has {gpus.group(1)} GPU(s); world size {job.world_size} needs one per rank"
        )
    if job.max_iters > settings.max_iters:
        raise _unprocessable(f"max_iters {job.max_iters} is over this service's limit of {settings.max_iters}")
