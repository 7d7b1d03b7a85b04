"""Distributed sort of int64 keys by sample sort, with the output rebalanced to equal blocks.

Every rank holds ``N`` distinct keys (distinct across all ranks too). Rank ``r`` returns the
``r``-th block of ``N`` keys of the global ascending order, and for each key where it came from
(``source_rank * N + position``). The reference is parallel sorting by regular sampling: sort
locally, all-gather ``W-1`` regular samples per rank, pick splitters, all-to-all-v the buckets
(split sizes exchanged and read on the host), sort each bucket, then a second all-to-all-v moves
the keys to their final equal blocks.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "other"
DESCRIPTION = "Distributed sample sort of int64 keys with payload: regular sampling, all-to-all-v of buckets, local sort, rebalancing all-to-all-v."
SOURCE = "Parallel sorting by regular sampling (Shi & Schaeffer 1992), as in GPU multi-node sorts (e.g. sorting keys for distributed joins and deduplication)"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(keys=64),
    "gpu": dict(keys=1 << 23),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


def _exchange(values, origin, dest, world):
    """Send each (value, origin) pair to rank ``dest`` (``dest`` ascending); returns what arrives."""
    send_counts = _kloom_bincount(dest, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
    got_values = values.new_empty(sum(recv_splits))
    got_origin = origin.new_empty(sum(recv_splits))
    dist.all_to_all_single(got_values, values, recv_splits, send_splits)
    dist.all_to_all_single(got_origin, origin, recv_splits, send_splits)
    return got_values, got_origin


class Model(nn.Module):
    def forward(self, keys):
        rank, world = dist.get_rank(), dist.get_world_size()
        n = keys.numel()
        local, perm = torch.sort(keys)
        origin = perm + rank * n

        # W-1 regular samples per rank; the splitters are regular samples of all of them.
        at = torch.arange(1, world, device=keys.device) * n // world
        samples = local[at].contiguous()
        all_samples = samples.new_empty(world * (world - 1))
        dist.all_gather_into_tensor(all_samples, samples)
        splitters = all_samples.sort().values[torch.arange(1, world, device=keys.device) * (world - 1)]

        bucket = torch.bucketize(local, splitters, right=True)
        got, got_origin = _exchange(local, origin, bucket, world)
        got, order = torch.sort(got)
        got_origin = got_origin[order]

        # Rebalance: the key at global position g belongs to rank g // n.
        sizes = torch.tensor([got.numel()], device=keys.device)
        all_sizes = sizes.new_empty(world)
        dist.all_gather_into_tensor(all_sizes, sizes)
        start = int(all_sizes[:rank].sum())
        dest = (start + torch.arange(got.numel(), device=keys.device)) // n
        return _exchange(got, got_origin, dest, world)


def get_init_inputs():
    return []


def get_inputs():
    rank, world = dist.get_rank(), dist.get_world_size()
    n = P["keys"]
    # Distinct on this rank (increasing random gaps, shuffled), and across ranks (key % W == rank).
    distinct = torch.randint(1, 1 << 20, (n,)).cumsum(0)
    return [distinct[torch.randperm(n)] * world + rank]


def roofline(world_size, inputs):
    keys = inputs[0]
    n = keys.numel()
    payload = 8 + 8  # key and origin
    return {
        "flops": 0,
        "hbm_bytes": n * 8 + n * payload,
        # A uniformly random key ends up on another rank with probability (W-1)/W.
        "link_bytes": n * payload * (world_size - 1) // world_size,
        "dtype": "fp32",
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
