"""Signatures, similarity, confidence, the computation key and the lexical embedder."""

from __future__ import annotations

import pytest

from kb.computation import computation_key
from kb.confidence import weighted_confidence, wilson_lower_bound
from kb.embeddings import LexicalEmbedder, cosine, default_embedder, tokens
from kb.signature import Signature, similarity
from kb.advice import MIN_SIMILARITY
from tests import eval_records
from tests.kb.kb_trajectories import Tried, Workload, tp_source, trajectory

TP = Workload()


def sig(w: Workload, device: str = "cuda", gpu: str = "NVIDIA H200") -> Signature:
    return Signature.from_analysis(w.analysis(device), device=device, gpu=gpu)


def test_identical_workloads_on_the_same_hardware_score_one():
    assert similarity(sig(TP), sig(TP)).score == 1.0


def test_size_world_size_structure_and_hardware_each_lower_similarity():
    base = sig(TP)
    twice = similarity(base, sig(Workload(input_bytes=TP.input_bytes * 2))).score
    far = similarity(base, sig(Workload(input_bytes=TP.input_bytes * 64))).score
    wider = similarity(base, sig(Workload(world_size=8))).score
    other_gpu = similarity(base, sig(TP, gpu="NVIDIA H100 80GB HBM3")).score
    on_cpu = similarity(base, sig(TP, device="cpu", gpu="")).score
    moe = similarity(base, sig(Workload(family="expert_parallel", collectives=("all_to_all_single",), ops=("aten::sort",)))).score
    assert 1.0 > twice > far > 0.85
    assert far == pytest.approx(1 - 0.15 * (1 - 1 / 2.718281828), abs=1e-3)  # 64x apart: the size term is 1/e
    assert 0.9 < wider < 1.0
    assert other_gpu == pytest.approx(0.8) and on_cpu == pytest.approx(0.5)
    assert moe < MIN_SIMILARITY  # another pattern is no evidence, even at the same size and dtype


def test_a_signature_survives_json_and_tolerates_missing_keys():
    s = sig(TP)
    assert Signature.from_dict(s.to_dict()) == s
    bare = Signature.from_dict({"ops": ["aten::mm", "aten::mm"], "world_size": 2})
    assert (bare.family, bare.world_size, bare.device, bare.ops, bare.total_input_bytes) == ("", 2, "cpu", ("aten::mm", "aten::mm"), 0)
    assert Signature.from_analysis(None).world_size == 1 and Signature.from_dict(None) == Signature.from_analysis(None)
    assert 0 <= similarity(bare, s).score <= 1


def test_what_an_analysis_leaves_unknown_the_keywords_fill_in():
    untraced = eval_records.analysis(family="", world_size=0, ops=["aten::mm", "aten::mm"], dtypes=["torch.bfloat16"])
    s = Signature.from_analysis(untraced, device="cuda", gpu="NVIDIA H200", family="tensor_parallel", world_size=4, dominant="link")
    assert (s.family, s.world_size, s.dominant, s.ops, s.dtypes) == ("tensor_parallel", 4, "link", ("aten::mm", "aten::mm"), ("bfloat16",))
    assert (s.device, s.gpu) == ("cuda", "NVIDIA H200")


def test_the_signature_of_a_trajectory_takes_the_gpu_and_backend_from_its_evaluations():
    s = Signature.from_trajectory(trajectory("j", TP, [Tried("cuda_graph", speedup=1.2)]))
    assert (s.gpu, s.interconnect, s.hardware, s.family, s.dominant) == ("NVIDIA H200", "nccl", "NVIDIA H200", "tensor_parallel", "link")


def test_wilson_bound_grows_with_wins_and_weights():
    assert wilson_lower_bound(0, 0) == 0.0 and wilson_lower_bound(0, 5) == 0.0
    assert wilson_lower_bound(1, 1) < wilson_lower_bound(3, 3) < wilson_lower_bound(10, 10) < 1.0
    assert wilson_lower_bound(3, 4) < wilson_lower_bound(3, 3)
    assert weighted_confidence([(True, 1.0)] * 3) == pytest.approx(wilson_lower_bound(3, 3))
    assert weighted_confidence([(True, 0.6)] * 3) < weighted_confidence([(True, 1.0)] * 3)


def test_variants_of_one_computation_share_a_key():
    key = computation_key(tp_source(4096))
    assert key is not None and key == computation_key(tp_source(512, world_sizes=(4,)))
    changed = tp_source(4096).replace("return out @ self.weight.t()", "return (out @ self.weight.t()).relu()")
    assert computation_key(changed) != key
    assert computation_key("def broken(:") is None


def test_lexical_embedder_matches_parts_of_compound_names():
    assert {"all_gather_into_tensor", "all", "gather", "into", "tensor"} <= set(tokens("dist.all_gather_into_tensor"))
    query, near, far = LexicalEmbedder().embed(["all gather overlap", "tp all_gather_into_tensor overlap_chunks", "moe sort"])
    assert cosine(query, near) > 0.3 and cosine(query, far) == 0.0
    assert default_embedder().embed(["x"])  # a sentence model if one is cached here, else the lexical one
