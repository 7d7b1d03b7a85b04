"""MoE token dispatch: every (token, expert) pair chosen by a top-k router travels to the rank that
holds that expert, through an all-to-all with split sizes that depend on the routing.

Experts are numbered globally and split evenly: rank ``d`` holds experts ``d*E/W .. (d+1)*E/W - 1``.
Each rank returns the rows it received, grouped by its local expert, then by source rank, then
by source token; with them the router weight of each row and the number of rows per local
expert (what a grouped GEMM over the local experts needs next).
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "expert_parallel"
DESCRIPTION = "MoE token dispatch over expert-parallel ranks: all-to-all-v of routed tokens (DeepSpeed-MoE / Megatron alltoall dispatcher / DeepEP dispatch)."
SOURCE = "Megatron-LM MoEAlltoAllTokenDispatcher.token_permutation; DeepEP normal-mode benchmark shapes (DeepSeek-V3)"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=16, hidden=8, experts=8, topk=2, dtype=torch.float32),
    # DeepSeek-V3 routing as benchmarked by DeepEP: 4096 tokens per rank, hidden 7168, 256 experts, top-8.
    "gpu": dict(tokens=4096, hidden=7168, experts=256, topk=8, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, num_experts):
        super().__init__()
        self.num_experts = num_experts

    def forward(self, x, topk_idx, topk_weights):
        world = dist.get_world_size()
        local = self.num_experts // world
        k = topk_idx.shape[1]
        flat = topk_idx.reshape(-1)
        # Permute (token, slot) pairs so that each destination rank's rows are contiguous.
        order = torch.argsort(flat, stable=True)
        send_x = x.index_select(0, order // k)
        send_w = topk_weights.reshape(-1).index_select(0, order)

        counts = _kloom_bincount(flat, minlength=self.num_experts)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)  # block s: rows rank s sends to my experts
        send_splits = counts.view(world, local).sum(1).tolist()
        recv_splits = recv_counts.view(world, local).sum(1).tolist()

        recv_x = x.new_empty(sum(recv_splits), x.shape[1])
        recv_w = send_w.new_empty(sum(recv_splits))
        dist.all_to_all_single(recv_x, send_x, recv_splits, send_splits)
        dist.all_to_all_single(recv_w, send_w, recv_splits, send_splits)

        # Received rows are grouped by source rank, then expert; regroup by expert, then source.
        chunks = recv_counts.tolist()
        by_expert = [s * local + j for j in range(local) for s in range(world)]
        x_chunks, w_chunks = recv_x.split(chunks), recv_w.split(chunks)
        expert_x = torch.cat([x_chunks[i] for i in by_expert])
        expert_w = torch.cat([w_chunks[i] for i in by_expert])
        tokens_per_expert = recv_counts.view(world, local).sum(0)
        return expert_x, expert_w, tokens_per_expert


def get_init_inputs():
    return [P["experts"]]


def get_inputs():
    tokens, experts, k = P["tokens"], P["experts"], P["topk"]
    x = torch.randn(tokens, P["hidden"], dtype=P["dtype"])
    # A skewed router (some experts hot), k distinct experts per token.
    popularity = torch.rand(experts) ** 2 + 0.05
    topk_idx = torch.multinomial(popularity.expand(tokens, experts).contiguous(), k, replacement=False)
    topk_weights = torch.softmax(torch.randn(tokens, k), dim=-1)
    return [x, topk_idx, topk_weights]


def roofline(world_size, inputs):
    x, topk_idx, _ = inputs
    rank = dist.get_rank()
    local = P["experts"] // world_size
    e = x.element_size()
    dest = topk_idx // local
    # The fewest bytes: a token goes once to each other rank that holds one of its experts.
    remote_pairs = sum(int((dest == d).any(dim=1).sum()) for d in range(world_size) if d != rank)
    row = x.shape[1] * e + topk_idx.shape[1] * (8 + 4)  # the row, with its expert ids and weights
    # Rows received are estimated by rows sent (balanced routing on average).
    rows_out = topk_idx.numel()
    return {
        "flops": 0,
        "hbm_bytes": x.numel() * e + rows_out * (x.shape[1] * e + 4),
        "link_bytes": remote_pairs * row,
        "dtype": "bf16" if x.dtype == torch.bfloat16 else "fp32",
    }

import torch as _kl_torch

_KL_FEW_BINS_MAX = 64
_KL_FEW_BINS_MIN = 1 << 16
_KL_FEW_BINS_CHUNK = 1 << 25  # elements of one chunk's comparison matrix


def _kl_few_bins(values, minlength):
    """The counts of a one-dimensional integer tensor whose values fall in at most
    ``_KL_FEW_BINS_MAX`` bins, by comparison and column sums; None where they do not."""
    low, high = _kl_torch.stack(_kl_torch.aminmax(values)).tolist()
    bins = max(minlength, high + 1)
    if low < 0 or bins > _KL_FEW_BINS_MAX:
        return None
    ids = _kl_torch.arange(bins, device=values.device, dtype=values.dtype)
    counts = _kl_torch.zeros(bins, dtype=_kl_torch.int64, device=values.device)
    for part in values.split(max(1, _KL_FEW_BINS_CHUNK // bins)):
        counts += (part.unsqueeze(1) == ids).sum(0)
    return counts


def _kloom_bincount(values, weights=None, minlength=0):
    """``torch.bincount``; into a few bins of a large CUDA tensor, by comparison and column sums."""
    fast = (
        weights is None
        and isinstance(values, _kl_torch.Tensor)
        and values.is_cuda
        and values.dim() == 1
        and values.numel() >= _KL_FEW_BINS_MIN
        and not values.dtype.is_floating_point
        and not values.dtype.is_complex
        and values.dtype != _kl_torch.bool
        and isinstance(minlength, int)
        and 0 <= minlength <= _KL_FEW_BINS_MAX
        and not _kl_torch.compiler.is_compiling()
    )
    counts = _kl_few_bins(values, minlength) if fast else None
    return _kl_torch.bincount(values, weights, minlength) if counts is None else counts


# ---- kloom offline strategist: few_bin_count ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation, with rewritten calls (few_bin_count)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = self._kloom_eager

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
