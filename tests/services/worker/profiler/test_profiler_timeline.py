"""Interval arithmetic, name classification and the ncu exclusion filter, on constructed inputs."""

import random
import re

import pytest

from kloom.profile import kernel_key
from services.worker.profiler import timeline as tl


def test_union_merges_overlaps_and_drops_empty_intervals():
    assert tl.union([(5, 7), (0, 2), (1, 3), (3, 4), (8, 8)]) == [(0, 4), (5, 7)]
    assert tl.length([(0, 10), (2, 3), (9, 12)]) == 12


def test_subtract_leaves_what_the_holes_do_not_cover():
    assert tl.subtract([(0, 10)], [(2, 3), (5, 6)]) == [(0, 2), (3, 5), (6, 10)]
    assert tl.subtract([(0, 10)], [(-5, 15)]) == []
    assert tl.subtract([(0, 2), (4, 6)], [(1, 5)]) == [(0, 1), (5, 6)]
    assert tl.subtract([(0, 2)], []) == [(0, 2)]


def test_subtract_agrees_with_counting_unit_steps_on_random_intervals():
    rng = random.Random(7)
    for _ in range(200):
        a = [(s, s + rng.randint(1, 20)) for s in (rng.randint(0, 100) for _ in range(rng.randint(0, 6)))]
        b = [(s, s + rng.randint(1, 20)) for s in (rng.randint(0, 100) for _ in range(rng.randint(0, 6)))]
        in_a = {t for s, e in a for t in range(s, e)}
        in_b = {t for s, e in b for t in range(s, e)}
        assert tl.length(tl.subtract(a, b)) == len(in_a - in_b)
        assert tl.length(a) == len(in_a)


def test_breakdown_of_an_unoverlapped_and_of_a_half_hidden_collective():
    # all-gather 0-4, GEMM 4-10: nothing hides the all-gather.
    serial = tl.breakdown([(0, 4)], [(4, 10)])
    assert (serial.communication_us, serial.exposed_communication_us, serial.busy_us) == (4, 4, 10)
    assert serial.communication_share == pytest.approx(0.4)
    assert serial.exposed_share == pytest.approx(0.4)
    # all-reduce 2-8 under a GEMM 0-5: 3 of its 6 microseconds are exposed; idle 8-10.
    hidden = tl.breakdown([(2, 8)], [(0, 5)], window=(0, 10))
    assert hidden.exposed_communication_us == 3
    assert hidden.communication_share == pytest.approx(6 / 8)
    assert hidden.exposed_share == pytest.approx(3 / 8)
    assert hidden.idle_share == pytest.approx(0.2)


def test_device_breakdown_clips_to_the_window_and_classifies_by_name():
    events = [
        tl.Event("ncclDevKernel_AllGather_RING_LL", 0, 40, lane=13),
        tl.Event("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 30, 100, lane=7),
        tl.Event("Memcpy PtoP (Device -> Device)", 100, 120, lane=9),
        tl.Event("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)", 120, 130),
    ]
    parts = tl.device_breakdown(events, window=(10, 130))
    assert parts.communication_us == 30 + 20
    assert parts.exposed_communication_us == 20 + 20
    assert parts.busy_us == 120


def test_cpu_breakdown_counts_ops_inside_a_collective_as_communication():
    events = [
        tl.Event("kloom_profile", 0, 100, lane=1, annotation=True),
        tl.Event("c10d::allreduce_", 10, 12, lane=1, parents=("kloom_profile",)),
        tl.Event("aten::empty", 10, 11, lane=1, parents=("kloom_profile", "c10d::allreduce_")),
        tl.Event("gloo:all_reduce", 12, 60, lane=2, annotation=True),
        tl.Event("aten::copy_", 20, 30, lane=2),  # gloo's own copy, on its thread
        tl.Event("aten::mm", 15, 40, lane=1, parents=("kloom_profile", "aten::matmul")),
    ]
    parts = tl.cpu_breakdown(events, main_lane=1, window=(0, 100))
    assert parts.communication_us == 50
    assert parts.compute_us == 25
    assert parts.exposed_communication_us == 25
    assert parts.window_us == 100


@pytest.mark.parametrize(
    "name",
    [
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 4>(...)",
        "two_shot_all_reduce_kernel",
        "_fused_all_gather_matmul_kernel",
        "void c10d::symmetric_memory::barrier_kernel(unsigned int**, unsigned long, unsigned long)",
        "Memcpy PtoP (Device -> Device)",
        "gloo:all_gather",
    ],
)
def test_communication_names(name):
    assert tl.is_communication(name)
    assert tl.category(name) == "communication"
    # ncu matches the bare function name of a kernel (copies are not kernels: it never sees them)
    function = kernel_key(name) if name.startswith("void ") else name
    assert not re.search(tl.ncu_exclusion_regex()[len("regex:"):], function)


@pytest.mark.parametrize(
    "name, kind",
    [
        ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "gemm"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)", "elementwise"),
        ("triton_per_fused_native_layer_norm_0", "reduction"),
        ("flash_fwd_kernel", "attention"),
        ("aten::mm", "gemm"),
    ],
)
def test_compute_names_stay_in_replay(name, kind):
    assert not tl.is_communication(name)
    assert tl.category(name) == kind
    assert re.search(tl.ncu_exclusion_regex()[len("regex:"):], name)


def test_extra_patterns_mark_a_kernel_that_spins_on_peer_flags():
    assert not tl.is_communication("my_ring_exchange_kernel")
    assert tl.is_communication("my_ring_exchange_kernel", ["Ring_Exchange"])
    assert not re.search(tl.ncu_exclusion_regex(["Ring_Exchange"])[len("regex:"):], "my_ring_exchange_kernel")


def test_kernel_key_strips_return_type_namespaces_templates_and_arguments():
    assert kernel_key("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, float const*, int)") == "cunn_SoftMaxForward"
    assert kernel_key("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul>>(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)") == "vectorized_elementwise_kernel"
    assert kernel_key("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert kernel_key("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
