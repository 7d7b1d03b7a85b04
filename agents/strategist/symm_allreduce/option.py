"""When the catalog offers the symmetric-memory all-reduce (``symm_mem_allreduce``): a latency-bound
all-reduce on a GPU, by its message size."""

from __future__ import annotations

from agents.analysis import Analysis

from ..dominance import launch_bound
from ..options import Option

#: Collective messages up to this size are latency-bound on NVLink; symmetric-memory one-shot
#: all-reduce beats NCCL's ring there (larger ones use two-shot, then NCCL).
SYMM_ONE_SHOT_MAX = 1 << 20
SYMM_TWO_SHOT_MAX = 16 << 20
#: What a symmetric-memory all-reduce saves over NCCL's per call, at most (4xH200: the 0.053 ms
#: one-element all-reduce step went to 0.048 ms inside a graph). Where the step's other work is
#: milliseconds, that saving is noise: on 4xH200 the symmetric-memory options gave 0.87-1.0x on every
#: step whose all-reduces were a small part of it (results/gpu/h200x4-ws4, -ws4-r2).
SYMM_SAVING_MS = 0.01


def options(a: Analysis) -> list[Option]:
    size = a.collective_sizes.get("allreduce")
    if a.device != "cuda" or a.world_size < 2 or size is None or size > SYMM_TWO_SHOT_MAX:
        return []
    algo = "one_shot" if size <= SYMM_ONE_SHOT_MAX else "two_shot"
    share = _allreduce_latency_share(a)
    why = (
        f"all-reduce of {size / 1024:.0f} KiB is latency-bound: torch symmetric memory's {algo.replace('_', '-')} "
        f"kernel reads peers' buffers directly over NVLink instead of NCCL's ring (its saving is at most "
        f"~{100 * share:.0f}% of the step)"
    )
    params = {"wrapper": "none", "rewrites": ["symm_allreduce"], "symm_algo": algo, "symm_max_bytes": SYMM_TWO_SHOT_MAX}
    opts = [Option("symm_mem_allreduce", params, 0.2 + (0.1 if algo == "one_shot" else 0.0) + 2 * share, why)]
    if a.graph_capturable:
        opts.append(
            Option(
                "symm_mem_allreduce_graph",
                dict(params, wrapper="graph", warmup=3),
                0.3 + launch_bound(a) + 2 * share,
                why + ", all launched from one CUDA graph (the copies in and out cost launches that the graph removes)",
            )
        )
        other = "two_shot" if algo == "one_shot" else "one_shot"
        opts.append(
            Option(
                "symm_mem_allreduce_graph",
                dict(params, wrapper="graph", warmup=3, symm_algo=other),
                0.1,
                f"the same with the {other.replace('_', '-')} algorithm (searched: the crossover depends on the machine)",
                base="symm_mem_allreduce_graph",
            )
        )
    return opts


def _allreduce_latency_share(a: Analysis) -> float:
    """The most of the reference's time that a faster small all-reduce could remove (0..0.5)."""
    if not a.reference_ms:
        return 0.25
    calls = max(a.collective_calls.get("allreduce", 1), 1)
    return min(0.5, SYMM_SAVING_MS * calls / a.reference_ms)
