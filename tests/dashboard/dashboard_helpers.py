"""What the browser tests share: where Chromium is and how it starts, screen sizes, the workloads
of the test suite, and a handle on the running service."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import httpx

from service_helpers import stop_process

CHROMIUM = os.environ.get("KLOOM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
LAPTOP = {"width": 1366, "height": 768}
DESKTOP = {"width": 1920, "height": 1080}

#: Workloads of the test suite ``tiny``: one any candidate gets right, and one whose reference
#: depends on how often it ran, so that a copy of it disagrees (a real ``incorrect`` step).
DOUBLE = '''
"""Double and sum over ranks: a tiny correct-by-construction workload for the dashboard tests."""
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [1, 2]
FAMILY = "collectives"
DESCRIPTION = "Double a small tensor and all-reduce it."


class Model(nn.Module):
    def forward(self, x):
        out = x * 2
        dist.all_reduce(out)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(8, 16)]


def roofline(world_size, inputs):
    n, e = inputs[0].numel(), inputs[0].element_size()
    return {"flops": n, "hbm_bytes": 2 * n * e, "link_bytes": 2 * (world_size - 1) / world_size * n * e, "dtype": "fp32"}
'''

STATEFUL = '''
"""A reference whose output counts its own calls: every copy of it disagrees with the original."""
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [2]
FAMILY = "other"
DESCRIPTION = "Adds how often it ran; no candidate can match it."

_CALLS = [0]


class Model(nn.Module):
    def forward(self, x):
        _CALLS[0] += 1
        out = x + _CALLS[0]
        dist.all_reduce(out)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(8, 16)]
'''


@dataclass
class Service:
    """The running ``kloom up``: its address, admin key and process."""

    base: str
    admin_key: str
    data_dir: Path
    log: Path
    proc: object

    def api(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=f"{self.base}/api/v1", headers={"Authorization": f"Bearer {key or self.admin_key}"}, timeout=30)

    def new_key(self, name: str) -> str:
        with self.api() as api:
            r = api.post("/keys", json={"name": name})
            assert r.status_code == 201, r.text
            return r.json()["key"]

    def stop(self) -> None:
        stop_process(self.proc)
