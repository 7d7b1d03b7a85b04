"""All-gather + GEMM: ``all_gather(shard) @ b`` where every output tile waits only for the rows
it needs.

Every rank pushes its shard (``ms x K`` rows) into each peer's gathered buffer, chunk by chunk,
and after each chunk writes the call's epoch into the peer's flag for (source rank, chunk). The
consumer computes output tiles in rotated row order, its own shard first (read straight from
``shard``, nothing to wait for), then the shard of rank+1, rank+2, ...; before its K loop a tile
waits on the flags of exactly the chunks its rows come from. Each rank pushes to rank-1 first,
the peer that needs its shard soonest.

Tunables (``AgGemmConfig``):
- ``comm``: ``"ce"`` pushes with the copy engines on a side stream (no SMs spent; a tiny kernel
  writes each flag after its copy), ``"sm"`` gives the first ``comm_programs`` programs of the
  GEMM kernel the pushes (stores over NVLink) and the rest the tiles;
- ``consumer``: ``"triton"`` (the tile loop here) or ``"cublas"`` (per chunk: a wait kernel,
  then cuBLAS on the chunk's rows; for shapes where cuBLAS's GEMM is worth more than tile-level
  waiting);
- ``chunks`` per shard (finer: earlier starts, more flags), tile sizes, warps and stages.

Outside its envelope (``supported``) the caller runs ``all_gather_into_tensor`` + matmul.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .peers import NO_TIMEOUT, Peers, resident_programs, side_stream
from .signal import PER_CALL, signal, signal_flag, wait, wait_flags
from .tiles import swizzle


@dataclass(frozen=True)
class AgGemmConfig:
    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    chunks: int = 1
    comm: str = "ce"  # "ce" | "sm"
    comm_programs: int = 0  # with comm == "sm"
    consumer: str = "triton"  # "triton" | "cublas"

    def __post_init__(self):
        if self.comm not in ("ce", "sm") or self.consumer not in ("triton", "cublas"):
            raise ValueError(f"unknown comm {self.comm!r} or consumer {self.consumer!r}")
        if (self.comm == "sm") != (self.comm_programs > 0):
            raise ValueError("comm='sm' needs comm_programs > 0, and only it")
        if self.comm == "sm" and self.consumer != "triton":
            raise ValueError("SM pushes run inside the Triton GEMM kernel: consumer must be 'triton'")
        if self.chunks < 1:
            raise ValueError("chunks must be at least 1")


#: The configurations a caller times on its target before choosing (``runtime.py``, the benchmark):
#: 128x256 tiles (Hopper's sweet spot for bf16), whole shards or 4 chunks per shard, copy engines
#: or 16 SMs pushing, and cuBLAS consumers.
TUNING = {
    "triton_ce": AgGemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, chunks=1),
    "triton_ce_chunks4": AgGemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, chunks=4),
    "triton_sm16": AgGemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, chunks=4, comm="sm", comm_programs=16),
    "cublas_ce": AgGemmConfig(consumer="cublas", chunks=1),
    "cublas_ce_chunks2": AgGemmConfig(consumer="cublas", chunks=2),
}


def flags_needed(world: int, config: AgGemmConfig) -> int:
    return world * config.chunks


def buffer_numel(world: int, shard_rows: int, k: int) -> int:
    return world * shard_rows * k


def supported(shard: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the kernel takes these operands (else: all_gather_into_tensor, then matmul)."""
    return (
        shard.dim() == 2
        and b.dim() == 2
        and shard.shape[1] == b.shape[0]
        and shard.dtype == b.dtype
        and shard.dtype in (torch.bfloat16, torch.float16, torch.float32)
        and shard.device == b.device
        and shard.is_contiguous()
        and shard.numel() > 0
        and b.shape[1] > 0
    )


@triton.jit
def _push_chunks(shard_ptr, data_ptrs, flag_ptrs, parity_offset, rank, world, ms, K, chunk_rows, n_chunks, epoch, program, programs, COPY: tl.constexpr):
    """Programs ``0..programs-1`` share the (peer, chunk) pushes: rank-1 first, then rank-2, ..."""
    items = (world - 1) * n_chunks
    for item in range(program, items, programs):
        dst = (rank - 1 - item // n_chunks + world) % world
        c = item % n_chunks
        row0 = c * chunk_rows
        rows = tl.minimum(chunk_rows, ms - row0)
        src = shard_ptr + row0 * K
        base = tl.load(data_ptrs + dst).to(tl.pointer_type(shard_ptr.dtype.element_ty))
        dst_ptr = base + parity_offset + (rank * ms + row0) * K
        n = rows * K
        for start in range(0, n, COPY):
            offs = start + tl.arange(0, COPY)
            mask = offs < n
            tl.store(dst_ptr + offs, tl.load(src + offs, mask=mask), mask=mask)
        flag_base = tl.load(flag_ptrs + dst).to(tl.pointer_type(tl.int32))
        signal(flag_base + rank * n_chunks + c, epoch)


@triton.jit
def _wait_rows(flags_ptr, status_ptr, lo, hi, rank, ms, M, chunk_rows, n_chunks, epoch, max_spins):
    """Wait for every peer chunk that holds one of the rotated rows ``lo..hi-1``."""
    r = lo
    while r < hi:
        row = (r + rank * ms) % M
        s = row // ms
        off = row - s * ms
        c = off // chunk_rows
        if s != rank:
            wait(flags_ptr + s * n_chunks + c, epoch, max_spins, status_ptr)
        r += tl.minimum(chunk_rows - (off - c * chunk_rows), ms - off)


@triton.jit(do_not_specialize=PER_CALL)
def _ag_gemm_kernel(
    shard_ptr, gathered_ptr, b_ptr, c_ptr, flags_ptr, status_ptr, data_ptrs, flag_ptrs,
    ms, N, K, stride_bk, stride_bn, stride_cm, stride_cn,
    rank, world, epoch, parity_offset, max_spins, chunk_rows, n_chunks, total_tiles, consumers,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    COMM_PROGRAMS: tl.constexpr, PHASE: tl.constexpr, IEEE: tl.constexpr, COPY: tl.constexpr,
):  # fmt: skip
    # PHASE 0: everything (production); 1: only this rank's pushes; 2: only the tiles. Triton's
    # interpreter runs programs one after another, so simulated ranks run phase 1, then phase 2.
    pid = tl.program_id(0)
    M = ms * world
    if pid < COMM_PROGRAMS:
        if PHASE != 2:
            _push_chunks(shard_ptr, data_ptrs, flag_ptrs, parity_offset, rank, world, ms, K, chunk_rows, n_chunks, epoch, pid, COMM_PROGRAMS, COPY)
    elif PHASE != 1:
        # Persistent: at most ``consumers`` programs walk the tiles in order, so spinning tiles
        # never fill the GPU and the flag kernels of this GPU's copy-engine pushes always find an SM.
        for tile in range(pid - COMM_PROGRAMS, total_tiles, consumers):
            _tile(shard_ptr, gathered_ptr, b_ptr, c_ptr, flags_ptr, status_ptr, tile, ms, N, K, M, stride_bk, stride_bn, stride_cm, stride_cn,
                  rank, epoch, max_spins, chunk_rows, n_chunks, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, IEEE)  # fmt: skip


@triton.jit
def _tile(
    shard_ptr, gathered_ptr, b_ptr, c_ptr, flags_ptr, status_ptr, tile, ms, N, K, M, stride_bk, stride_bn, stride_cm, stride_cn,
    rank, epoch, max_spins, chunk_rows, n_chunks,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """One output tile, in rotated row order (this rank's shard first), after its rows' flags."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = swizzle(tile, num_m, num_n, GROUP_M)

    lo = pid_m * BLOCK_M
    _wait_rows(flags_ptr, status_ptr, lo, tl.minimum(lo + BLOCK_M, M), rank, ms, M, chunk_rows, n_chunks, epoch, max_spins)

    rotated = lo + tl.arange(0, BLOCK_M)
    row_ok = rotated < M
    rows = (rotated + rank * ms) % M
    own = (rows >= rank * ms) & (rows < rank * ms + ms)
    local_rows = tl.where(own, rows - rank * ms, 0)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = tl.where(own[:, None], shard_ptr + local_rows[:, None] * K, gathered_ptr + rows[:, None] * K) + ks[None, :]
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
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _chunk_rows(shard_rows: int, chunks: int) -> int:
    return -(-shard_rows // chunks)


def _push_copy_engine(shard: torch.Tensor, peers: Peers, epoch: int, chunks: int) -> None:
    """Copy-engine pushes of this rank's shard into each peer's gathered buffer, rank-1 first,
    each chunk followed by its flag."""
    ms, k = shard.shape
    cr = _chunk_rows(ms, chunks)
    n_chunks = -(-ms // cr)
    for step in range(1, peers.world):
        dst = (peers.rank - step) % peers.world
        gathered = peers.buffer(dst, epoch % 2)[: peers.world * ms * k].view(peers.world * ms, k)
        for c in range(n_chunks):
            r0, r1 = c * cr, min(ms, (c + 1) * cr)
            gathered[peers.rank * ms + r0 : peers.rank * ms + r1].copy_(shard[r0:r1], non_blocking=True)
            signal_flag(peers.peer_flags[dst], peers.rank * n_chunks + c, epoch)


def _cublas_consumer(shard, gathered, b, out, peers: Peers, epoch: int, chunks: int, max_spins: int) -> None:
    ms = shard.shape[0]
    cr = _chunk_rows(ms, chunks)
    n_chunks = -(-ms // cr)
    for step in range(peers.world):
        s = (peers.rank + step) % peers.world
        if s == peers.rank:
            torch.mm(shard, b, out=out[s * ms : (s + 1) * ms])
            continue
        for c in range(n_chunks):
            r0, r1 = s * ms + c * cr, s * ms + min(ms, (c + 1) * cr)
            wait_flags(peers.flags, s * n_chunks + c, 1, epoch, max_spins, peers.status)
            torch.mm(gathered[r0:r1], b, out=out[r0:r1])


def all_gather_matmul(
    shard: torch.Tensor,
    b: torch.Tensor,
    peers: Peers,
    config: AgGemmConfig = AgGemmConfig(),
    *,
    gathered_out: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    max_spins: int = NO_TIMEOUT,
    phase: int = 0,
    epoch: int | None = None,
) -> torch.Tensor:
    """``all_gather(shard) @ b`` over ``peers`` ((world*ms, N), ``shard``'s dtype). Collective:
    every rank calls it with its shard, the same ``b`` shape and the same ``config``. With
    ``gathered_out``, the gathered rows are also written there; with ``out`` (any strides, e.g. the
    transpose of a contiguous tensor), the product is written there. ``phase``/``epoch`` serve
    simulated ranks (tests): phase 1 pushes, phase 2 computes, both under one given epoch."""
    if not supported(shard, b):
        raise ValueError(f"all_gather_matmul does not take shard {tuple(shard.shape)} {shard.dtype} and b {tuple(b.shape)} {b.dtype}")
    world, rank = peers.world, peers.rank
    ms, k = shard.shape
    n = b.shape[1]
    if peers.numel < buffer_numel(world, ms, k) or peers.n_flags < flags_needed(world, config) or peers.data.dtype != shard.dtype:
        raise ValueError("the peers' buffers are too small for this call or of another dtype")
    if epoch is None:
        epoch = peers.next_epoch()
    parity = epoch % 2
    gathered = peers.buffer(rank, parity)[: world * ms * k].view(world * ms, k)
    if out is None:
        out = torch.empty(world * ms, n, dtype=shard.dtype, device=shard.device)
    elif tuple(out.shape) != (world * ms, n) or out.dtype != shard.dtype:
        raise ValueError(f"out must be {(world * ms, n)} {shard.dtype}, got {tuple(out.shape)} {out.dtype}")
    cr = _chunk_rows(ms, config.chunks)
    n_chunks = -(-ms // cr)
    side = side_stream(shard.device) if shard.is_cuda and config.comm == "ce" and phase == 0 else None
    if config.comm == "ce" and phase != 2:
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(shard.device))
            with torch.cuda.stream(side):
                _push_copy_engine(shard, peers, epoch, config.chunks)
            shard.record_stream(side)
        else:
            _push_copy_engine(shard, peers, epoch, config.chunks)
    if config.consumer == "cublas":
        if phase != 1:
            _cublas_consumer(shard, gathered, b, out, peers, epoch, config.chunks, max_spins)
    else:
        tiles = triton.cdiv(world * ms, config.block_m) * triton.cdiv(n, config.block_n)
        comm_programs = config.comm_programs if config.comm == "sm" else 0
        # Copy-engine pushes need an SM for each flag kernel: two are left free.
        consumers = min(tiles, resident_programs(shard.device, comm_programs + (2 if config.comm == "ce" else 0)))
        if phase == 1:
            consumers = 0
        if consumers + comm_programs:
            _ag_gemm_kernel[(comm_programs + consumers,)](
                shard, gathered, b, out, peers.flags, peers.status, peers.data_ptrs, peers.flag_ptrs,
                ms, n, k, b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                rank, world, epoch, parity * peers.numel, max_spins, cr, n_chunks, tiles, max(consumers, 1),
                BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                COMM_PROGRAMS=comm_programs, PHASE=phase, IEEE=shard.dtype == torch.float32, COPY=1024,
                num_warps=config.num_warps, num_stages=config.num_stages,
            )  # fmt: skip
    if side is not None:
        torch.cuda.current_stream(shard.device).wait_stream(side)
    if gathered_out is not None and phase != 1:
        gathered_out.copy_(gathered)
        gathered_out[rank * ms : (rank + 1) * ms].copy_(shard)
    return out
