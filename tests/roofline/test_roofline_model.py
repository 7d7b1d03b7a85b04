"""The floor max(compute, HBM, link), the unoverlapped sum and the fraction of the floor."""

import math

import pytest

from kloom.roofline import HardwareProfile, RooflineTerms, builtin_profiles, estimate
from kloom.roofline.model import bus_factor, collective_link_bytes

PROFILE = HardwareProfile(
    name="test",
    description="round numbers",
    matmul_tflops={"bf16": 1000.0, "fp32": 100.0},
    hbm_gbps=1000.0,
    link_gbps=100.0,
)


def test_floor_is_the_largest_term_and_the_sum_is_unoverlapped():
    # 1 ms of bf16 compute, 2 ms of HBM traffic, 3 ms on the links.
    terms = RooflineTerms(flops=1e12 * 1e-3 * 1000, hbm_bytes=2e9 * 1e-3 * 1000, link_bytes=3e8 * 1e-3 * 1000, dtype="bf16")
    r = estimate(terms, PROFILE, measured_ms=6.0, reference_ms=12.0)
    assert (r.compute_ms, r.hbm_ms, r.link_ms) == pytest.approx((1.0, 2.0, 3.0))
    assert r.floor_ms == pytest.approx(3.0) and r.dominant == "link"
    assert r.unoverlapped_ms == pytest.approx(6.0)
    assert r.fraction_of_floor == pytest.approx(0.5)
    assert r.reference_fraction == pytest.approx(0.25)


def test_dtype_picks_the_matmul_rate_and_unknown_dtypes_fall_back_to_fp32():
    terms = RooflineTerms(flops=1e11)
    assert estimate(RooflineTerms(flops=1e11, dtype="torch.bfloat16"), PROFILE).compute_ms == pytest.approx(0.1)
    assert estimate(terms, PROFILE).compute_ms == pytest.approx(1.0)
    assert estimate(RooflineTerms(flops=1e11, dtype="fp8"), PROFILE).compute_ms == pytest.approx(1.0)



def test_a_float32_floor_counts_three_tf32_products_where_they_are_faster():
    """kloom's tf32x3 kernels compute float32-accurate products on tensor cores: on an H100 (TF32
    380, float32 60 TFLOP/s) a float32 floor is set by 380 / 3, not by the CUDA cores' 60."""
    h100 = builtin_profiles()["h100"]
    assert h100.rate("float32") == pytest.approx(380.0 / 3) and h100.rate("tf32") == 380.0
    assert estimate(RooflineTerms(flops=380e9 / 3), h100).compute_ms == pytest.approx(1.0)
    slow_tf32 = HardwareProfile(name="x", description="", matmul_tflops={"fp32": 100.0, "tf32": 150.0}, hbm_gbps=1.0, link_gbps=0.0)
    assert slow_tf32.rate("fp32") == 100.0
    assert PROFILE.rate("fp32") == 100.0  # no TF32 figure: the CUDA cores' rate

def test_a_profile_without_links_ignores_link_bytes():
    no_link = HardwareProfile(name="one", description="", matmul_tflops={"fp32": 1.0}, hbm_gbps=1.0, link_gbps=0.0)
    r = estimate(RooflineTerms(hbm_bytes=1e6, link_bytes=1e12), no_link)
    assert r.link_ms == 0.0 and r.dominant == "hbm"


def test_roofline_terms_reject_unknown_keys_and_negative_values():
    with pytest.raises(ValueError, match="unknown keys: bytes"):
        RooflineTerms.from_mapping({"flops": 1, "bytes": 2})
    with pytest.raises(ValueError, match="non-negative"):
        RooflineTerms.from_mapping({"hbm_bytes": -1})


@pytest.mark.parametrize(
    "op,n,factor",
    [("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75),
     ("reduce_scatter", 8, 0.875), ("all_to_all", 2, 0.5), ("all_reduce", 1, 0.0)],
)
def test_bus_factors_follow_nccl_tests(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_collective_link_bytes_counts_what_one_rank_sends():
    mib = 2**20
    assert collective_link_bytes("all_reduce", 256 * mib, 4) == 384 * mib
    assert collective_link_bytes("all_gather", 1024 * mib, 4) == 768 * mib
    with pytest.raises(ValueError, match="unknown collective"):
        bus_factor("broadcast", 4)


def test_profiles_saved_before_calibration_fields_existed_still_load():
    old = {"name": "x", "description": "", "matmul_tflops": {"fp32": 1.0}, "hbm_gbps": 2.0, "link_gbps": 3.0, "future_field": 1}
    profile = HardwareProfile.from_dict(old)
    assert profile.world_size == 0 and profile.peer_copy_gbps == 0.0 and profile.collective_latency_us == {}
    assert math.isclose(HardwareProfile.from_dict(profile.to_dict()).link_gbps, 3.0)
