"""The summary's first line: what bounds the step as a whole, judged from the timeline's shares
and the top compute kernel's ncu verdict."""

import json
from pathlib import Path

from kloom.profile import KernelStat, Profile
from kloom.profile_summary import summarise, verdict

ROOT = Path(__file__).resolve().parents[1]


def _profile(kernels, comm=0.0, exposed=0.0, idle=0.0, status="ok", device="cuda") -> Profile:
    return Profile(
        tool="ncu", status=status, reason="", workload="w.py", world_size=2, device=device, kernels=kernels,
        communication_share=comm, exposed_communication_share=exposed, idle_share=idle,
    )


GEMM = KernelStat("void nvjet_gemm<128>(float*)", 20, 9000.0, 450.0, 0.6, category="gemm", sm_throughput_pct=91.0, bottleneck="compute-bound")
NCCL = KernelStat("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 20, 6000.0, 300.0, 0.4, communication=True, category="communication", bottleneck="communication")


def test_a_step_whose_gpu_idles_is_bound_by_the_host():
    line = verdict(_profile([GEMM, NCCL], comm=0.4, exposed=0.2, idle=0.45))
    assert line.startswith("bound by the host: the GPU idles 45% of the step")
    assert line.endswith("; exposed communication 20%") and "GPU idle " not in line


def test_exposed_collectives_bound_the_step_before_its_kernels():
    line = verdict(_profile([GEMM, NCCL], comm=0.7, exposed=0.6, idle=0.12))
    assert line.startswith("bound by communication: 60% of GPU busy time in collectives not overlapped")
    assert line.endswith("; GPU idle 12%")


def test_otherwise_the_top_compute_kernel_and_what_ncu_says_of_it():
    line = verdict(_profile([NCCL, GEMM], comm=0.4, exposed=0.05))
    assert line == "bound by its top kernel, nvjet_gemm (60% of GPU time), compute-bound"
    uncounted = KernelStat("triton_red_fused_0", 20, 100.0, 5.0, 0.7)
    assert verdict(_profile([uncounted])).endswith("(70% of GPU time), no hardware counters")
    assert verdict(_profile([uncounted], device="cpu")) == "bound by its top kernel, triton_red_fused_0 (70% of CPU operator time)"


def test_no_verdict_without_kernels_and_the_failure_stays_first():
    failed = _profile([], status="timeout")
    failed.reason = "the PyTorch profiler run did not finish within 90 s"
    assert verdict(failed) is None
    assert summarise(failed).splitlines()[0].startswith("profile timeout (ncu)")
    assert summarise(_profile([GEMM, NCCL], comm=0.7, exposed=0.6)).splitlines()[0].startswith("bound by communication")


def test_a_committed_gpu_profile_reads_back_with_a_verdict():
    record = json.loads((ROOT / "results/profiles/h200x4-ws4/causal_conv1d_cp.candidate.ranks-0.json").read_text())
    line = verdict(Profile.from_dict(record["profile"]))
    assert line.startswith("bound by its top kernel, triton_poi_fused") and line.endswith("compute-bound")
