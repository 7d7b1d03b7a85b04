"""Pipeline-parallel forward (GPipe fill and drain): microbatches flow through one stage per rank.

Rank 0 holds ``M`` microbatches. For each microbatch in turn, rank ``r`` receives the activation
from rank ``r-1`` (rank 0 reads its input), applies its stage, a residual MLP block
``a + gelu(a W1) W2`` with its own weights, and sends the result to rank ``r+1``. Each rank
returns the activations its stage produced for every microbatch, stacked; the last rank's are the
pipeline's output.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAMILY = "pipeline_parallel"
DESCRIPTION = "Pipeline-parallel forward: blocking activation recv from the previous stage, an MLP stage, send to the next, microbatch after microbatch (GPipe / Megatron forward-only schedule)."
SOURCE = "Megatron-LM forward_backward_pipelining_without_interleaving (forward only), torch.distributed.pipelining ScheduleGPipe; Llama-3-8B MLP (hidden 4096, ffn 14336)"
WORLD_SIZES = [2, 4, 8]
# Errors of one stage feed every later stage: up to 8 bf16 MLP blocks in a row.
TOLERANCE = {torch.bfloat16: (3e-2, 3e-2)}

SHAPES = {
    "ci": dict(microbatches=3, tokens=4, hidden=8, ffn=16, dtype=torch.float32),
    "gpu": dict(microbatches=8, tokens=2048, hidden=4096, ffn=14336, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        # This rank's stage. The small second projection keeps activations O(1) over many stages.
        self.w1 = nn.Parameter(torch.randn(hidden, ffn, dtype=P["dtype"]) / hidden**0.5)
        self.w2 = nn.Parameter(torch.randn(ffn, hidden, dtype=P["dtype"]) * (0.5 / ffn**0.5))

    def forward(self, microbatches):
        rank, world = dist.get_rank(), dist.get_world_size()
        outs = []
        for m in range(P["microbatches"]):
            if rank == 0:
                a = microbatches[m]
            else:
                a = torch.empty(P["tokens"], P["hidden"], dtype=self.w1.dtype, device=self.w1.device)
                dist.recv(a, src=rank - 1)
            y = a + F.gelu(a @ self.w1) @ self.w2
            if rank < world - 1:
                dist.send(y, dst=rank + 1)
            outs.append(y)
        return torch.stack(outs)


def get_init_inputs():
    return [P["hidden"], P["ffn"]]


def get_inputs():
    if dist.get_rank() > 0:
        # Later stages get their activations from the pipeline, not from the data loader.
        return [torch.empty(0, dtype=P["dtype"])]
    return [torch.randn(P["microbatches"], P["tokens"], P["hidden"], dtype=P["dtype"])]


def roofline(world_size, inputs):
    m, t, h, f = P["microbatches"], P["tokens"], P["hidden"], P["ffn"]
    e = torch.finfo(P["dtype"]).bits // 8
    activations = m * t * h * e
    return {
        "flops": m * 2 * 2 * t * h * f,
        "hbm_bytes": 2 * h * f * e + 2 * activations,
        "link_bytes": activations,  # every stage but the last sends all its activations on
        "dtype": "bf16" if P["dtype"] == torch.bfloat16 else "fp32",
    }


# ---- kloom offline strategist: reference_copy ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = self._kloom_eager

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
