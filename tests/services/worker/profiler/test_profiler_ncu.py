"""Nsight Compute's CSV, parsed: fixtures in the format of ``ncu --csv --page raw`` and
``--page details`` (column names as in NVIDIA's metric reference), and the command line."""

from pathlib import Path

import pytest

from services.worker.profiler import ncu as N
from services.worker.profiler import timeline as tl
from services.worker.profiler.profiling import attach, merge_kernels

FIXTURES = Path(__file__).parent / "fixtures"
GEMM = "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>>"
    "(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
NORM = "triton_red_fused_native_layer_norm_0"


@pytest.fixture(scope="module")
def launches():
    return N.parse_raw((FIXTURES / "ncu_raw.csv").read_text())


@pytest.fixture(scope="module")
def rules():
    return N.parse_rules((FIXTURES / "ncu_details.csv").read_text())


def test_raw_page_gives_one_launch_per_row_with_units_applied(launches):
    assert [(l.pid, l.id, l.device, l.name) for l in launches] == [
        (4121, 0, 0, GEMM),
        (4121, 1, 0, ADD),
        (4122, 0, 1, GEMM),
        (4122, 1, 1, NORM),
    ]
    gemm = launches[0].metrics
    assert gemm[N.DURATION] == pytest.approx(1512.448)  # nanoseconds -> microseconds
    assert gemm[N.SM_THROUGHPUT] == pytest.approx(82.41)
    assert gemm["dram__bytes.sum"] == 402_653_184
    assert gemm[N.REGISTERS] == 168
    norm = launches[3].metrics
    assert norm[N.SHARED_STATIC] == pytest.approx(1020)  # Kbyte/block -> bytes
    assert "nvltx__bytes.sum" not in norm  # "n/a" is absent, not zero


def test_details_page_gives_the_speed_of_light_verdict_per_launch(rules):
    assert set(rules) == {(4121, 0), (4121, 1), (4122, 1)}
    assert rules[(4121, 0)].startswith("Compute is more heavily utilized than Memory")
    assert "latency" in rules[(4122, 1)]


def test_aggregate_weights_by_duration_and_keeps_the_verdict(launches, rules):
    per_kernel = N.aggregate(launches, rules)
    gemm = per_kernel[GEMM]
    assert gemm.launches == 2 and gemm.devices == [0, 1]
    assert gemm.duration_us == pytest.approx(1512.448 + 1487.552)
    assert gemm.sm_throughput_pct == pytest.approx((82.41 * 1512.448 + 83.59 * 1487.552) / 3000.0)
    assert gemm.achieved_occupancy_pct == pytest.approx((17.63 * 1512.448 + 17.41 * 1487.552) / 3000.0)
    assert gemm.registers_per_thread == 168
    assert gemm.shared_mem_per_block_bytes == 232_448
    assert gemm.theoretical_occupancy_pct == pytest.approx(18.75)
    assert gemm.rule.startswith("Compute is more heavily utilized")
    assert gemm.metrics["launch__grid_size"] == 132
    assert gemm.metrics["nvltx__bytes.sum"] == 0
    assert per_kernel[ADD].dram_throughput_pct == pytest.approx(91.87)


def test_bottleneck_prefers_ncus_verdict_and_otherwise_reads_speed_of_light():
    assert N.bottleneck(82, 45, 31, "Compute is more heavily utilized than Memory: ...")[0] == "compute-bound"
    assert N.bottleneck(12, 92, 92, "Memory is more heavily utilized than Compute: ...")[0] == "memory-bound (DRAM)"
    assert N.bottleneck(6, 3, 2, "low compute throughput and memory bandwidth ... latency issues")[0] == "latency-bound"
    label, detail = N.bottleneck(85, 40, 30)
    assert label == "compute-bound" and "derived from Speed of Light" in detail
    assert N.bottleneck(20, 70, 68)[0] == "memory-bound (DRAM)"
    assert N.bottleneck(20, 70, 10)[0] == "memory-bound (L1/L2)"
    assert N.bottleneck(10, 20, 5)[0] == "latency-bound"
    assert N.bottleneck(None, None, None) == ("", "")


def test_attach_puts_ncu_metrics_on_the_timelines_compute_kernels(launches, rules):
    ranks = [
        {"kernels": [{"name": GEMM, "calls": 5, "total_us": 7500.0}, {"name": "ncclDevKernel_AllGather_RING_LL", "calls": 5, "total_us": 2000.0}]},
        {"kernels": [{"name": GEMM, "calls": 5, "total_us": 7400.0}, {"name": ADD, "calls": 5, "total_us": 260.0}, {"name": NORM, "calls": 5, "total_us": 45.0}]},
    ]
    kernels = merge_kernels(ranks)
    assert [k.name for k in kernels][:2] == [GEMM, "ncclDevKernel_AllGather_RING_LL"]
    assert kernels[0].calls == 10 and kernels[0].share == pytest.approx(14900 / 17205)
    matched = attach(kernels, N.aggregate(launches, rules))
    assert matched == 3
    by_name = {k.name: k for k in kernels}
    assert by_name[GEMM].bottleneck == "compute-bound"
    assert by_name[GEMM].sm_throughput_pct == pytest.approx(83.0, abs=0.6)
    assert by_name[ADD].bottleneck == "memory-bound (DRAM)"
    assert by_name[NORM].bottleneck == "latency-bound"
    nccl = by_name["ncclDevKernel_AllGather_RING_LL"]
    assert nccl.communication and nccl.bottleneck == "communication" and nccl.sm_throughput_pct is None


def test_attach_falls_back_to_the_bare_function_name():
    launch = N.Launch(id=0, pid=1, device=0, name="vectorized_elementwise_kernel", metrics={N.DURATION: 10.0, N.SM_THROUGHPUT: 5.0, N.DRAM_THROUGHPUT[0]: 88.0})
    kernels = merge_kernels([{"kernels": [{"name": ADD, "calls": 1, "total_us": 10.0}]}])
    assert attach(kernels, N.aggregate([launch])) == 1
    assert kernels[0].bottleneck == "memory-bound (DRAM)"


def test_list_sections_and_the_nvlink_ones():
    found = N.parse_section_list((FIXTURES / "ncu_list_sections.txt").read_text())
    assert "SpeedOfLight" in found and "Occupancy" in found and "Identifier" not in found
    assert N.nvlink_sections(found) == ["Nvlink", "Nvlink_Tables", "Nvlink_Topology"]


def test_profile_command_never_touches_clocks_and_keeps_communication_out_of_replay():
    cmd = N.profile_command(
        "/opt/ncu", report="/tmp/r", sections=["SpeedOfLight", "Occupancy"], kernel_filter=tl.ncu_exclusion_regex(), launch_skip=2, launch_count=30
    )
    pairs = dict(zip(cmd[1::2], cmd[2::2]))
    assert pairs["--clock-control"] == "none"
    assert pairs["--target-processes"] == "all"
    assert pairs["--profile-from-start"] == "off"
    assert pairs["--kernel-name"].startswith("regex:^(?!")
    assert (pairs["--launch-skip"], pairs["--launch-count"]) == ("2", "30")
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"] == ["SpeedOfLight", "Occupancy"]
    assert N.export_command("/opt/ncu", "/tmp/r.ncu-rep", "raw")[1:6] == ["--import", "/tmp/r.ncu-rep", "--csv", "--page", "raw"]


def test_numbers_and_units():
    assert N.number("1,512,448") == 1512448
    assert N.number("n/a") is None and N.number("") is None
    assert N.normalise(2.5, "msecond") == 2500
    assert N.normalise(1.5, "Gbyte/second") == 1.5e9
    assert N.normalise(3, "register/thread") == 3


def test_output_without_a_csv_parses_to_nothing():
    assert N.parse_raw("==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n") == []
    assert N.parse_rules("") == {}
