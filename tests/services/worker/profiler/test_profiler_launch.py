"""The one-shot launcher on real gloo ranks: the torch-profiler timeline checked against the
Chrome trace it exported, and the ways a launch ends (a failing rank, a hang, a timeout)."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from kloom.processes import alive, descendants
from services.worker.profiler import timeline as tl
from services.worker.profiler.launch import TIMEOUT_EXIT, LaunchSpec, launch, rank_output

WORKLOADS = Path(__file__).parent / "workloads"


def _spec(tmp_path, workload, **kw) -> LaunchSpec:
    base = dict(workload=str(WORKLOADS / workload), world_size=2, device="cpu", out_dir=str(tmp_path / "out"), seed=3, iters=4, warmup_iters=2)
    base.update(kw)
    return LaunchSpec(**base)


def _points_covered(boundaries: list[float], inside) -> float:
    """Length of the elementary segments (between consecutive boundaries) whose midpoint
    satisfies ``inside``: a brute-force check independent of timeline.union/subtract."""
    total = 0.0
    for lo, hi in zip(boundaries, boundaries[1:]):
        mid = (lo + hi) / 2
        if hi > lo and inside(mid):
            total += hi - lo
    return total


def _from_trace(path: Path) -> dict[str, float]:
    """Communication, compute and exposed time recomputed from a rank's Chrome trace."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    own = next(e for e in events if e["name"] == "kloom_profile")
    lo, hi = own["ts"], own["ts"] + own["dur"]
    span = lambda e: (e["ts"], e["ts"] + e["dur"])  # noqa: E731
    comm = [span(e) for e in events if tl.is_communication(e["name"]) and not e["name"].startswith(tl.OWN_RANGES)]
    comm_main = [span(e) for e in events if tl.is_communication(e["name"]) and e["tid"] == own["tid"]]
    compute = [
        span(e)
        for e in events
        if e["tid"] == own["tid"]
        and e.get("cat") == "cpu_op"
        and not tl.is_communication(e["name"])
        and not any(s <= e["ts"] and e["ts"] + e["dur"] <= t for s, t in comm_main)
    ]
    clip = [(max(s, lo), min(t, hi)) for s, t in comm], [(max(s, lo), min(t, hi)) for s, t in compute]
    bounds = sorted({lo, hi, *[x for iv in clip[0] + clip[1] for x in iv]})
    in_comm = lambda m: any(s <= m < t for s, t in clip[0])  # noqa: E731
    in_comp = lambda m: any(s <= m < t for s, t in clip[1])  # noqa: E731
    return {
        "communication_us": _points_covered(bounds, in_comm),
        "compute_us": _points_covered(bounds, in_comp),
        "exposed_communication_us": _points_covered(bounds, lambda m: in_comm(m) and not in_comp(m)),
        "window_us": hi - lo,
    }


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """Each CPU workload launched once on two gloo ranks, with its Chrome traces."""
    specs = {}
    for workload in ("allgather_matmul.py", "overlapped_allreduce.py"):
        spec = _spec(tmp_path_factory.mktemp(workload.removesuffix(".py")), workload, trace=True)
        assert launch(spec, timeout_s=180) == 0
        specs[workload] = spec
    return specs


@pytest.mark.parametrize("workload", ["allgather_matmul.py", "overlapped_allreduce.py"])
def test_torch_timeline_matches_the_exported_trace(traced, workload):
    spec = traced[workload]
    for rank in range(2):
        result = json.loads(rank_output(spec.out_dir, rank).read_text())
        assert result["kind"] == "operators" and result["recorded"] and result["iterations"] == 4
        names = {k["name"]: k for k in result["kernels"]}
        assert names["aten::mm"]["calls"] == 4 * (16 if workload.startswith("overlapped") else 1)
        assert any(tl.is_communication(n) for n in names)
        expected = _from_trace(rank_output(spec.out_dir, rank, "trace.json"))
        for key, value in expected.items():
            assert result["breakdown"][key] == pytest.approx(value, rel=0.01, abs=5.0), key


def test_exposed_share_tells_an_unoverlapped_collective_from_a_hidden_one(traced):
    exposed = {}
    for workload, spec in traced.items():
        parts = [json.loads(rank_output(spec.out_dir, r).read_text())["breakdown"] for r in range(2)]
        # pooled over the ranks: a rank that arrives late at the all-reduce finds it done at once, and
        # its few microseconds of communication (exposed or not) must not weigh as much as the other's
        exposed[workload] = sum(p["exposed_communication_us"] for p in parts) / sum(p["communication_us"] for p in parts)
    assert exposed["allgather_matmul.py"] > 0.9
    assert exposed["overlapped_allreduce.py"] < 0.6


def test_candidate_is_built_and_run_instead_of_the_reference_and_only_chosen_ranks_record(tmp_path):
    spec = _spec(tmp_path, "allgather_matmul.py", candidate=str(WORKLOADS / "allgather_matmul_candidate.py"), iters=2, profile_ranks=[1])
    assert launch(spec, timeout_s=120) == 0
    quiet, recorded = (json.loads(rank_output(spec.out_dir, r).read_text()) for r in range(2))
    assert not quiet["recorded"] and "kernels" not in quiet
    names = {k["name"] for k in recorded["kernels"]}
    assert "aten::cat" in names and "c10d::allgather_" in names


def _new_live_descendants(before: set[int]) -> list[int]:
    """Descendants of this test process that appeared since ``before`` and are still alive
    (other tests of the session may keep processes of their own, such as a worker)."""
    return [p for p in descendants(os.getpid()) if p not in before and alive(p)]


def test_a_failing_rank_stops_the_others(tmp_path):
    spec = _spec(tmp_path, "failing_rank.py")
    before = set(descendants(os.getpid()))
    started = time.monotonic()
    assert launch(spec, timeout_s=120) == 1
    assert time.monotonic() - started < 60
    error = json.loads(rank_output(spec.out_dir, 1, "error.json").read_text())
    assert "rank 1 gives up" in error["message"]
    assert not rank_output(spec.out_dir, 0).exists()
    assert not _new_live_descendants(before)


def test_a_hanging_rank_is_killed_at_the_timeout(tmp_path):
    spec = _spec(tmp_path, "hanging_rank.py")
    before = set(descendants(os.getpid()))
    started = time.monotonic()
    assert launch(spec, timeout_s=8) == TIMEOUT_EXIT
    assert time.monotonic() - started < 30
    assert not _new_live_descendants(before)


TEARDOWN_SCRIPT = """
import sys, time
import torch.distributed as dist
from services.worker.profiler import rank
dist.init_process_group("gloo", init_method="file://{store}", rank=0, world_size=1)
if {block}:
    dist.destroy_process_group = lambda: time.sleep(600)  # an NCCL communicator that never comes down
rank.teardown(7, wait_s=1.0)
print("returned", dist.is_initialized(), flush=True)
"""


@pytest.mark.parametrize("block", [False, True])
def test_a_rank_whose_process_group_will_not_come_down_leaves_anyway(tmp_path, block):
    import subprocess

    script = TEARDOWN_SCRIPT.format(store=tmp_path / "store", block=block)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[4])
    assert time.monotonic() - started < 30
    if block:
        # Left after the wait, with the rank's own exit code, and said why.
        assert done.returncode == 7 and "returned" not in done.stdout
        assert "did not come down within 1 s" in done.stderr
    else:
        assert done.returncode == 0 and "returned False" in done.stdout, done.stderr
