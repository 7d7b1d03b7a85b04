"""Cancel and ``max_wall_s`` take effect during an evaluation (issue 20.6): a reference that hangs
while it is timed held the only worker for 663 s with ``max_wall_s=30`` and a cancel ignored. A
real ``kloom worker`` whose evaluator limits are far longer than the test runs a workload whose
reference hangs; the job ends ``stopped`` at its wall-time limit, or ``cancelled`` within seconds
of the user's cancel, with the reason, and the worker takes the next job."""

from __future__ import annotations

import datetime as dt

import pytest

from reliability_helpers import start_worker
from service_helpers import TINY_WORKLOAD, stop_process, submit, wait_for

HANGS = '''
import time
import torch
import torch.nn as nn

WORLD_SIZES = [1, 2]


class Model(nn.Module):
    def forward(self, x):
        time.sleep(3600)  # the reference hangs the first time it runs
        return x


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4, 4)]
'''

#: Limits of the evaluator itself, far past the test's patience: only the watch can end the job.
LONG_LIMITS = {"KLOOM_EVAL_CALL_TIMEOUT_S": "600", "KLOOM_EVAL_LOAD_TIMEOUT_S": "600", "KLOOM_EVAL_TIMING_TIMEOUT_S": "600"}


def _job(client, headers, job_id):
    return client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()


def _when(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


@pytest.mark.slow
def test_wall_time_and_cancel_stop_a_hanging_reference(settings, client, new_key, tmp_path):
    worker = start_worker(settings, tmp_path / "worker.log", **LONG_LIMITS)
    headers = new_key("limits")
    try:
        stopped = submit(client, headers, HANGS, "hangs.py", device_kind="cpu", max_wall_s=6).json()["id"]
        job = wait_for(lambda: (j := _job(client, headers, stopped))["state"] not in ("queued", "running") and j, 120, "the wall-time limit")
        assert job["state"] == "stopped" and "wall-time limit reached (6 s)" in job["stop_reason"], job
        # From its start: the worker's first job imports torch and starts its ranks on a busy
        # machine first; the evaluator alone would have waited 600 s.
        ran = (_when(job["finished_at"]) - _when(job["started_at"])).total_seconds()
        assert ran < 6 + 40, f"stopped {ran:.0f} s after it started"

        cancelled = submit(client, headers, HANGS, "hangs.py", device_kind="cpu").json()["id"]
        wait_for(lambda: _job(client, headers, cancelled)["state"] == "running", 60, "the second job to start")
        asked = client.post(f"/api/v1/jobs/{cancelled}/cancel", headers=headers)
        assert asked.status_code == 200, asked.text
        asked_at = _when(asked.json()["updated_at"])
        job = wait_for(lambda: (j := _job(client, headers, cancelled))["state"] not in ("queued", "running") and j, 60, "the cancel")
        assert job["state"] == "cancelled" and job["stop_reason"] == "cancelled by the user", job
        assert (_when(job["finished_at"]) - asked_at).total_seconds() < 10

        # The worker is free again: the next job runs to the end.
        after = submit(client, headers, TINY_WORKLOAD, device_kind="cpu").json()["id"]
        assert wait_for(lambda: (j := _job(client, headers, after))["state"] not in ("queued", "running") and j, 180, "the next job")["state"] == "succeeded"
    finally:
        stop_process(worker)
