"""MoE combine: the return trip of expert outputs to the ranks that own the tokens, then the
router-weighted sum over each token's k experts.

``expert_out`` is laid out as ``moe_dispatch`` returns it: rows grouped by local expert, then by
source rank, then by source token. Each rank returns ``sum_j w[t, j] * expert_out(t, j)`` for its
own tokens, accumulated in float32.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "expert_parallel"
DESCRIPTION = "MoE combine: all-to-all-v of expert outputs back to their tokens, then the top-k weighted sum (Megatron unpermute / DeepEP combine)."
SOURCE = "Megatron-LM MoEAlltoAllTokenDispatcher.token_unpermutation; DeepEP normal-mode benchmark shapes (DeepSeek-V3)"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=16, hidden=8, experts=8, topk=2, dtype=torch.float32),
    "gpu": dict(tokens=4096, hidden=7168, experts=256, topk=8, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, num_experts):
        super().__init__()
        self.num_experts = num_experts

    def forward(self, expert_out, topk_idx, topk_weights):
        world = dist.get_world_size()
        local = self.num_experts // world
        tokens, k = topk_idx.shape
        flat = topk_idx.reshape(-1)
        order = torch.argsort(flat, stable=True)

        counts = _kloom_bincount(flat, minlength=self.num_experts)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)
        per_source = recv_counts.view(world, local)

        # Rows are grouped by expert, then source; regroup by source (the order the sources expect).
        chunks = per_source.t().reshape(-1).tolist()
        pieces = expert_out.split(chunks)
        by_source = torch.cat([pieces[j * world + s] for s in range(world) for j in range(local)])

        send_splits = per_source.sum(1).tolist()
        recv_splits = counts.view(world, local).sum(1).tolist()
        returned = expert_out.new_empty(flat.numel(), expert_out.shape[1])
        dist.all_to_all_single(returned, by_source, recv_splits, send_splits)

        # returned[i] answers pair order[i]; put the pairs back in (token, slot) order and reduce.
        per_slot = torch.empty_like(returned).index_copy_(0, order, returned)
        weighted = per_slot.view(tokens, k, -1).float() * topk_weights.unsqueeze(-1)
        return weighted.sum(1).to(expert_out.dtype)


def get_init_inputs():
    return [P["experts"]]


def get_inputs():
    tokens, experts, k = P["tokens"], P["experts"], P["topk"]
    popularity = torch.rand(experts) ** 2 + 0.05
    topk_idx = torch.multinomial(popularity.expand(tokens, experts).contiguous(), k, replacement=False)
    topk_weights = torch.softmax(torch.randn(tokens, k), dim=-1)
    # How many rows this rank's experts hold depends on every rank's routing.
    counts = _kloom_bincount(topk_idx.reshape(-1), minlength=experts)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)
    expert_out = torch.randn(int(recv_counts.sum()), P["hidden"], dtype=P["dtype"])
    return [expert_out, topk_idx, topk_weights]


def roofline(world_size, inputs):
    expert_out, topk_idx, _ = inputs
    rank = dist.get_rank()
    local = P["experts"] // world_size
    e = expert_out.element_size()
    hidden = expert_out.shape[1]
    dest = topk_idx // local
    # The fewest bytes: each expert output is weighted where it was computed and the partial sums
    # for one token are reduced before the trip, so a token needs one row from each other rank
    # holding one of its experts. By symmetry that is the count of rows this rank would send.
    remote_pairs = sum(int((dest == d).any(dim=1).sum()) for d in range(world_size) if d != rank)
    tokens, k = topk_idx.shape
    return {
        "flops": 2 * tokens * k * hidden,
        "hbm_bytes": expert_out.numel() * e + tokens * hidden * e,
        "link_bytes": remote_pairs * hidden * e,
        "dtype": "bf16" if expert_out.dtype == torch.bfloat16 else "fp32",
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
