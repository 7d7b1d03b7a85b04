"""GEMM + reduce-scatter: ``reduce_scatter(a @ b)`` (a sum), each tile pushed to its owner as it
finishes.

Rank d owns rows ``d*ms .. (d+1)*ms-1`` of the product (``ms = M / world``). Every rank has an
inbox of ``world`` slots of ``ms x N`` in symmetric memory. A rank computes the tiles of rank+1's
rows first, then rank+2's, ..., its own last: a finished tile of another owner is stored straight
into that owner's inbox (slot: this rank) and flagged there; an own tile waits for the same tile's
flag from every peer (by the time a rank reaches its own rows its peers have usually pushed
theirs) and adds their contributions to its float32 accumulator in rank order before the one
rounding to the output dtype.

Tunables (``GemmRsConfig``): ``consumer`` ``"triton"`` (the tile loop above) or ``"cublas"``
(per owner: cuBLAS on its rows, a copy-engine push of the block on a side stream, its flag; then a
reduction kernel that waits per source), tile sizes, warps, stages.

Outside its envelope (``supported``) the caller runs the matmul + ``reduce_scatter_tensor``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .peers import NO_TIMEOUT, Peers, resident_programs, side_stream
from .signal import PER_CALL, signal, signal_flag, wait
from .tiles import swizzle


@dataclass(frozen=True)
class GemmRsConfig:
    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    consumer: str = "triton"  # "triton" | "cublas"

    def __post_init__(self):
        if self.consumer not in ("triton", "cublas"):
            raise ValueError(f"unknown consumer {self.consumer!r}")


#: The configurations a caller times on its target before choosing (also used by ``gemm_ar``).
TUNING = {
    "triton": GemmRsConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3),
    "triton_128": GemmRsConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4),
    "cublas": GemmRsConfig(consumer="cublas"),
}


def tiles_per_owner(shard_rows: int, n: int, config: GemmRsConfig) -> int:
    if config.consumer == "cublas":
        return 1
    return triton.cdiv(shard_rows, config.block_m) * triton.cdiv(n, config.block_n)


def flags_needed(world: int, shard_rows: int, n: int, config: GemmRsConfig) -> int:
    return world * tiles_per_owner(shard_rows, n, config)


def buffer_numel(world: int, shard_rows: int, n: int) -> int:
    return world * shard_rows * n


def checked_shapes(what: str, a: torch.Tensor, b: torch.Tensor, peers: Peers, numel: int, flags: int, out: torch.Tensor | None, out_shape) -> tuple[int, int, int]:
    """(m, k, n) of a call of ``what``, after refusing operands outside the envelope, buffers that
    are too small (``numel`` elements, ``flags`` flags needed) and an ``out`` of another shape."""
    if not supported(a, b, peers.world):
        raise ValueError(f"{what} does not take a {tuple(a.shape)} {a.dtype} and b {tuple(b.shape)} {b.dtype} over {peers.world} ranks")
    if peers.numel < numel or peers.n_flags < flags or peers.data.dtype != a.dtype:
        raise ValueError("the peers' buffers are too small for this call or of another dtype")
    if out is not None and (tuple(out.shape) != tuple(out_shape) or out.dtype != a.dtype or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous {tuple(out_shape)} {a.dtype}, got {tuple(out.shape)} {out.dtype}")
    return a.shape[0], a.shape[1], b.shape[1]


def supported(a: torch.Tensor, b: torch.Tensor, world: int) -> bool:
    """Whether the kernel takes these operands (else: matmul, then reduce_scatter_tensor)."""
    return (
        a.dim() == 2
        and b.dim() == 2
        and a.shape[1] == b.shape[0]
        and a.dtype == b.dtype
        and a.dtype in (torch.bfloat16, torch.float16, torch.float32)
        and a.device == b.device
        and a.shape[0] % world == 0
        and a.shape[0] > 0
        and b.shape[1] > 0
    )


@triton.jit(do_not_specialize=PER_CALL)
def _gemm_rs_kernel(
    a_ptr, b_ptr, out_ptr, inbox_ptr, flags_ptr, status_ptr, data_ptrs, flag_ptrs,
    ms, N, K, stride_am, stride_ak, stride_bk, stride_bn,
    rank, world, epoch, parity_offset, max_spins, gather_offset,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PHASE: tl.constexpr, IEEE: tl.constexpr, ALL_GATHER: tl.constexpr,
):  # fmt: skip
    # PHASE 0: everything; 1: only the tiles of other owners (pushed); 2: only the own tiles
    # (waited for and reduced); 3 (ALL_GATHER): only the reduced tiles of other owners, received.
    # Simulated ranks in the interpreter run phase 1, then 2 (then 3), every rank in each.
    # ALL_GATHER (GEMM + all-reduce, ``gemm_ar``): an owner also pushes each reduced tile to every
    # peer (the region at ``gather_offset`` of their buffer, flags after the reduce-scatter's),
    # then waits for the same tile of every other owner and copies it into its (M, N) output.
    pid = tl.program_id(0)
    num_m = tl.cdiv(ms, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_owner = num_m * num_n
    step = pid // per_owner
    owner = (rank + 1 + step) % world
    tile = pid % per_owner
    own = owner == rank
    if PHASE == 1:
        go = owner != rank
    elif PHASE == 0:
        go = owner >= 0
    else:
        go = owner == rank
    if PHASE == 3:
        if go:
            _receive_reduced(out_ptr, inbox_ptr, flags_ptr, status_ptr, tile, ms, N, rank, world, epoch, max_spins, gather_offset, per_owner, BLOCK_M, BLOCK_N, GROUP_M)
    elif go:
        pid_m, pid_n = swizzle(tile, num_m, num_n, GROUP_M)

        local_rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = local_rows < ms
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        ks = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (owner * ms + local_rows)[:, None] * stride_am + ks[None, :] * stride_ak
        b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_ok = (k0 + ks) < K
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            if IEEE:
                acc = tl.dot(a, b, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        mask = row_ok[:, None] & col_ok[None, :]
        offs = local_rows[:, None] * N + cols[None, :]
        if own:
            for src in range(0, world):
                if src != rank:
                    wait(flags_ptr + src * per_owner + tile, epoch, max_spins, status_ptr)
                    part = tl.load(inbox_ptr + src * ms * N + offs, mask=mask, other=0.0)
                    acc += part.to(tl.float32)
            reduced = acc.to(out_ptr.dtype.element_ty)
            if ALL_GATHER:
                # Every rank ends with the same rounded values: the owner's.
                tl.store(out_ptr + rank * ms * N + offs, reduced, mask=mask)
                for step in range(1, world):
                    peer = (rank + step) % world
                    base = tl.load(data_ptrs + peer).to(tl.pointer_type(out_ptr.dtype.element_ty))
                    tl.store(base + parity_offset + gather_offset + rank * ms * N + offs, reduced, mask=mask)
                    flag_base = tl.load(flag_ptrs + peer).to(tl.pointer_type(tl.int32))
                    signal(flag_base + (world + rank) * per_owner + tile, epoch)
                if PHASE == 0:
                    _receive_reduced(out_ptr, inbox_ptr, flags_ptr, status_ptr, tile, ms, N, rank, world, epoch, max_spins, gather_offset, per_owner, BLOCK_M, BLOCK_N, GROUP_M)
            else:
                tl.store(out_ptr + offs, reduced, mask=mask)
        else:
            base = tl.load(data_ptrs + owner).to(tl.pointer_type(out_ptr.dtype.element_ty))
            tl.store(base + parity_offset + rank * ms * N + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
            flag_base = tl.load(flag_ptrs + owner).to(tl.pointer_type(tl.int32))
            signal(flag_base + rank * per_owner + tile, epoch)


@triton.jit
def _receive_reduced(out_ptr, inbox_ptr, flags_ptr, status_ptr, tile, ms, N, rank, world, epoch, max_spins, gather_offset, per_owner, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Copy tile ``tile`` of every other owner's reduced rows, once flagged, into the output."""
    num_m = tl.cdiv(ms, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = swizzle(tile, num_m, num_n, GROUP_M)
    local_rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (local_rows < ms)[:, None] & (cols < N)[None, :]
    offs = local_rows[:, None] * N + cols[None, :]
    for step in range(1, world):
        owner = (rank + step) % world
        arrived = wait(flags_ptr + (world + owner) * per_owner + tile, epoch, max_spins, status_ptr)
        values = tl.load(inbox_ptr + gather_offset + owner * ms * N + offs, mask=mask & arrived)
        tl.store(out_ptr + owner * ms * N + offs, values, mask=mask & arrived)


@triton.jit(do_not_specialize=PER_CALL)
def _reduce_inbox_kernel(own_ptr, inbox_ptr, out_ptr, flags_ptr, status_ptr, n, rank, world, epoch, max_spins, BLOCK: tl.constexpr):
    """out = own + the inbox slot of every peer (float32, rank order), once each peer flagged it.
    Grid-stride over blocks with fewer programs than SMs: while they spin, the kernels that flag
    this GPU's own pushes to its peers still find an SM."""
    for src in range(0, world):
        if src != rank:
            wait(flags_ptr + src, epoch, max_spins, status_ptr)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        acc = tl.load(own_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        for src in range(0, world):
            if src != rank:
                acc += tl.load(inbox_ptr + src * n + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _cublas_path(a, b, out, inbox, peers: Peers, epoch: int, max_spins: int, phase: int, on_cuda: bool) -> None:
    world, rank = peers.world, peers.rank
    ms, n = out.shape
    parity = epoch % 2
    side = side_stream(a.device) if on_cuda else None
    if phase != 2:
        for step in range(world - 1):
            owner = (rank + 1 + step) % world
            block = torch.mm(a[owner * ms : (owner + 1) * ms], b)
            target = peers.buffer(owner, parity)[rank * ms * n : (rank + 1) * ms * n].view(ms, n)
            if side is not None:
                side.wait_stream(torch.cuda.current_stream(a.device))
                with torch.cuda.stream(side):
                    target.copy_(block, non_blocking=True)
                    signal_flag(peers.peer_flags[owner], rank, epoch)
                block.record_stream(side)
            else:
                target.copy_(block)
                signal_flag(peers.peer_flags[owner], rank, epoch)
    if phase != 1:
        own = torch.mm(a[rank * ms : (rank + 1) * ms], b)
        block = 4096
        # At most one program per SM but two: this GPU's flag kernels must still find one.
        _reduce_inbox_kernel[(min(triton.cdiv(ms * n, block), resident_programs(a.device, 2)),)](
            own, inbox, out, peers.flags, peers.status, ms * n, rank, world, epoch, max_spins, BLOCK=block, num_warps=8
        )
    if side is not None:
        # The call ends when its pushes have: a caller timing it sees all of its work.
        torch.cuda.current_stream(a.device).wait_stream(side)


def matmul_reduce_scatter(
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
    """This rank's rows of ``sum over ranks of a @ b``: (M / world, N) in ``a``'s dtype, into
    ``out`` (contiguous) when given. Collective: every rank calls it with the same shapes and
    ``config``. ``phase``/``epoch`` serve simulated ranks (tests): phase 1 pushes, phase 2
    reduces, under one given epoch."""
    world, rank = peers.world, peers.rank
    ms, n = a.shape[0] // world, b.shape[1]
    m, k, n = checked_shapes("matmul_reduce_scatter", a, b, peers, buffer_numel(world, ms, n), flags_needed(world, ms, n, config), out, (ms, n))
    if epoch is None:
        epoch = peers.next_epoch()
    parity = epoch % 2
    inbox = peers.buffer(rank, parity)[: world * ms * n]
    if out is None:
        out = torch.empty(ms, n, dtype=a.dtype, device=a.device)
    if config.consumer == "cublas":
        _cublas_path(a, b, out, inbox, peers, epoch, max_spins, phase, a.is_cuda and phase == 0)
        return out
    grid = (world * tiles_per_owner(ms, n, config),)
    _gemm_rs_kernel[grid](
        a, b, out, inbox, peers.flags, peers.status, peers.data_ptrs, peers.flag_ptrs,
        ms, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        rank, world, epoch, parity * peers.numel, max_spins, 0,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        PHASE=phase, IEEE=a.dtype == torch.float32, ALL_GATHER=False, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out
