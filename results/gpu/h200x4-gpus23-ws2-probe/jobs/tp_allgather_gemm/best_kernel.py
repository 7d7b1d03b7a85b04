"""All-gather + GEMM: the input of a column-parallel linear under sequence parallelism. Each rank
holds tokens/n rows of the activations and a column shard (ffn/n output features) of the weight;
it gathers the whole sequence, then multiplies: out = all_gather(x) @ W_r^T, (tokens, ffn/n)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "tensor_parallel"
DESCRIPTION = "All-gather of sequence-parallel activations, then a column-parallel GEMM (Megatron TP+SP MLP/QKV input)."
SOURCE = "Megatron-LM ColumnParallelLinear with sequence_parallel=True; torch symm_mem fused_all_gather_matmul"
WORLD_SIZES = [2, 4, 8]
# The weight is scaled by 1/sqrt(hidden) so outputs are O(1); implementations differ by the
# accumulation order in fp32 and one bf16 rounding of the output.
TOLERANCE = {torch.bfloat16: (2e-2, 1.6e-2)}

SHAPES = {
    "ci": dict(tokens=64, hidden=32, ffn=48, dtype=torch.float32),
    "gpu": dict(tokens=8192, hidden=8192, ffn=28672, dtype=torch.bfloat16),  # Llama-3-70B MLP
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, ffn_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(ffn_per_rank, hidden, dtype=P["dtype"]) / hidden**0.5)

    def forward(self, x_shard):
        world = dist.get_world_size()
        x = torch.empty(world * x_shard.shape[0], x_shard.shape[1], dtype=x_shard.dtype, device=x_shard.device)
        dist.all_gather_into_tensor(x, x_shard)
        return x @ self.weight.t()


def get_init_inputs():
    return [P["hidden"], P["ffn"] // dist.get_world_size()]


def get_inputs():
    return [torch.randn(P["tokens"] // dist.get_world_size(), P["hidden"], dtype=P["dtype"])]


def roofline(world_size, inputs):
    x = inputs[0]
    e = x.element_size()
    m, k, n = x.shape[0] * world_size, x.shape[1], P["ffn"] // world_size
    return {
        "flops": 2 * m * k * n,
        "hbm_bytes": e * (m * k + k * n + m * n),
        "link_bytes": e * x.numel() * (world_size - 1),
        "dtype": "bf16" if x.dtype == torch.bfloat16 else "fp32",
    }


# ---- kloom offline strategist: micro_pipeline_tp ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation, compiled with torch.compile (options {"_micro_pipeline_tp": true})."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = _kl_torch.compile(self._kloom_eager, dynamic=False, options={'_micro_pipeline_tp': True})

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
