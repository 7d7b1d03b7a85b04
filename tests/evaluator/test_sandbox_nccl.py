"""The rank sandbox on a GPU host, with torch alone (the GPU image has no service packages, so this
lives beside the evaluator's tests rather than the reliability ones): ranks in the service's
sandbox (an unprivileged user where the host runs this as root, a read-only view of the
filesystem with the temporary directories covered and a "data" directory hidden, the pool's own
/dev/shm, network and pid namespaces) still reach their GPUs and the driver, run NCCL between
each other, compile with Triton into their caches, and judge an honest candidate correct; the pool
says which boundaries held.

    python -m pytest -q -p no:cacheprovider tests/evaluator/test_sandbox_nccl.py   # 1 GPU or more
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch

from services.worker.evaluator import EvalSettings, Evaluator, sandbox

HERE = Path(__file__).parent
WORKLOADS, CANDIDATES = HERE / "workloads", HERE / "candidates"

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.gpu

#: A reference that looks around from inside the sandbox on the GPU, then reports (as its error).
PROBE = '''
import glob, json, os
import torch
import torch.distributed as dist
import torch.nn as nn
import triton
import triton.language as tl

WORLD_SIZES = [1, 2]


@triton.jit
def double(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n) * 2, mask=i < n)


def _try(fn):
    try:
        return "allowed:" + repr(fn())[:80]
    except BaseException as exc:
        return "refused:" + type(exc).__name__


class Model(nn.Module):
    def forward(self, x):
        y = x.clone()
        dist.all_reduce(y)  # NCCL across the pool's ranks
        out = torch.empty_like(y)  # Triton compiles into the pool's caches
        double[(triton.cdiv(y.numel(), 256),)](y, out, y.numel(), BLOCK=256)
        torch.cuda.synchronize()
        report = {{
            "uid": os.getuid(),
            "nccl": bool(torch.equal(y, x * dist.get_world_size())),
            "triton": bool(torch.equal(out, y * 2)),
            "devices": sorted(os.path.basename(p) for p in glob.glob("/dev/nvidia*")),
            "gpus": torch.cuda.device_count(),
            "shm": sorted(os.listdir("/dev/shm"))[:5],
            "processes": len([p for p in os.listdir("/proc") if p.isdigit()]),
            "hidden": _try(lambda: os.listdir({hidden!r}) or None),
            "write_etc": _try(lambda: open("/etc/kloom-probe", "w")),
            "caches": os.listdir(os.path.dirname(os.environ["TRITON_CACHE_DIR"])),
        }}
        raise RuntimeError("REPORT" + json.dumps(report))


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(1024)]
'''


def _service_settings(hidden: str, job: str, **overrides) -> EvalSettings:
    settings = EvalSettings.for_device("cuda", call_timeout_s=120.0, timing_budget_s=0.2, hidden_paths=[hidden], private_tmp=True,
                                       readable_paths=[job], cache_scope="gpu-sandbox-test", **overrides)
    return sandbox.for_service(settings)


@pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs")
def test_nccl_runs_inside_the_sandbox():
    # Isolation on whatever the environment says: this test is the check that it works with NCCL.
    settings = dataclasses.replace(EvalSettings.for_device("cuda", call_timeout_s=60.0, timing_budget_s=0.2), isolate_network=True)
    with Evaluator("cuda", settings) as evaluator:
        enforced = evaluator.pool(2).reference.isolation.enforced()  # the candidate's pool has the same sandbox
        result = evaluator.evaluate(WORKLOADS / "linear_allreduce.py", CANDIDATES / "correct.py", world_size=2)
    print(json.dumps(enforced, indent=1))
    assert result.correct, result.summary()
    if sandbox.platform().netns:
        assert enforced["network"].startswith("own namespace")


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")
def test_the_service_sandbox_keeps_gpus_nccl_and_triton_working():
    """As the service's worker runs ranks (``tasks.rank_settings``): the GPU, the driver, NCCL over
    the pool's /dev/shm and loopback, Triton compiling into the pool's caches, all inside (on two
    GPUs where there are two, else one rank on one)."""
    world = min(GPUS, 2)
    root = Path(tempfile.mkdtemp(prefix="kloom-gpu-sandbox-"))
    try:
        hidden, job = root / "data", root / "job"
        hidden.mkdir()
        (hidden / "admin_key").write_text("secret")
        job.mkdir()
        workload = job / "probe.py"
        workload.write_text(textwrap.dedent(PROBE.format(hidden=str(hidden))))
        settings = _service_settings(str(hidden), str(job))
        sandbox.share_with_ranks([str(root), str(job), str(workload)], settings)
        with Evaluator("cuda", settings) as evaluator:
            enforced = evaluator.pool(world).reference.isolation.enforced()
            probe = evaluator.baseline(workload, world_size=world)
            honest = evaluator.evaluate(WORKLOADS / "linear_allreduce.py", CANDIDATES / "correct.py", world_size=world)
        print(json.dumps(enforced, indent=1))
        assert "REPORT" in (probe.error.message if probe.error else ""), probe
        found = json.loads(probe.error.message.split("REPORT", 1)[1].split(" (also failed")[0])
        print(json.dumps(found, indent=1))
        assert found["nccl"] and found["triton"] and found["gpus"] >= world, found
        assert "nvidiactl" in found["devices"] and "nvidia0" in found["devices"], found["devices"]
        assert found["hidden"].startswith("refused") and found["write_etc"].startswith("refused"), found
        if sandbox.platform().root:
            assert found["uid"] != 0 and enforced["user"] == sandbox.SERVICE_RANK_USER
        if sandbox.platform().pidns:
            assert found["processes"] <= 8 and enforced["processes_visible"].startswith("its pool's only")
        assert enforced["filesystem"].startswith("read-only") and enforced["network"].startswith("own namespace")
        assert honest.correct, honest.summary()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if os.path.exists("/etc/kloom-probe"):
            raise AssertionError("a rank wrote /etc")
