"""Ingesting finished jobs and reading advice back, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from tests.kb.kb_trajectories import Tried, Workload, tp_source, trajectory
from sqlalchemy import func, select

from agents.records import Trajectory
from kb import advice as kb_advice, ingest as kb_ingest, store
from kb.models import KBEvidence, KBFailure, KBJob, KBKernel, KBStrategy, KBWorkload

H200 = "NVIDIA H200"
TP = Workload()


def first_job() -> Trajectory:
    return trajectory(
        "job-1",
        TP,
        [
            Tried("reference_copy", speedup=1.0),
            Tried("cuda_graph", speedup=1.8, profile="launch gaps are 60% of the step; NCCL AllGather 0.4 ms"),
            Tried("overlap_chunks", {"chunks": 4}, speedup=2.4, profile="AllGather hidden behind the GEMM: 12% exposed"),
            Tried("overlap_chunks", {"chunks": 8}, status="incorrect"),
            Tried("symm_mem", status="runtime_error"),
            Tried("torch_compile", status="coder_failed"),
        ],
    )


def counts(session) -> dict[str, int]:
    return {m.__tablename__: session.scalar(select(func.count()).select_from(m)) for m in (KBJob, KBWorkload, KBKernel, KBStrategy, KBEvidence, KBFailure)}


def test_ingest_keeps_winners_evidence_and_failures(kb_db):
    with kb_db.sessions() as s:
        report = kb_ingest.ingest(s, first_job())
    assert (report.ingested, report.kernels, report.strategies, report.failures) == (True, 2, 4, 3)
    with kb_db.sessions() as s:
        kernels = s.scalars(select(KBKernel).order_by(KBKernel.speedup)).all()
        assert [(k.strategy, k.speedup, k.step_index) for k in kernels] == [("cuda_graph", 1.8, 1), ("overlap_chunks", 2.4, 2)]
        best = kernels[-1]
        assert best.params == {"chunks": 4} and best.code.startswith("# overlap_chunks")
        assert best.gpu == H200 and best.interconnect == "nccl" and best.world_size == 4 and best.family == "tensor_parallel"
        assert best.evaluation["timing"]["speedup"] == 2.4 and best.candidate_ms == pytest.approx(2.0 / 2.4)
        assert best.fraction_of_floor == pytest.approx(0.6 / (2.0 / 2.4))
        assert best.signature["collectives"] == ["all_gather_into_tensor"] and best.signature["total_input_bytes"] == 16 << 20

        by_name = {st.name: st for st in s.scalars(select(KBStrategy)).all()}
        assert set(by_name) == {"reference_copy", "cuda_graph", "overlap_chunks", "symm_mem"}  # coder_failed is no evidence
        chunks = by_name["overlap_chunks"]
        assert (chunks.wins, chunks.losses, chunks.best_speedup, chunks.best_params) == (1, 0, 2.4, {"chunks": 4})
        assert chunks.applies_to == {
            "family": "tensor_parallel", "dominant": "link", "hardware": H200,
            "input_bytes": [16 << 20, 16 << 20], "world_sizes": [4, 4],
        }
        [evidence] = chunks.evidence
        assert (evidence.won, evidence.tries, evidence.step_index) == (True, 2, 2)
        assert evidence.profile_summary.startswith("AllGather hidden") and evidence.profile["kernels"]
        assert (by_name["reference_copy"].wins, by_name["reference_copy"].losses) == (0, 1)  # no faster than the baseline
        assert by_name["symm_mem"].evidence[0].status == "runtime_error"

        failures = {(f.strategy, f.status): f for f in s.scalars(select(KBFailure)).all()}
        assert set(failures) == {("overlap_chunks", "incorrect"), ("symm_mem", "runtime_error"), ("torch_compile", "coder_failed")}
        assert "512 of 4096 elements differ" in failures[("overlap_chunks", "incorrect")].reason
        assert "NCCL error" in failures[("symm_mem", "runtime_error")].reason
        assert failures[("overlap_chunks", "incorrect")].params == {"chunks": 8}


def test_reingesting_a_job_changes_nothing(kb_db):
    traj = first_job()
    with kb_db.sessions() as s:
        kb_ingest.ingest(s, traj)
        before = counts(s)
        wins = {st.name: (st.wins, st.losses) for st in s.scalars(select(KBStrategy))}
    again = Trajectory.from_dict(traj.to_dict())  # as the service would load it back
    with kb_db.sessions() as s:
        report = kb_ingest.ingest(s, again)
        assert not report.ingested
    with kb_db.sessions() as s:
        assert counts(s) == before
        assert {st.name: (st.wins, st.losses) for st in s.scalars(select(KBStrategy))} == wins
        assert s.scalar(select(func.sum(KBFailure.count))) == 3


def test_only_finished_jobs_are_ingested(kb_db):
    traj = first_job()
    traj.state = "running"
    with kb_db.sessions() as s, pytest.raises(ValueError, match="only finished jobs"):
        kb_ingest.ingest(s, traj)


def test_a_failed_ingest_leaves_nothing_behind(kb_db):
    traj = first_job()
    traj.steps[2].plan.params = {"chunks": {4}}  # a set cannot be stored as JSON: fails mid-way
    with kb_db.sessions() as s, pytest.raises(Exception):
        kb_ingest.ingest(s, traj)
    with kb_db.sessions() as s:
        assert all(n == 0 for n in counts(s).values())
    with kb_db.sessions() as s:
        assert kb_ingest.ingest(s, first_job()).ingested  # the job can still land once fixed


def test_a_speedup_within_the_timing_noise_is_no_win(kb_db):
    noisy = trajectory(
        "job-noise",
        TP,
        [
            Tried("reference_copy", speedup=1.41, drift=-0.45),  # the reference ran 45% faster after: noise
            Tried("cuda_graph", speedup=1.015),  # under the 2% floor
            Tried("torch_compile", speedup=1.6, drift=0.10),  # clears a 10% drift
        ],
    )
    with kb_db.sessions() as s:
        assert kb_ingest.ingest(s, noisy).kernels == 1
    with kb_db.sessions() as s:
        assert [k.strategy for k in s.scalars(select(KBKernel))] == ["torch_compile"]
        won = {st.name: st.wins for st in s.scalars(select(KBStrategy))}
        assert won == {"reference_copy": 0, "cuda_graph": 0, "torch_compile": 1}


def test_advice_brings_back_what_won_on_similar_workloads(kb_db):
    # Two variants of one computation at other shapes and world sizes (their files differ only in
    # SHAPES), and job-1's workload, alike in structure but with no source kept.
    bigger = Workload(input_shapes=((4096, 8192),), input_bytes=64 << 20, source=tp_source(4096))
    wider = Workload(world_size=8, input_shapes=((512, 8192),), input_bytes=8 << 20, source=tp_source(512))
    moe = Workload(
        name="moe_dispatch", family="expert_parallel", collectives=("all_to_all_single",),
        ops=("aten::index_select", "aten::sort", "c10d::alltoall_base_"), input_shapes=((2048, 4096),), input_bytes=16 << 20,
    )
    jobs = [
        first_job(),
        trajectory("job-2", bigger, [Tried("overlap_chunks", {"chunks": 8}, speedup=2.9), Tried("cuda_graph", speedup=0.97)]),
        trajectory("job-3", wider, [Tried("overlap_chunks", {"chunks": 4}, speedup=2.1), Tried("symm_mem", status="runtime_error")]),
        trajectory("job-4", moe, [Tried("cuda_graph", speedup=3.5), Tried("overlap_chunks", {"chunks": 2}, speedup=0.8)]),
    ]
    for traj, w in zip(jobs, (TP, bigger, wider, moe)):
        with kb_db.sessions() as s:
            assert kb_ingest.ingest(s, traj, workload_source=w.source or None).ingested

    # A new shape of the TP pattern: nothing recorded on it, but three close relatives.
    query = Workload(input_shapes=((2048, 8192),), input_bytes=32 << 20, source=tp_source(2048, world_sizes=(4,)))
    with kb_db.sessions() as s:
        advice = kb_advice.advice(s, query.analysis("cuda"), query.sha256, "cuda", H200, workload_source=query.source)
    assert {k.workload_name for k in advice.kernels} == {"tp_allgather_matmul"}  # the MoE kernel is not similar enough
    assert not any(k.same_workload for k in advice.kernels)
    # The variants' kernels compute the same thing: offered first, as similar as their workloads.
    assert [(k.strategy, k.speedup) for k in advice.kernels[:2]] == [("overlap_chunks", 2.9), ("overlap_chunks", 2.1)]
    assert all(0.5 <= k.similarity < 1.0 for k in advice.kernels[:2])
    # job-1's kernels are for a computation the KB cannot confirm is this one: examples, at half.
    # (Its chunks=4 code is the very code that won on the 8-rank variant: offered once.)
    assert [k.speedup for k in advice.kernels[2:]] == [1.8] and advice.kernels[2].similarity < 0.5
    sims = [k.similarity for k in advice.kernels]
    assert sims == sorted(sims, reverse=True)
    with kb_db.sessions() as s:
        blind = kb_advice.advice(s, query.analysis("cuda"), query.sha256, "cuda", H200)  # no source given
    assert all(k.similarity < 0.5 for k in blind.kernels)

    by_name = {h.strategy: h for h in advice.strategies}
    assert advice.strategies[0].strategy == "overlap_chunks"
    chunks = by_name["overlap_chunks"]
    assert (chunks.wins, chunks.losses) == (3, 0)  # the MoE loss is not evidence for a TP workload
    assert chunks.confidence > by_name["cuda_graph"].confidence > 0
    assert (by_name["cuda_graph"].wins, by_name["cuda_graph"].losses) == (1, 1)
    assert chunks.evidence.count("\n") == 2 and "won 2.90x" in chunks.evidence
    assert (by_name["symm_mem"].wins, by_name["symm_mem"].losses, by_name["symm_mem"].confidence) == (0, 2, 0.0)

    # The same file as job-1: its kernels come first and are flagged as recorded on this workload.
    with kb_db.sessions() as s:
        same = kb_advice.advice(s, TP.analysis("cuda"), TP.sha256, "cuda", H200)
    assert same.kernels[0].same_workload and same.kernels[0].similarity == 1.0
    assert [k.same_workload for k in same.kernels] == sorted((k.same_workload for k in same.kernels), reverse=True)
    failed = {(f.strategy, tuple(sorted(f.params.items()))): f for f in same.failures}
    assert ("overlap_chunks", (("chunks", 8),)) in failed and ("torch_compile", ()) in failed

    # A MoE workload gets the MoE evidence, not the TP failures.
    with kb_db.sessions() as s:
        other = kb_advice.advice(s, moe.analysis("cuda"), moe.sha256, "cuda", H200)
    assert [k.workload_name for k in other.kernels] == ["moe_dispatch"]
    assert other.strategies[0].strategy == "cuda_graph" and other.strategies[0].wins == 1
    assert not other.failures


def test_confidence_grows_with_evidence_and_falls_with_losses(kb_db):
    def confidence(jobs: list[Trajectory], query: Workload) -> float:
        for traj in jobs:
            with kb_db.sessions() as s:
                kb_ingest.ingest(s, traj)
        with kb_db.sessions() as s:
            hints = {h.strategy: h for h in kb_advice.advice(s, query.analysis("cuda"), "", "cuda", H200).strategies}
        return hints["cuda_graph"].confidence

    one = confidence([trajectory("c-1", TP, [Tried("cuda_graph", speedup=1.5)])], TP)
    four = confidence([trajectory(f"c-{i}", TP, [Tried("cuda_graph", speedup=1.5)]) for i in range(2, 5)], TP)
    lost = confidence([trajectory(f"c-{i}", TP, [Tried("cuda_graph", speedup=0.9)]) for i in range(5, 8)], TP)
    assert 0 < one < four < 1
    assert lost < four
    # Seen from a workload 64x larger, the same evidence counts less.
    far = Workload(input_shapes=((65536, 8192),), input_bytes=1 << 30)
    with kb_db.sessions() as s:
        hints = {h.strategy: h for h in kb_advice.advice(s, far.analysis("cuda"), "", "cuda", H200).strategies}
    assert hints["cuda_graph"].confidence < lost
    # On another kind of machine the evidence is not similar enough to use at all.
    with kb_db.sessions() as s:
        assert kb_advice.advice(s, far.analysis("cpu"), "", "cpu", "").strategies == []


def test_a_reused_kernel_counts_for_the_strategy_that_made_it(kb_db):
    with kb_db.sessions() as s:
        kb_ingest.ingest(s, first_job())
        origin = s.scalars(select(KBKernel).where(KBKernel.strategy == "overlap_chunks")).one()
    bigger = Workload(input_shapes=((4096, 8192),), input_bytes=64 << 20)
    reuse = trajectory("job-r", bigger, [Tried("kb_reuse", {"kernel_id": origin.public_id}, speedup=2.2, source="kb")])
    with kb_db.sessions() as s:
        kb_ingest.ingest(s, reuse)
    with kb_db.sessions() as s:
        kernel = s.scalars(select(KBKernel).where(KBKernel.job_id == "job-r")).one()
        assert kernel.strategy == "overlap_chunks" and kernel.params == {"chunks": 4, "kb_kernel": origin.public_id}
        assert kernel.plan_source == "kb"
        strategy = s.scalars(select(KBStrategy).where(KBStrategy.name == "overlap_chunks")).one()
        assert (strategy.wins, strategy.min_input_bytes, strategy.max_input_bytes) == (2, 16 << 20, 64 << 20)


def test_search_by_text_family_and_collective(kb_db):
    moe = Workload(name="moe_dispatch", family="expert_parallel", collectives=("all_to_all_single",), ops=("aten::sort",))
    for traj in (first_job(), trajectory("job-m", moe, [Tried("cuda_graph", speedup=1.3)])):
        with kb_db.sessions() as s:
            kb_ingest.ingest(s, traj)
    with kb_db.sessions() as s:
        assert [m.kernel.speedup for m in store.search(s)] == [2.4, 1.8, 1.3]  # fastest first
        found = store.search(s, "overlap all gather")
        assert found[0].kernel.strategy == "overlap_chunks" and found[0].kernel.workload_name == "tp_allgather_matmul"
        assert [m.kernel.workload_name for m in store.search(s, "moe dispatch")] == ["moe_dispatch"]
        assert [m.kernel.workload_name for m in store.search(s, family="expert_parallel")] == ["moe_dispatch"]
        assert {m.kernel.workload_name for m in store.search(s, collective="all_gather_into_tensor")} == {"tp_allgather_matmul"}
        assert store.search(s, collective="all_gather") == []  # a collective is matched whole
        assert store.search(s, "flash attention") == []
        assert len(store.search(s, limit=1)) == 1
        kernel = found[0].kernel
        assert store.get_kernel(s, kernel.public_id).id == kernel.id == store.get_kernel(s, str(kernel.id)).id
        assert store.get_kernel(s, "k999999") is None and store.get_kernel(s, "nonsense") is None
        strategy = store.list_strategies(s, name="overlap_chunks")[0]
        assert store.get_strategy(s, strategy.public_id).evidence[0].job_id == "job-1"


def test_advice_says_what_each_strategy_measured_wins_and_losses_alike(kb_db):
    """The planner orders options by what they measured on similar workloads: the similarity-
    weighted geometric mean of their speedups there (a loss pulls it under 1x), with the weight of
    that evidence; a reference run as a candidate never counts above 1x."""
    jobs = [
        trajectory("m-1", TP, [Tried("cuda_graph", speedup=2.0), Tried("torch_compile", speedup=0.8), Tried("reference_copy", speedup=1.3)]),
        trajectory("m-2", TP, [Tried("cuda_graph", speedup=0.5), Tried("torch_compile", status="runtime_error")]),
    ]
    with kb_db.sessions() as s:
        for traj in jobs:
            kb_ingest.ingest(s, traj)
    with kb_db.sessions() as s:
        hints = {h.strategy: h for h in kb_advice.advice(s, TP.analysis("cuda"), "", "cuda", H200).strategies}
    assert hints["cuda_graph"].speedup == pytest.approx(1.0)  # sqrt(2.0 * 0.5), both jobs equally similar
    assert hints["cuda_graph"].weight == pytest.approx(2.0)
    assert hints["torch_compile"].speedup == pytest.approx(0.8)  # the failed run has no speedup but counts as evidence
    assert hints["torch_compile"].weight == pytest.approx(2.0)
    assert hints["reference_copy"].speedup == pytest.approx(1.0)


def test_close_evidence_comes_from_the_same_computation_only(kb_db):
    """What a strategy measured on *nearly this workload* (which lets the planner skip it) comes from
    the same computation at a neighbouring size, never from another computation however alike its
    signature, nor from the same computation far away in size."""
    near = Workload(input_shapes=((2048, 8192),), input_bytes=32 << 20, source=tp_source(2048))
    far = Workload(input_shapes=((65536, 8192),), input_bytes=1 << 30, source=tp_source(65536))
    other = Workload(input_shapes=((2048, 8192),), input_bytes=32 << 20, source=tp_source(2048).replace("return out @ self.weight.t()", "return (out @ self.weight.t()).relu()"))
    assert other.source != near.source
    for job_id, w, speedup in (("near", near, 1.5), ("far", far, 3.0), ("other", other, 0.5)):
        with kb_db.sessions() as s:
            kb_ingest.ingest(s, trajectory(job_id, w, [Tried("cuda_graph", speedup=speedup)]), workload_source=w.source)
    query = Workload(input_shapes=((3072, 8192),), input_bytes=48 << 20, source=tp_source(3072))
    with kb_db.sessions() as s:
        advice = kb_advice.advice(s, query.analysis("cuda"), query.sha256, "cuda", H200, workload_source=query.source)
    hint = next(h for h in advice.strategies if h.strategy == "cuda_graph")
    assert hint.weight > hint.close_weight > 0
    assert hint.close_speedup == pytest.approx(1.5)
    # The kept kernel is flagged alike (the far job's is the same code, offered once: from the near one).
    assert [(k.speedup, k.close) for k in advice.kernels] == [(1.5, True)]
    with kb_db.sessions() as s:  # without the query's source nothing is known to be the same computation
        blind = next(h for h in kb_advice.advice(s, query.analysis("cuda"), "", "cuda", H200).strategies if h.strategy == "cuda_graph")
    assert blind.close_weight == 0 and blind.close_speedup is None


def test_exact_evidence_comes_from_this_very_workload_only(kb_db):
    """What a strategy measured on *this very workload* (which lets the planner skip it once the job
    has something faster): the same computation at the same sizes, never a neighbouring size."""
    here = Workload(input_shapes=((2048, 8192),), input_bytes=32 << 20, source=tp_source(2048))
    near = Workload(input_shapes=((3072, 8192),), input_bytes=48 << 20, source=tp_source(3072))
    for job_id, w, speedup in (("here", here, 0.8), ("near", near, 1.5)):
        with kb_db.sessions() as s:
            kb_ingest.ingest(s, trajectory(job_id, w, [Tried("cuda_graph", speedup=speedup)]), workload_source=w.source)
    with kb_db.sessions() as s:
        advice = kb_advice.advice(s, here.analysis("cuda"), here.sha256, "cuda", H200, workload_source=here.source)
    hint = next(h for h in advice.strategies if h.strategy == "cuda_graph")
    assert hint.close_weight > hint.exact_weight == pytest.approx(1.0)
    assert hint.exact_speedup == pytest.approx(0.8) and 0.8 < hint.close_speedup < 1.5
    assert [(k.speedup, k.close, k.exact) for k in advice.kernels] == [(1.5, True, False)]  # 0.8x was not kept


def test_kept_kernels_keep_their_autotuning_choices_for_the_same_hardware_only(kb_db):
    """What Triton's autotuner chose in a kept kernel comes back as advice for a similar workload
    on the same GPU, the most similar job's first; on another GPU or device nothing."""
    from kloom.tuning import TunedConfig

    chosen = TunedConfig("_sm_rows_single", [300, 16, "torch.float32"], {"ROWS": 4}, 8, 3)
    bigger = Workload(input_shapes=((4096, 8192),), input_bytes=64 << 20, source=tp_source(4096))
    elsewhere = TunedConfig("_sm_rows_single", [300, 16, "torch.float32"], {"ROWS": 1}, 4, 3)
    other_key = TunedConfig("gemm_kernel", [64, 64, 64, "torch.float32"], {"BLOCK_M": 64}, 4, 3)
    near, far = trajectory("job-t1", TP, [Tried("triton_kernels", speedup=1.5)]), trajectory("job-t2", bigger, [Tried("triton_kernels", speedup=1.4)])
    near.steps[0].evaluation.tuned = [chosen]
    far.steps[0].evaluation.tuned = [elsewhere, other_key]
    for traj, w in ((near, TP), (far, bigger)):
        with kb_db.sessions() as s:
            assert kb_ingest.ingest(s, traj, workload_source=w.source or None).ingested
    with kb_db.sessions() as s:
        kept = s.scalars(select(KBKernel).where(KBKernel.job_id == "job-t1")).one()
        assert kept.tuned == [chosen.to_dict()]
        same = kb_advice.advice(s, TP.analysis("cuda"), TP.sha256, "cuda", H200)
        other_gpu = kb_advice.advice(s, TP.analysis("cuda"), TP.sha256, "cuda", "NVIDIA H100 80GB HBM3")
        cpu = kb_advice.advice(s, TP.analysis("cpu"), TP.sha256, "cpu", "")
    assert same.tuned == [chosen, other_key], "this workload's choice for a key first; the other job's other key after it"
    assert other_gpu.tuned == [] and cpu.tuned == []
