"""GEMM + all-reduce: ``all_reduce(a @ b)`` (a sum) as the reduce-scatter kernel of ``gemm_rs``
whose owners push each reduced tile back to every rank.

Every rank computes the tiles of the other owners' rows first and stores them into those owners'
inboxes; an owner reduces its own tiles (float32, rank order, one rounding), stores each reduced
tile into its own output and into every peer's gather region, flags it there, and then copies in
the same tile of every other owner once flagged. Every rank ends with the owners' rounded values,
so the result is identical on every rank, as NCCL's is. Each byte crosses the links twice (the
partial to its owner, the reduced tile back), as in a ring all-reduce.

The ``cublas`` consumer does the same per owner block: cuBLAS blocks pushed by the copy engines,
a reduction kernel, the reduced block pushed back by the copy engines, waits and copies.

Outside its envelope (``gemm_rs.supported``) the caller runs the matmul + ``all_reduce``.
"""

from __future__ import annotations

import torch

from .gemm_rs import GemmRsConfig, _cublas_path, _gemm_rs_kernel, checked_shapes, tiles_per_owner
from .peers import NO_TIMEOUT, Peers, side_stream
from .signal import signal_flag, wait_flags


def flags_needed(world: int, shard_rows: int, n: int, config: GemmRsConfig) -> int:
    return 2 * world * tiles_per_owner(shard_rows, n, config)


def buffer_numel(world: int, shard_rows: int, n: int) -> int:
    return 2 * world * shard_rows * n


def _push_reduced(mine, peers: Peers, epoch: int, region: int) -> None:
    """Copy this owner's reduced rows into every peer's gather region, each followed by its flag."""
    world, rank = peers.world, peers.rank
    ms, n = mine.shape
    for step in range(1, world):
        peer = (rank + step) % world
        target = peers.buffer(peer, epoch % 2)[region + rank * ms * n : region + (rank + 1) * ms * n].view(ms, n)
        target.copy_(mine, non_blocking=True)
        signal_flag(peers.peer_flags[peer], world + rank, epoch)


def _cublas_all_reduce(a, b, out, peers: Peers, epoch: int, max_spins: int, phase: int) -> None:
    world, rank = peers.world, peers.rank
    ms, n = out.shape[0] // world, out.shape[1]
    region = world * ms * n
    on_cuda = a.is_cuda and phase == 0
    mine = out[rank * ms : (rank + 1) * ms]
    if phase in (0, 1, 2):
        _cublas_path(a, b, mine, peers.buffer(rank, epoch % 2)[:region], peers, epoch, max_spins, phase, on_cuda)
    if phase in (0, 2):
        if on_cuda:
            side = side_stream(a.device)
            side.wait_stream(torch.cuda.current_stream(a.device))
            with torch.cuda.stream(side):
                _push_reduced(mine, peers, epoch, region)
            mine.record_stream(side)
            torch.cuda.current_stream(a.device).wait_stream(side)
        else:
            _push_reduced(mine, peers, epoch, region)
    if phase in (0, 3):
        gathered = peers.buffer(rank, epoch % 2)[region : 2 * region].view(world * ms, n)
        for step in range(1, world):
            owner = (rank + step) % world
            wait_flags(peers.flags, world + owner, 1, epoch, max_spins, peers.status)
            out[owner * ms : (owner + 1) * ms].copy_(gathered[owner * ms : (owner + 1) * ms])


def matmul_all_reduce(
    a: torch.Tensor,
    b: torch.Tensor,
    peers: Peers,
    config: GemmRsConfig = GemmRsConfig(),
    *,
    out: torch.Tensor | None = None,
    max_spins: int = NO_TIMEOUT,
    phase: int = 0,
    epoch: int | None = None,
) -> torch.Tensor:
    """``sum over ranks of a @ b`` on every rank: (M, N) in ``a``'s dtype. Collective: every rank
    calls it with the same shapes and ``config``. ``phase``/``epoch``/``out`` serve simulated
    ranks (tests): phases 1, 2, 3 in turn under one epoch, into one ``out`` per rank."""
    world, rank = peers.world, peers.rank
    ms, n = a.shape[0] // world, b.shape[1]
    m, k, n = checked_shapes("matmul_all_reduce", a, b, peers, buffer_numel(world, ms, n), flags_needed(world, ms, n, config), out, (a.shape[0], n))
    if epoch is None:
        epoch = peers.next_epoch()
    parity = epoch % 2
    if out is None:
        out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    if config.consumer == "cublas":
        _cublas_all_reduce(a, b, out, peers, epoch, max_spins, phase)
        return out
    grid = (world * tiles_per_owner(ms, n, config),)
    _gemm_rs_kernel[grid](
        a, b, out, peers.buffer(rank, parity), peers.flags, peers.status, peers.data_ptrs, peers.flag_ptrs,
        ms, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        rank, world, epoch, parity * peers.numel, max_spins, world * ms * n,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        PHASE=phase, IEEE=a.dtype == torch.float32, ALL_GATHER=True, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out

