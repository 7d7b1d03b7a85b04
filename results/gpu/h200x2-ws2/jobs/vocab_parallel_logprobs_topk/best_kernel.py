"""Log-probabilities from vocabulary-sharded logits: the global top-k and the sampled token's.

Rank ``r`` holds the logits of vocabulary entries ``r*V/W .. (r+1)*V/W - 1``; every rank holds the
same sampled token ids. In float32: all-reduces give the global maximum and sum of exponentials
(hence ``logsumexp``); each rank's local top-k candidates, with their global ids, are all-gathered
and the global top-k chosen; the sampled token's logit is all-reduced from its owner. Every rank
returns ``(top-k log-probs [T, k], their token ids [T, k], the sampled token's log-prob [T])``.

The inputs make the answer unique: ``k`` distinct peak logits per token (0.25 apart, exact in
bf16) sit at random places in the vocabulary above every other logit, so the top-k ids compare
exactly.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "vocab_parallel"
DESCRIPTION = "Top-k log-probabilities over vocab-sharded logits: max/sum-exp all-reduces, all-gather of local top-k, global top-k (vLLM/SGLang logprobs, RL rollout log-probs)."
SOURCE = "vLLM Sampler.compute_logprobs/gather_logprobs (max_logprobs=20) with vocab-parallel logits as in verl/Megatron; Llama-3 vocabulary (128256)"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=6, vocab=32, k=4, dtype=torch.float32),
    "gpu": dict(tokens=4096, vocab=128256, k=20, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, logits_shard, sampled):
        rank, world = dist.get_rank(), dist.get_world_size()
        logits = logits_shard.float()
        tokens, vocab_local = logits.shape

        logits_max = logits.max(dim=-1).values
        dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)
        sum_exp = (logits - logits_max.unsqueeze(-1)).exp().sum(dim=-1)
        dist.all_reduce(sum_exp)
        lse = logits_max + sum_exp.log()

        values, ids = logits.topk(self.k, dim=-1)
        ids += rank * vocab_local
        all_values = values.new_empty(world * tokens, self.k)
        all_ids = ids.new_empty(world * tokens, self.k)
        dist.all_gather_into_tensor(all_values, values)
        dist.all_gather_into_tensor(all_ids, ids)
        all_values = all_values.view(world, tokens, self.k).permute(1, 0, 2).reshape(tokens, -1)
        all_ids = all_ids.view(world, tokens, self.k).permute(1, 0, 2).reshape(tokens, -1)
        top_values, where = all_values.topk(self.k, dim=-1)
        top_ids = all_ids.gather(1, where)

        local = sampled - rank * vocab_local
        outside = (local < 0) | (local >= vocab_local)
        sampled_logit = logits.gather(1, local.masked_fill(outside, 0).unsqueeze(1)).squeeze(1)
        sampled_logit = sampled_logit.masked_fill(outside, 0.0)
        dist.all_reduce(sampled_logit)
        return top_values - lse.unsqueeze(-1), top_ids, sampled_logit - lse


def get_init_inputs():
    return [P["k"]]


def get_inputs():
    rank, world = dist.get_rank(), dist.get_world_size()
    tokens, vocab, k = P["tokens"], P["vocab"], P["k"]
    vocab_local = vocab // world
    logits = (torch.randn(tokens, vocab_local) * 2).clamp(max=7.5)
    # k peaks per token, shared by all ranks: distinct values from 8 up in steps of 0.25 or 0.5,
    # one at a random place in each of k equal stretches of the vocabulary (so places differ).
    peaks = 8 + 0.25 * torch.randint(1, 3, (tokens, k)).cumsum(1).float()
    peaks = peaks.gather(1, torch.rand(tokens, k).argsort(dim=1))
    stretch = vocab // k
    places = torch.arange(k) * stretch + torch.randint(0, stretch, (tokens, k))
    sampled = torch.randint(0, vocab, (tokens,))
    for t in (peaks, places, sampled):
        dist.broadcast(t, src=0)
    mine = (places >= rank * vocab_local) & (places < (rank + 1) * vocab_local)
    rows = torch.arange(tokens).unsqueeze(1).expand(tokens, k)
    logits[rows[mine], places[mine] - rank * vocab_local] = peaks[mine]
    return [logits.to(P["dtype"]), sampled]


def roofline(world_size, inputs):
    logits, sampled = inputs
    tokens, k = sampled.numel(), P["k"]
    return {
        "flops": 4 * logits.numel(),
        "hbm_bytes": logits.numel() * logits.element_size() + tokens * (8 + k * 12 + 4),
        # Each rank's k candidates (value and id) reach the others; the sums are negligible.
        "link_bytes": tokens * k * 12 * (world_size - 1) + 2 * tokens * 4,
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
