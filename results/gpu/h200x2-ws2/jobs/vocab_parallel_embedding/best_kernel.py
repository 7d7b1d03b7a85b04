"""Vocabulary-parallel embedding lookup: the table is sharded over the vocabulary.

Rank ``r`` holds rows ``r*V/W .. (r+1)*V/W - 1`` of the embedding table; every rank holds the same
token ids. Each rank looks up the ids it owns, zeroes the rows of ids it does not, and an
all-reduce sums the partial results: every rank returns ``table[ids]``.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAMILY = "vocab_parallel"
DESCRIPTION = "Vocab-parallel embedding: masked lookup in a vocab-sharded table, then an all-reduce (Megatron VocabParallelEmbedding)."
SOURCE = "Megatron-LM core.tensor_parallel.layers.VocabParallelEmbedding; Llama-3-70B (vocab 128256, hidden 8192), 8192 tokens"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=12, vocab=32, hidden=8, dtype=torch.float32),
    "gpu": dict(tokens=8192, vocab=128256, hidden=8192, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab // dist.get_world_size(), hidden, dtype=P["dtype"]))

    def forward(self, ids):
        rows = self.weight.shape[0]
        start = dist.get_rank() * rows
        outside = (ids < start) | (ids >= start + rows)
        local_ids = (ids - start).masked_fill(outside, 0)
        out = F.embedding(local_ids, self.weight)
        out.masked_fill_(outside.unsqueeze(-1), 0.0)
        dist.all_reduce(out)
        return out


def get_init_inputs():
    return [P["vocab"], P["hidden"]]


def get_inputs():
    ids = torch.randint(0, P["vocab"], (P["tokens"],))
    dist.broadcast(ids, src=0)
    return [ids]


def roofline(world_size, inputs):
    ids = inputs[0]
    rows = P["vocab"] // world_size
    start = dist.get_rank() * rows
    owned = int(((ids >= start) & (ids < start + rows)).sum())
    e = torch.finfo(P["dtype"]).bits // 8
    h = P["hidden"]
    return {
        "flops": 0,
        "hbm_bytes": ids.numel() * 8 + owned * h * e + ids.numel() * h * e,
        # Every rank needs every row, and only the owner has it.
        "link_bytes": owned * h * e * (world_size - 1),
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
