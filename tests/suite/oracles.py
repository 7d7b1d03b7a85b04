"""Single-process math for checking the suite's multi-rank references: gathering what every rank
held (inputs, parameters) and computing the unsharded result in float64.

Each rank's record is what ``Evaluator.reference_io`` returns: ``state`` (the reference's state
dict), ``inputs`` and ``inputs_after`` (before and after the call), ``outputs`` (the flattened
output leaves) and ``spec``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def inputs(ranks: list[dict], index: int) -> list[torch.Tensor]:
    """Input ``index`` of every rank, in rank order, as float64."""
    return [r["inputs"][index].double() for r in ranks]


def params(ranks: list[dict], name: str) -> list[torch.Tensor]:
    """Parameter ``name`` of every rank, in rank order, as float64."""
    return [r["state"][name].double() for r in ranks]


def replicated(tensors: list[torch.Tensor], what: str) -> torch.Tensor:
    """The one value that every rank must hold (a broadcast input or parameter)."""
    for rank, t in enumerate(tensors[1:], start=1):
        if not torch.equal(t, tensors[0]):
            raise AssertionError(f"{what} should be the same on every rank, but rank {rank} differs from rank 0")
    return tensors[0]


def total(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The elementwise sum over ranks (what a SUM reduction computes)."""
    return torch.stack(tensors).sum(0)


def shard(x: torch.Tensor, rank: int, world: int, dim: int = 0) -> torch.Tensor:
    """Rank ``rank``'s contiguous block of ``x`` along ``dim``."""
    return x.chunk(world, dim=dim)[rank]


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension: x / sqrt(mean(x^2) + eps) * weight."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Softmax attention, (B, H, Sq, D) over (B, Hkv, Sk, D), scaled by 1/sqrt(D).

    Key heads are shared by H/Hkv consecutive query heads (grouped-query attention). With
    ``causal``, query i sees keys j <= i + (Sk - Sq): the queries are the last Sq positions.
    """
    group = q.shape[-3] // k.shape[-3]
    k = k.repeat_interleave(group, dim=-3)
    v = v.repeat_interleave(group, dim=-3)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[-2], k.shape[-2]
        future = torch.arange(sk)[None, :] > torch.arange(sq)[:, None] + (sk - sq)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
