"""Vocabulary-parallel embedding with sequence parallelism: lookup, then reduce-scatter over tokens.

Rank ``r`` holds rows ``r*V/W .. (r+1)*V/W - 1`` of the embedding table; every rank holds the same
``T`` token ids. Each rank looks up the ids it owns and zeroes the others; a reduce-scatter along
the token dimension both sums the partial results and leaves rank ``r`` with tokens
``r*T/W .. (r+1)*T/W - 1``: it returns ``table[ids[r*T/W : (r+1)*T/W]]``.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAMILY = "vocab_parallel"
DESCRIPTION = "Vocab-parallel embedding under sequence parallelism: masked lookup, then a reduce-scatter to sequence shards (Megatron with --sequence-parallel)."
SOURCE = "Megatron-LM VocabParallelEmbedding(reduce_scatter_embeddings=True); Llama-3-70B (vocab 128256, hidden 8192), 8192 tokens"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=16, vocab=32, hidden=8, dtype=torch.float32),
    "gpu": dict(tokens=8192, vocab=128256, hidden=8192, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab // dist.get_world_size(), hidden, dtype=P["dtype"]))

    def forward(self, ids):
        world = dist.get_world_size()
        rows = self.weight.shape[0]
        start = dist.get_rank() * rows
        outside = (ids < start) | (ids >= start + rows)
        local_ids = (ids - start).masked_fill(outside, 0)
        partial = F.embedding(local_ids, self.weight)
        partial.masked_fill_(outside.unsqueeze(-1), 0.0)
        out = partial.new_empty(ids.shape[0] // world, partial.shape[1])
        dist.reduce_scatter_tensor(out, partial)
        return out


def get_init_inputs():
    return [P["vocab"], P["hidden"]]


def get_inputs():
    ids = torch.randint(0, P["vocab"], (P["tokens"],))
    dist.broadcast(ids, src=0)
    return [ids]


def roofline(world_size, inputs):
    ids = inputs[0]
    rank = dist.get_rank()
    rows = P["vocab"] // world_size
    start = rank * rows
    slice_len = ids.numel() // world_size
    owned = (ids >= start) & (ids < start + rows)
    mine = torch.zeros_like(owned)
    mine[rank * slice_len : (rank + 1) * slice_len] = True
    e = torch.finfo(P["dtype"]).bits // 8
    h = P["hidden"]
    return {
        "flops": 0,
        "hbm_bytes": ids.numel() * 8 + int(owned.sum()) * h * e + slice_len * h * e,
        # Only rows this rank owns for tokens of other ranks' slices have to travel.
        "link_bytes": int((owned & ~mine).sum()) * h * e,
        "dtype": "bf16" if P["dtype"] == torch.bfloat16 else "fp32",
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
