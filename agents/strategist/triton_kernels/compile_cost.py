"""How long a kernel candidate's first call spends compiling, before it computes anything.

kloom's kernels take their sizes as compile-time constants and autotune their tiles: each region
whose tensors differ in shape from every other region's is a kernel Triton compiles once per
configuration it measures. A network whose layers all differ in width (a DenseNet-shaped one, 246
regions in 670 operators, hardly two of a shape) is hundreds of compilations: minutes on the GPU
machine, where a job of a few minutes would spend its whole budget on one candidate that then runs
out of its deadline (the thirty-seventh session's whole networks, 45 s a job: every kernel
candidate did). The planner puts such a candidate behind the others (``offline.py``) and says why.

The estimate counts distinct instantiations (the template, what it was instantiated with, and the
shape, stride and dtype of every tensor its region reads or writes), each times the
configurations its kernels measure (``CONFIGS``), at ``COMPILE_S`` a configuration: on an H100
level2_99's GEMM (4 configurations) and row softmax (4) took 4.3 s more in the candidate's first
trials than the same kernels found compiled (``results/gpu/h100-session39``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kloom.opgraph import OpGraph

from .templates import Match

#: Seconds one configuration of one kernel takes to compile and measure on the GPU machine.
COMPILE_S = 0.55
#: Configurations autotuning compiles, by region kind (the kernels' ``*_configs`` lists: the
#: norms run two kernels, statistics and apply); other kinds ``DEFAULT_CONFIGS``.
CONFIGS = {"elementwise": 3, "batch_norm": 6, "layer_norm": 7, "conv_fp32": 7, "conv_transposed_fp32": 7, "conv_folded_fp32x3": 7,
           "conv_transposed_folded_fp32x3": 7}
DEFAULT_CONFIGS = 4


@dataclass(frozen=True)
class CompileCost:
    """``kernels`` distinct instantiations of ``regions`` regions; ``seconds`` the estimate."""

    regions: int
    kernels: int
    seconds: float

    def note(self) -> str:
        return (f"{self.kernels} distinct kernel instantiation(s) for its {self.regions} region(s) to compile and tune "
                f"on the first call (~{self.seconds:.0f} s)")


def _signature(graph: OpGraph, match: Match) -> str:
    """What makes a region's kernel a compilation of its own."""
    tensors = set(match.outputs)
    for i in sorted(match.nodes):
        node = graph.nodes[i]
        tensors.update(node.tensor_args())
        tensors.update(t for t in node.outputs if t is not None)
    shapes = sorted((t.shape, t.stride, t.dtype) for t in (graph.tensors.get(k) for k in tensors) if t is not None)
    return json.dumps([match.template, match.params, shapes], sort_keys=True, default=str)


def compile_cost(graph: OpGraph, matches: list[Match]) -> CompileCost:
    seen: dict[str, str] = {}
    for match in matches:
        seen.setdefault(_signature(graph, match), match.kind)
    seconds = sum(CONFIGS.get(kind, DEFAULT_CONFIGS) for kind in seen.values()) * COMPILE_S
    return CompileCost(len(matches), len(seen), seconds)
