"""MoE dispatch and combine over symmetric memory, fused with the expert GEMM and the weighted sum.

Experts are split evenly: rank d holds experts ``d*local .. (d+1)*local - 1``. A rank's (token,
slot) pairs, sorted by expert (stable), go to the experts' ranks; a rank lays out what it receives
by local expert, then source rank, then the source's pair order (the all-to-all-v dispatcher's
layout). Given every rank's expert counts (``counts_all``, exchanged by the caller), every rank
computes where each of its pairs lands on its destination (``route``), with no host round trip.

- ``dispatch``: programs ``0..P-1`` store each pair's token row (and router weight) straight into
  its row of the destination's receive buffer and flag the destination once per program; the rest
  compute the expert GEMM ``rows_j @ W[j]`` tile by tile (or copy the rows out, without weights),
  each tile waiting only for the sources its rows came from.
- ``combine``: the expert rank stores each output row straight back into its source's return
  buffer at the pair's sorted position and flags it; the source's programs then sum each token's
  ``k`` rows weighted by the router (float32, one rounding), waiting for the ranks that hold them.
  A token's ``k`` rows are loaded as one block per column block (one index load per token, not
  one per slot and column block: combine read 0.23x of NCCL on 2xH200 with the sums done row by
  row), by up to one program per SM (``reduce_programs``).

The output sizes depend on the routing, so the caller reads ``tokens_per_expert`` on the host (as
the all-to-all-v it replaces does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .peers import NO_TIMEOUT, Peers, resident_programs
from .signal import PER_CALL, signal, wait


@dataclass(frozen=True)
class MoeConfig:
    """The defaults are what won on 2xH200 and 4xH200 (``results/gpu/h200x4-session20/``): 64
    pushing programs moving 4 rows at once, combine's sums over every SM. Against one row at a
    time (and 32 programs) they were 15-40% faster in dispatch, dispatch + GEMM and combine."""

    comm_programs: int = 64
    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    block_h: int = 1024  # columns a push or a copy moves at once
    reduce_programs: int = 1 << 16  # combine: programs that sum tokens (at least comm_programs; capped at one per SM)
    push_rows: int = 4  # rows a pushing program moves at once (a power of two)
    num_warps: int = 8
    num_stages: int = 3


#: The configurations a caller times on its target before choosing: the one that won (``p32``,
#: ``p64_wide``, one row at a time, lost at both world sizes and were dropped).
TUNING = {"p64_rows4": MoeConfig()}


@dataclass
class Routing:
    """Where this rank's pairs go and what it receives (all on the device but the sizes)."""

    rank: int
    world: int
    local: int  # experts per rank
    k: int  # pairs per token
    order: torch.Tensor  # (pairs,) pair index in expert order (stable)
    dest: torch.Tensor  # (pairs,) destination rank of sorted pair i
    dest_row: torch.Tensor  # (pairs,) its row in the destination's receive buffer
    tokens_per_expert: torch.Tensor  # (local,) rows this rank's experts receive
    expert_start: torch.Tensor  # (local + 1,) first row of each local expert here
    source_start: torch.Tensor  # (local, world + 1) first row of each source within a local expert here
    received: int  # rows this rank receives (host)
    capacity: int  # the most rows any rank receives (host; sizes the symmetric buffers alike)


def route(topk_idx: torch.Tensor, counts_all: torch.Tensor, rank: int, world: int, num_experts: int) -> Routing:
    """The routing of this rank's pairs, from every rank's expert counts ``counts_all`` (world, E)."""
    if num_experts % world or tuple(counts_all.shape) != (world, num_experts):
        raise ValueError(f"route needs experts divisible by {world} ranks and counts of shape {(world, num_experts)}, got {num_experts} and {tuple(counts_all.shape)}")
    local = num_experts // world
    k = topk_idx.shape[1]
    flat = topk_idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    expert = flat[order]
    counts_all = counts_all.to(torch.int64)
    mine = counts_all[rank]
    first_of_expert = torch.cumsum(mine, 0) - mine  # sorted position of each expert's first pair
    within = torch.arange(flat.numel(), device=flat.device) - first_of_expert[expert]
    per_dest = counts_all.view(world, world, local)  # [source, dest, local expert]
    tpe_all = per_dest.sum(0)  # [dest, local expert]
    expert_start_all = torch.cumsum(tpe_all, 1) - tpe_all  # [dest, local expert]
    source_start_all = torch.cumsum(per_dest, 0) - per_dest  # [source, dest, local expert]: rows of earlier sources
    dest, j = expert // local, expert % local
    dest_row = expert_start_all[dest, j] + source_start_all[rank, dest, j] + within
    tpe = tpe_all[rank]
    sizes = tpe_all.sum(1).tolist()  # one host read: the receive sizes of every rank
    source_start = torch.cat([torch.zeros(local, 1, dtype=torch.int64, device=flat.device), torch.cumsum(per_dest[:, rank, :].t(), 1)], 1)
    return Routing(
        rank=rank, world=world, local=local, k=k, order=order, dest=dest, dest_row=dest_row, tokens_per_expert=tpe,
        expert_start=torch.cat([torch.zeros(1, dtype=torch.int64, device=flat.device), torch.cumsum(tpe, 0)]),
        source_start=source_start, received=int(sizes[rank]), capacity=max(1, int(max(sizes))),
    )  # fmt: skip


def _tiles(routing: Routing, block_m: int) -> torch.Tensor:
    """(tiles, 2) int32: (local expert, first row within it) of each row tile of the receive side."""
    tiles = [(j, r) for j, n in enumerate(routing.tokens_per_expert.tolist()) for r in range(0, n, block_m)]
    return torch.tensor(tiles or [(0, 0)], dtype=torch.int32, device=routing.order.device).reshape(-1, 2)


@triton.jit
def _push_rows(src_ptr, src_rows_ptr, src_w_ptr, row_index_ptr, dest_ptr, data_ptrs, wdata_ptrs, flag_ptrs, n, H, rank, world, epoch, parity_offset, w_parity_offset, program, programs, BLOCK_H: tl.constexpr, WITH_W: tl.constexpr, ROWS: tl.constexpr):
    """Programs share items ``0..n-1``: item i moves row ``src_rows[i]`` of ``src`` (and weight
    ``src_w[i]``) to row ``row_index[i]`` of rank ``dest[i]``'s buffer; then each flags every rank.
    ``ROWS`` items move together (their column blocks in flight at once: one item at a time, a
    program waited out a load per column block, and read 15-40% slower on H200s)."""
    _push_row_groups(src_ptr, src_rows_ptr, src_w_ptr, row_index_ptr, dest_ptr, data_ptrs, wdata_ptrs, n, H, parity_offset, w_parity_offset,
                     program, programs, BLOCK_H, WITH_W, ROWS)  # fmt: skip
    for step in range(0, world):
        peer = (rank + step) % world
        signal(tl.load(flag_ptrs + peer).to(tl.pointer_type(tl.int32)) + rank * programs + program, epoch)


@triton.jit
def _push_row_groups(src_ptr, src_rows_ptr, src_w_ptr, row_index_ptr, dest_ptr, data_ptrs, wdata_ptrs, n, H, parity_offset, w_parity_offset, program, programs, BLOCK_H: tl.constexpr, WITH_W: tl.constexpr, ROWS: tl.constexpr):
    """``_push_rows``'s items ``ROWS`` at a time."""
    cols = tl.arange(0, BLOCK_H)
    items = tl.arange(0, ROWS)
    for i0 in range(program * ROWS, n, programs * ROWS):
        i = i0 + items
        ok = i < n
        d = tl.load(dest_ptr + i, mask=ok, other=0)
        row = tl.load(row_index_ptr + i, mask=ok, other=0).to(tl.int64)
        src_row = tl.load(src_rows_ptr + i, mask=ok, other=0).to(tl.int64)
        base = tl.load(data_ptrs + d, mask=ok, other=0).to(tl.pointer_type(src_ptr.dtype.element_ty)) + parity_offset + row * H
        for c0 in range(0, H, BLOCK_H):
            mask = ok[:, None] & (c0 + cols < H)[None, :]
            values = tl.load(src_ptr + src_row[:, None] * H + (c0 + cols)[None, :], mask=mask)
            tl.store(base[:, None] + (c0 + cols)[None, :], values, mask=mask)
        if WITH_W:
            wbase = tl.load(wdata_ptrs + d, mask=ok, other=0).to(tl.pointer_type(tl.float32)) + w_parity_offset
            tl.store(wbase + row, tl.load(src_w_ptr + i, mask=ok, other=0.0).to(tl.float32), mask=ok)


@triton.jit
def _wait_sources(flags_ptr, status_ptr, source_start_ptr, j, lo, hi, world, programs, epoch, max_spins):
    """Wait for every program of every source whose rows of local expert ``j`` meet ``lo..hi-1``."""
    for s in range(0, world):
        s_lo = tl.load(source_start_ptr + j * (world + 1) + s)
        s_hi = tl.load(source_start_ptr + j * (world + 1) + s + 1)
        if (s_lo < hi) & (s_hi > lo):
            for p in range(0, programs):
                wait(flags_ptr + s * programs + p, epoch, max_spins, status_ptr)


@triton.jit(do_not_specialize=PER_CALL)
def _dispatch_kernel(
    x_ptr, token_ptr, w_ptr, row_ptr, dest_ptr, recv_ptr, recv_w_ptr, out_ptr, out_w_ptr, weight_ptr,
    tiles_ptr, expert_start_ptr, source_start_ptr, flags_ptr, status_ptr, data_ptrs, wdata_ptrs, flag_ptrs,
    n_pairs, H, N, rank, world, epoch, parity_offset, w_parity_offset, max_spins,
    PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr,
    GEMM: tl.constexpr, PHASE: tl.constexpr, IEEE: tl.constexpr, PUSH_ROWS: tl.constexpr,
):  # fmt: skip
    # PHASE 0: everything; 1: only the pushes; 2: only the receive side (simulated ranks).
    pid = tl.program_id(0)
    if pid < PROGRAMS:
        if PHASE != 2:
            _push_rows(x_ptr, token_ptr, w_ptr, row_ptr, dest_ptr, data_ptrs, wdata_ptrs, flag_ptrs, n_pairs, H, rank, world, epoch, parity_offset, w_parity_offset, pid, PROGRAMS, BLOCK_H, True, PUSH_ROWS)
    elif PHASE != 1:
        t = pid - PROGRAMS
        if GEMM:
            num_n = tl.cdiv(N, BLOCK_N)
        else:
            num_n = N * 0 + 1
        tile, pid_n = t // num_n, t % num_n
        j = tl.load(tiles_ptr + 2 * tile)
        r0 = tl.load(tiles_ptr + 2 * tile + 1)
        start = tl.load(expert_start_ptr + j)
        rows_j = tl.load(expert_start_ptr + j + 1) - start
        _wait_sources(flags_ptr, status_ptr, source_start_ptr, j, r0, tl.minimum(r0 + BLOCK_M, rows_j), world, PROGRAMS, epoch, max_spins)
        local_rows = r0 + tl.arange(0, BLOCK_M)
        row_ok = local_rows < rows_j
        rows = start + local_rows
        if GEMM:
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            ks = tl.arange(0, BLOCK_K)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, H, BLOCK_K):
                k_ok = k0 + ks < H
                a = tl.load(recv_ptr + rows[:, None] * H + (k0 + ks)[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                b = tl.load(weight_ptr + j * H * N + (k0 + ks)[:, None] * N + cols[None, :], mask=k_ok[:, None] & (cols < N)[None, :], other=0.0)
                if IEEE:
                    acc = tl.dot(a, b, acc, input_precision="ieee")
                else:
                    acc = tl.dot(a, b, acc)
            tl.store(out_ptr + rows[:, None] * N + cols[None, :], acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < N)[None, :])
        else:
            cols = tl.arange(0, BLOCK_H)
            for c0 in range(0, H, BLOCK_H):
                mask = row_ok[:, None] & (c0 + cols < H)[None, :]
                values = tl.load(recv_ptr + rows[:, None] * H + (c0 + cols)[None, :], mask=mask)
                tl.store(out_ptr + rows[:, None] * H + (c0 + cols)[None, :], values, mask=mask)
            tl.store(out_w_ptr + rows, tl.load(recv_w_ptr + rows, mask=row_ok), mask=row_ok)


def buffers_needed(routing: Routing, hidden: int, config: MoeConfig) -> tuple[int, int]:
    """(rows x hidden elements of the receive buffer, flags) this routing needs."""
    return routing.capacity * hidden, routing.world * config.comm_programs


def dispatch(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    routing: Routing,
    peers: Peers,
    peers_w: Peers,
    config: MoeConfig = MoeConfig(),
    *,
    expert_weight: torch.Tensor | None = None,
    max_spins: int = NO_TIMEOUT,
    phase: int = 0,
    epoch: int | None = None,
):
    """Without ``expert_weight``: ``(expert_x, expert_w, tokens_per_expert)``, what the all-to-all-v
    dispatcher returns. With it ((local, hidden, ffn)): ``(expert_x_j @ W[j] for each local expert,
    rows concatenated, tokens_per_expert)``. ``peers`` holds ``x``'s dtype, ``peers_w`` float32."""
    n_pairs, hidden = routing.order.numel(), x.shape[1]
    numel, flags = buffers_needed(routing, hidden, config)
    if peers.numel < numel or peers.n_flags < flags or peers_w.numel < routing.capacity or peers.data.dtype != x.dtype or not x.is_contiguous():
        raise ValueError("the peers' buffers are too small for this routing, or of another dtype, or x is not contiguous")
    gemm = expert_weight is not None
    if gemm and (expert_weight.dim() != 3 or tuple(expert_weight.shape[:2]) != (routing.local, hidden) or not expert_weight.is_contiguous() or expert_weight.dtype != x.dtype):
        raise ValueError(f"expert_weight must be a contiguous ({routing.local}, {hidden}, ffn) {x.dtype} tensor")
    if epoch is None:
        epoch = peers.next_epoch()
        peers_w.next_epoch()
    parity = epoch % 2
    n_out = expert_weight.shape[2] if gemm else hidden
    out = torch.empty(routing.received, n_out, dtype=x.dtype, device=x.device)
    out_w = torch.empty(routing.received if not gemm else 1, dtype=torch.float32, device=x.device)
    tiles = _tiles(routing, config.block_m)
    grid_n = triton.cdiv(n_out, config.block_n) if gemm else 1
    consumers = tiles.shape[0] * grid_n if routing.received else 0
    programs = config.comm_programs + (0 if phase == 1 else consumers)
    token = (routing.order // routing.k).to(torch.int64)
    weights = topk_weights.reshape(-1)[routing.order].contiguous()
    _dispatch_kernel[(programs,)](
        x, token, weights, routing.dest_row, routing.dest, peers.buffer(peers.rank, parity), peers_w.buffer(peers_w.rank, parity),
        out, out_w, expert_weight if gemm else x, tiles, routing.expert_start, routing.source_start.contiguous(),
        peers.flags, peers.status, peers.data_ptrs, peers_w.data_ptrs, peers.flag_ptrs,
        n_pairs, hidden, n_out, routing.rank, routing.world, epoch, parity * peers.numel, parity * peers_w.numel, max_spins,
        PROGRAMS=config.comm_programs, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, BLOCK_H=config.block_h,
        GEMM=gemm, PHASE=phase, IEEE=x.dtype == torch.float32, PUSH_ROWS=config.push_rows, num_warps=config.num_warps,
        num_stages=config.num_stages,
    )  # fmt: skip
    if gemm:
        return out, routing.tokens_per_expert
    return out, out_w, routing.tokens_per_expert


@triton.jit(do_not_specialize=PER_CALL)
def _combine_kernel(
    out_rows_ptr, src_index_ptr, dest_ptr, row_ptr, ret_ptr, inv_ptr, topw_ptr, out_ptr, flags_ptr, status_ptr, data_ptrs, flag_ptrs,
    n_rows, tokens, H, rank, world, epoch, parity_offset, max_spins,
    K: tl.constexpr, K_POW2: tl.constexpr, PROGRAMS: tl.constexpr, BLOCK_H: tl.constexpr, PHASE: tl.constexpr, PUSH_ROWS: tl.constexpr,
):  # fmt: skip
    # Programs 0..PROGRAMS-1 push, then every program of the grid (PROGRAMS or more) reduces.
    pid = tl.program_id(0)
    if (PHASE != 2) & (pid < PROGRAMS):
        _push_rows(out_rows_ptr, src_index_ptr, topw_ptr, row_ptr, dest_ptr, data_ptrs, data_ptrs, flag_ptrs, n_rows, H, rank, world, epoch, parity_offset, 0, pid, PROGRAMS, BLOCK_H, False, PUSH_ROWS)
    if PHASE != 1:
        for s in range(0, world):
            for p in range(0, PROGRAMS):
                wait(flags_ptr + s * PROGRAMS + p, epoch, max_spins, status_ptr)
        cols = tl.arange(0, BLOCK_H)
        slots = tl.arange(0, K_POW2)
        in_k = slots < K
        for t in range(pid, tokens, tl.num_programs(0)):
            # A token's K rows and weights are read once, then each column block of all K rows is
            # loaded at once: one round trip per block, not one per (slot, block) behind an index load.
            rows = tl.load(inv_ptr + t * K + slots, mask=in_k, other=0)
            w = tl.load(topw_ptr + t * K + slots, mask=in_k, other=0.0).to(tl.float32)
            for c0 in range(0, H, BLOCK_H):
                mask = c0 + cols < H
                part = tl.load(ret_ptr + rows[:, None] * H + c0 + cols[None, :], mask=in_k[:, None] & mask[None, :], other=0.0)
                acc = tl.sum(w[:, None] * part.to(tl.float32), axis=0)
                tl.store(out_ptr + t * H + c0 + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


def combine(
    expert_out: torch.Tensor,
    topk_weights: torch.Tensor,
    routing: Routing,
    return_rows: torch.Tensor,
    peers: Peers,
    config: MoeConfig = MoeConfig(),
    *,
    max_spins: int = NO_TIMEOUT,
    phase: int = 0,
    epoch: int | None = None,
) -> torch.Tensor:
    """``sum_j w[t, j] * expert_out(t, j)`` for this rank's tokens (float32 sums, ``expert_out``'s
    dtype): each expert row goes back to its source's return buffer at the pair's sorted position.
    ``return_rows`` ((received, 2): source rank, sorted position there, of each row of
    ``expert_out``) comes from ``return_map``, computed from every rank's routing."""
    tokens, k = topk_weights.shape
    hidden = expert_out.shape[1]
    if peers.numel < tokens * k * hidden or peers.n_flags < routing.world * config.comm_programs or peers.data.dtype != expert_out.dtype:
        raise ValueError("the peers' buffers are too small for this combine, or of another dtype")
    if expert_out.shape[0] != routing.received or not expert_out.is_contiguous():
        raise ValueError(f"expert_out must be a contiguous ({routing.received}, hidden) tensor")
    if epoch is None:
        epoch = peers.next_epoch()
    parity = epoch % 2
    inv = torch.empty_like(routing.order)
    inv[routing.order] = torch.arange(routing.order.numel(), device=inv.device)
    out = torch.empty(tokens, hidden, dtype=expert_out.dtype, device=expert_out.device)
    rows = torch.arange(expert_out.shape[0], device=expert_out.device)
    # Every program may spin on the flags: the grid stays within what the GPU holds at once.
    grid = max(config.comm_programs, min(config.reduce_programs, resident_programs(expert_out.device)))
    _combine_kernel[(grid,)](
        expert_out, rows, return_rows[:, 0].contiguous(), return_rows[:, 1].contiguous(), peers.buffer(peers.rank, parity), inv,
        topk_weights.contiguous(), out, peers.flags, peers.status, peers.data_ptrs, peers.flag_ptrs,
        expert_out.shape[0], tokens, hidden, routing.rank, routing.world, epoch, parity * peers.numel, max_spins,
        K=k, K_POW2=triton.next_power_of_2(k), PROGRAMS=config.comm_programs, BLOCK_H=config.block_h, PHASE=phase,
        PUSH_ROWS=config.push_rows, num_warps=config.num_warps,
    )  # fmt: skip
    return out


def return_map(routing: Routing, counts_all: torch.Tensor) -> torch.Tensor:
    """(received, 2) int64: for each row this rank's experts hold (expert, source, pair order),
    the source rank and the row's position in that source's sorted pairs. On the device with no
    host read (its size is ``routing.received``): the loop it replaced read one count per
    (expert, source) on the host, 256 synchronisations a call at the suite's shape, and made the
    combine bench read 0.23x of NCCL when the kernel was not the cost."""
    world, local, rank = routing.world, routing.local, routing.rank
    counts_all = counts_all.to(torch.int64)
    device = counts_all.device
    first_of_expert = torch.cumsum(counts_all, 1) - counts_all  # [source, expert]: sorted position of its first pair
    mine = slice(rank * local, (rank + 1) * local)
    seg_len = counts_all[:, mine].t().reshape(-1)  # segments in receive order: expert-major, then source
    seg_start = first_of_expert[:, mine].t().reshape(-1)
    seg_source = torch.arange(world, device=device).repeat(local)
    seg = torch.repeat_interleave(torch.arange(seg_len.numel(), device=device), seg_len, output_size=routing.received)
    within = torch.arange(routing.received, device=device) - (torch.cumsum(seg_len, 0) - seg_len)[seg]
    return torch.stack([seg_source[seg], seg_start[seg] + within], 1)
