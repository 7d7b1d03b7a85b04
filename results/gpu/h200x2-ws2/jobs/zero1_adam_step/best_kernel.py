"""A ZeRO-1 (distributed optimizer) AdamW step on one flat parameter buffer.

Every rank holds the full float32 gradient of its own batch and the optimizer state of its shard
(float32 master weights, first and second moments of elements ``r*N/W .. (r+1)*N/W - 1``). The
step reduce-scatters the gradients (average), applies AdamW to the local shard in place, and
all-gathers the updated weights in bf16 into the full model parameter buffer, which it returns.
"""

import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "data_parallel"
DESCRIPTION = "ZeRO-1 optimizer step: reduce-scatter fp32 gradients, AdamW on the local shard, all-gather the bf16 parameters (Megatron distributed optimizer)."
SOURCE = "Megatron-LM DistributedOptimizer (fp32 grad buffer, fp32 main params, bf16 model params); DeepSpeed ZeRO stage 1; Llama-3-8B block (218M parameters)"
WORLD_SIZES = [2, 4, 8]
# Moments are ~1e-2 and 1e-4 and the update ~1e-3: a tight absolute tolerance keeps them meaningful.
TOLERANCE = {torch.float32: (1e-7, 1e-5)}

SHAPES = {
    "ci": dict(numel=96, dtype=torch.bfloat16),
    "gpu": dict(numel=218_112_000, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]

LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.95), 1e-8, 0.1
#: The step being taken (sets Adam's bias corrections).
STEP = 10


class Model(nn.Module):
    def forward(self, grads, master, exp_avg, exp_avg_sq):
        world = dist.get_world_size()
        grad = torch.empty_like(master)
        dist.reduce_scatter_tensor(grad, grads, op=dist.ReduceOp.AVG)

        beta1, beta2 = BETAS
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias1 = 1 - beta1**STEP
        bias2 = 1 - beta2**STEP
        master.mul_(1 - LR * WEIGHT_DECAY)
        denom = (exp_avg_sq.sqrt() / math.sqrt(bias2)).add_(EPS)
        master.addcdiv_(exp_avg, denom, value=-LR / bias1)

        params = torch.empty(world * master.numel(), dtype=P["dtype"], device=master.device)
        dist.all_gather_into_tensor(params, master.to(P["dtype"]))
        return params


def get_init_inputs():
    return []


def get_inputs():
    shard = P["numel"] // dist.get_world_size()
    grads = torch.randn(P["numel"]) * 1e-2
    master = torch.randn(shard) * 0.02
    exp_avg = torch.randn(shard) * 1e-2
    exp_avg_sq = (torch.randn(shard) * 1e-2) ** 2 + 1e-4
    return [grads, master, exp_avg, exp_avg_sq]


def roofline(world_size, inputs):
    grads, master = inputs[0], inputs[1]
    n, shard = grads.numel(), master.numel()
    param_bytes = torch.finfo(P["dtype"]).bits // 8
    return {
        "flops": 12 * shard,
        "hbm_bytes": n * 4 + 3 * 2 * shard * 4 + n * param_bytes,
        # Reduce-scatter of float32 gradients, then all-gather of the updated bf16 shard.
        "link_bytes": shard * (world_size - 1) * (4 + param_bytes),
        "dtype": "fp32",
    }


# ---- kloom offline strategist: torch_compile ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation, compiled with torch.compile (mode default)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = _kl_torch.compile(self._kloom_eager, dynamic=False, mode='default')

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
