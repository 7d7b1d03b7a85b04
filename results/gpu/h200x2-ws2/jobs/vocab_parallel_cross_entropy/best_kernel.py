"""Vocabulary-parallel cross-entropy: logits sharded over the vocabulary, loss per token.

Rank ``r`` holds the logits of vocabulary entries ``r*V/W .. (r+1)*V/W - 1`` for every token;
every rank holds the same targets. In float32, three all-reduces give the global maximum, the
target's logit (only its owner contributes) and the sum of exponentials; every rank returns the
per-token loss ``logsumexp(logits[t]) - logits[t, target[t]]`` over the whole vocabulary.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "vocab_parallel"
DESCRIPTION = "Vocab-parallel cross-entropy: max, target-logit and sum-exp all-reduces over vocab-sharded logits (Megatron tensor-parallel LM loss)."
SOURCE = "Megatron-LM core.tensor_parallel.cross_entropy._VocabParallelCrossEntropy; Llama-3 vocabulary (128256), 8192 tokens"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=8, vocab=32, dtype=torch.float32),
    "gpu": dict(tokens=8192, vocab=128256, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def forward(self, logits_shard, targets):
        rank = dist.get_rank()
        logits = logits_shard.float()
        vocab_local = logits.shape[1]

        logits_max = logits.max(dim=-1).values
        dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)
        logits = logits - logits_max.unsqueeze(-1)

        local_target = targets - rank * vocab_local
        outside = (local_target < 0) | (local_target >= vocab_local)
        local_target = local_target.masked_fill(outside, 0)
        target_logit = logits.gather(1, local_target.unsqueeze(1)).squeeze(1).masked_fill(outside, 0.0)

        sum_exp = logits.exp().sum(dim=-1)
        _kloom_all_reduce_coalesced([target_logit, sum_exp])
        return torch.log(sum_exp) - target_logit


def get_init_inputs():
    return []


def get_inputs():
    world = dist.get_world_size()
    logits = torch.randn(P["tokens"], P["vocab"] // world, dtype=P["dtype"]) * 2
    # Every tensor-parallel rank sees the same labels.
    targets = torch.randint(0, P["vocab"], (P["tokens"],))
    dist.broadcast(targets, src=0)
    return [logits, targets]


def roofline(world_size, inputs):
    logits, targets = inputs
    tokens = targets.numel()
    return {
        "flops": 4 * logits.numel(),
        "hbm_bytes": logits.numel() * logits.element_size() + tokens * (8 + 4),
        # Three float32 all-reduces of one value per token.
        "link_bytes": 3 * 2 * tokens * 4 * (world_size - 1) // world_size,
        "dtype": "fp32",
    }

import torch as _kl_torch
import torch.distributed as _kl_dist


def _kloom_all_reduce_coalesced(tensors, op=None, group=None):
    """All-reduce ``tensors`` (same reduction) as one collective over a packed flat buffer."""
    kwargs = {} if op is None else {"op": op}
    if group is not None:
        kwargs["group"] = group
    first = tensors[0]
    packable = all(t.dtype == first.dtype and t.device == first.device for t in tensors)
    if packable and not _kl_torch.compiler.is_compiling():
        # Tensors that share storage would be reduced twice in sequence; packing would change that.
        packable = len({t.untyped_storage().data_ptr() for t in tensors}) == len(tensors)
    if not packable:
        for t in tensors:
            _kl_dist.all_reduce(t, **kwargs)
        return None
    flat = _kl_torch.cat([t.reshape(-1) for t in tensors])
    _kl_dist.all_reduce(flat, **kwargs)
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view(t.shape))
        offset += n
    return None


# ---- kloom offline strategist: coalesce_allreduce_compiled ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation, compiled with torch.compile (mode default), with rewritten calls (coalesce_allreduce)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = _kl_torch.compile(self._kloom_eager, dynamic=False, mode='default')

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
