"""All-reduce fused with the residual add and RMSNorm that follow it, one-shot or two-shot, in one
kernel launch (no separate copy into a symmetric buffer, no barrier kernel).

Rows are dealt to ``programs`` programs (row i to program i mod programs) on every rank alike, so
a program only ever waits for the same program of its peers:

- one-shot: a program stores its rows of the input into every peer's inbox (slot: this rank),
  flags each peer, waits for every peer's flag, then sums the ``world`` copies of its rows in
  float32 in rank order (every rank gets the same bits), rounds once, adds the residual, norms.
  Each rank sends (world-1) x the tensor; latency: one exchange. For small messages.
- two-shot: rank c owns the c-th block of rows. A program stores its rows of block c into owner
  c's inbox, the owner sums its block and stores the rounded sum into every rank's gather region,
  and every rank then adds its residual and norms all rows. Each rank sends 2(world-1)/world x
  the tensor, as a ring; latency: two exchanges. For larger messages.
- ``reduce_scatter_add_rmsnorm_all_gather`` (sequence parallelism): two-shot where the owner adds
  its residual shard, norms its block, keeps ``h`` and gathers only the normed rows.

Outputs follow the references' roundings: ``h`` = round(round(sum) + residual); the norm is taken
in float32 of ``h``; ``weight_mode`` ``"round_then_scale"`` is ``weight * normed.to(dtype)`` and
``"float32"`` is ``(normed * weight.float()).to(dtype)``.

Outside its envelope (``supported``) the caller runs ``all_reduce`` and the eager ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .launch import launch
from .peers import NO_TIMEOUT, Peers
from .signal import PER_CALL, signal, wait

#: The widest row a program holds at once.
MAX_ROW = 32768
#: Row width a flat (norm-less) all-reduce is cut into.
FLAT_ROW = 8192
_WEIGHT_MODES = {None: 0, "round_then_scale": 1, "float32": 2}
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class ArNormConfig:
    algo: str = "one_shot"  # "one_shot" | "two_shot"
    programs: int = 32
    num_warps: int = 8

    def __post_init__(self):
        if self.algo not in ("one_shot", "two_shot") or self.programs < 1:
            raise ValueError(f"unknown algo {self.algo!r} or programs {self.programs}")


#: The configurations a caller times on its target before choosing: one-shot with few programs
#: (small messages: fewer flags to wait on) or many, two-shot with many.
TUNING = {
    "one_shot": ArNormConfig(algo="one_shot", programs=16, num_warps=8),
    "one_shot_64": ArNormConfig(algo="one_shot", programs=64, num_warps=8),
    "two_shot": ArNormConfig(algo="two_shot", programs=64, num_warps=8),
}


def flags_needed(world: int, config: ArNormConfig) -> int:
    return 2 * config.programs * world


def buffer_numel(world: int, numel: int) -> int:
    return (world + 1) * numel


def _readable(x: torch.Tensor) -> bool:
    """A dtype the kernel sums, its own memory contiguous (the kernel reads it flat), not empty."""
    return x.dtype in _DTYPES and x.is_contiguous() and x.numel() > 0


def supported(x: torch.Tensor, *others: torch.Tensor | None) -> bool:
    """Whether the kernel takes ``x`` (rows of the last dimension) and the residual/weight given."""
    if not _readable(x) or x.dim() < 1:
        return False
    if x.shape[-1] > MAX_ROW:
        return False
    return all(o is None or (o.dtype == x.dtype and o.device == x.device and o.is_contiguous()) for o in others)


@triton.jit
def _finish_row(sums, res_ptr, w_ptr, h_ptr, y_ptr, row, cols, mask, H, eps, RESIDUAL: tl.constexpr, NORM: tl.constexpr, WEIGHT: tl.constexpr, STORE_H: tl.constexpr):
    """From a row's rounded sum: h (+ residual, rounded), stored if asked; then its RMSNorm."""
    h = sums
    if RESIDUAL:
        res = tl.load(res_ptr + row * H + cols, mask=mask, other=0.0)
        h = (h.to(tl.float32) + res.to(tl.float32)).to(h.dtype)
    if STORE_H:
        tl.store(h_ptr + row * H + cols, h, mask=mask)
    if NORM:
        tl.store(y_ptr + row * H + cols, _rmsnorm(h, w_ptr, cols, mask, H, eps, WEIGHT, y_ptr.dtype.element_ty), mask=mask)
    return h


@triton.jit
def _rmsnorm(h, w_ptr, cols, mask, H, eps, WEIGHT: tl.constexpr, out_dtype: tl.constexpr):
    """RMSNorm of one row in float32, scaled as ``WEIGHT`` says (see the module's docstring)."""
    hf = h.to(tl.float32)
    normed = hf * tl.rsqrt(tl.sum(hf * hf, axis=0) / H + eps)
    if WEIGHT == 1:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        return (normed.to(w.dtype).to(tl.float32) * w.to(tl.float32)).to(out_dtype)
    elif WEIGHT == 2:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        return (normed * w.to(tl.float32)).to(out_dtype)
    else:
        return normed.to(out_dtype)


@triton.jit
def _rows_of(owner, T, block, TWO_SHOT: tl.constexpr):
    """The rows ``owner`` reduces: its block (two-shot), or all of them (one-shot)."""
    if TWO_SHOT:
        lo = owner * block
        hi = tl.minimum(lo + block, T)
    else:
        lo = owner * 0
        hi = T + owner * 0
    return lo, hi


@triton.jit(do_not_specialize=PER_CALL)
def _ar_norm_kernel(
    x_ptr, res_ptr, w_ptr, h_ptr, y_ptr, buf_ptr, flags_ptr, status_ptr, data_ptrs, flag_ptrs,
    T, H, n_total, eps, rank, world, epoch, parity_offset, max_spins,
    BLOCK_H: tl.constexpr, TWO_SHOT: tl.constexpr, SHARDED: tl.constexpr, RESIDUAL: tl.constexpr,
    NORM: tl.constexpr, WEIGHT: tl.constexpr, STORE_H: tl.constexpr, PHASE: tl.constexpr,
):  # fmt: skip
    # PHASE 0: everything; 1: the stores into peers' inboxes; 2: the reduction (two-shot: of the
    # own block, pushed to every rank); 3 (two-shot): the rows every owner pushed, finished.
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    dtype = x_ptr.dtype.element_ty
    cols = tl.arange(0, BLOCK_H)
    n_in = T * H  # one inbox slot
    gather = buf_ptr + world * n_in  # this rank's gather region (two-shot)
    block = tl.cdiv(T, world)  # rows per owner (two-shot)
    if PHASE <= 1:
        for step in range(1, world):
            peer = (rank + step) % world
            base = tl.load(data_ptrs + peer).to(tl.pointer_type(dtype)) + parity_offset + rank * n_in
            lo, hi = _rows_of(peer, T, block, TWO_SHOT)
            for row in range(lo + pid, hi, programs):
                mask = (cols < H) & (row * H + cols < n_total)
                tl.store(base + row * H + cols, tl.load(x_ptr + row * H + cols, mask=mask), mask=mask)
            flag_base = tl.load(flag_ptrs + peer).to(tl.pointer_type(tl.int32))
            signal(flag_base + pid * world + rank, epoch)
    if (PHASE == 0) | (PHASE == 2):
        for src in range(0, world):
            if src != rank:
                wait(flags_ptr + pid * world + src, epoch, max_spins, status_ptr)
        lo, hi = _rows_of(rank, T, block, TWO_SHOT)
        for row in range(lo + pid, hi, programs):
            mask = (cols < H) & (row * H + cols < n_total)
            acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
            for src in range(0, world):
                if src == rank:
                    part = tl.load(x_ptr + row * H + cols, mask=mask, other=0.0)
                else:
                    part = tl.load(buf_ptr + src * n_in + row * H + cols, mask=mask, other=0.0)
                acc += part.to(tl.float32)
            sums = acc.to(dtype)
            if not TWO_SHOT:
                _finish_row(sums, res_ptr, w_ptr, h_ptr, y_ptr, row, cols, mask, H, eps, RESIDUAL, NORM, WEIGHT, STORE_H)
            else:
                pushed = sums
                if SHARDED:
                    # The owner finishes its block: h stays here (rows of this shard), y travels.
                    local = row - lo
                    h = _finish_row(sums, res_ptr, w_ptr, h_ptr, y_ptr, local, cols, mask, H, eps, RESIDUAL, False, WEIGHT, STORE_H)
                    pushed = _rmsnorm(h, w_ptr, cols, mask, H, eps, WEIGHT, y_ptr.dtype.element_ty)
                for step in range(0, world):
                    peer = (rank + step) % world
                    base = tl.load(data_ptrs + peer).to(tl.pointer_type(dtype)) + parity_offset + world * n_in
                    tl.store(base + row * H + cols, pushed, mask=mask)
        if TWO_SHOT:
            for step in range(1, world):
                peer = (rank + step) % world
                flag_base = tl.load(flag_ptrs + peer).to(tl.pointer_type(tl.int32))
                signal(flag_base + (programs + pid) * world + rank, epoch)
    if TWO_SHOT & ((PHASE == 0) | (PHASE == 3)):
        for src in range(0, world):
            if src != rank:
                wait(flags_ptr + (programs + pid) * world + src, epoch, max_spins, status_ptr)
        for owner in range(0, world):
            lo = owner * block
            for row in range(lo + pid, tl.minimum(lo + block, T), programs):
                mask = (cols < H) & (row * H + cols < n_total)
                pushed = tl.load(gather + row * H + cols, mask=mask, other=0.0)
                if SHARDED:
                    tl.store(y_ptr + row * H + cols, pushed, mask=mask)
                else:
                    _finish_row(pushed, res_ptr, w_ptr, h_ptr, y_ptr, row, cols, mask, H, eps, RESIDUAL, NORM, WEIGHT, STORE_H)


def _launch(x, residual, weight, h, y, eps, peers: Peers, config: ArNormConfig, *, rows, width, two_shot, sharded, norm, weight_mode, max_spins, phase, epoch):
    world = peers.world
    n_total = x.numel()
    if peers.numel < buffer_numel(world, rows * width) or peers.n_flags < flags_needed(world, config) or peers.data.dtype != x.dtype:
        raise ValueError("the peers' buffers are too small for this call or of another dtype")
    if epoch is None:
        epoch = peers.next_epoch()
    parity = epoch % 2
    # Unused pointer arguments get x: the kernel never touches them (constexpr switches).
    # Through ``launch``: the latency-bound sizes are set by the host's cost per call.
    launch(_ar_norm_kernel, config.programs, (
        x, residual if residual is not None else x, weight if weight is not None else x, h if h is not None else x,
        y if y is not None else x, peers.buffer(peers.rank, parity), peers.flags, peers.status, peers.data_ptrs, peers.flag_ptrs,
        rows, width, n_total, float(eps), peers.rank, world, epoch, parity * peers.numel, max_spins,
    ), dict(
        BLOCK_H=1 << (width - 1).bit_length(), TWO_SHOT=two_shot, SHARDED=sharded, RESIDUAL=residual is not None,
        NORM=norm, WEIGHT=_WEIGHT_MODES[weight_mode if weight is not None else None], STORE_H=h is not None, PHASE=phase,
        num_warps=config.num_warps,
    ))  # fmt: skip


def all_reduce_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor | None,
    eps: float,
    peers: Peers,
    config: ArNormConfig = ArNormConfig(),
    *,
    weight_mode: str = "round_then_scale",
    max_spins: int = NO_TIMEOUT,
    phase: int = 0,
    epoch: int | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, h)``: ``h = all_reduce(x) + residual`` and ``y`` its RMSNorm over the last
    dimension (scaled by ``weight``), both of ``x``'s shape and dtype. Collective: every rank calls
    it with the same shapes and ``config``. ``phase``/``epoch``/``out`` serve simulated ranks."""
    if not supported(x, residual, weight) or (residual is not None and residual.shape != x.shape) or (weight is not None and weight.shape != x.shape[-1:]):
        raise ValueError(f"all_reduce_add_rmsnorm does not take x {tuple(x.shape)} {x.dtype} with this residual and weight")
    if weight_mode not in ("round_then_scale", "float32"):
        raise ValueError(f"unknown weight_mode {weight_mode!r}")
    y, h = out if out is not None else (torch.empty_like(x), torch.empty_like(x))
    width = x.shape[-1]
    _launch(x, residual, weight, h, y, eps, peers, config, rows=x.numel() // width, width=width, two_shot=config.algo == "two_shot",
            sharded=False, norm=True, weight_mode=weight_mode, max_spins=max_spins, phase=phase, epoch=epoch)  # fmt: skip
    return y, h


def all_reduce(x: torch.Tensor, peers: Peers, config: ArNormConfig = ArNormConfig(), *, max_spins: int = NO_TIMEOUT, phase: int = 0, epoch: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``all_reduce(x)`` (a sum) out of place, in one launch, as rows of ``FLAT_ROW`` (the last
    one partial). Any size: the row limit applies to a row, not to ``x`` (a GPU run of 512x4096
    was refused when the whole flat size was checked as one row)."""
    width = min(x.numel(), FLAT_ROW)
    # x itself must be contiguous (the kernel reads its memory flat): checking a reshaped slice,
    # as this once did, passed a strided x whose reshape was a copy.
    if not _readable(x):
        raise ValueError(f"all_reduce does not take x {tuple(x.shape)} {x.dtype}{'' if x.is_contiguous() else ' (not contiguous)'}")
    h = out if out is not None else torch.empty_like(x)
    _launch(x, None, None, h, None, 0.0, peers, config, rows=-(-x.numel() // width), width=width, two_shot=config.algo == "two_shot",
            sharded=False, norm=False, weight_mode=None, max_spins=max_spins, phase=phase, epoch=epoch)  # fmt: skip
    return h


def reduce_scatter_add_rmsnorm_all_gather(
    x: torch.Tensor,
    residual_shard: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    peers: Peers,
    config: ArNormConfig = ArNormConfig(algo="two_shot"),
    *,
    weight_mode: str = "round_then_scale",
    max_spins: int = NO_TIMEOUT,
    phase: int = 0,
    epoch: int | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(all_gather(y), h)`` with ``h = reduce_scatter(x) + residual_shard`` (this rank's block of
    rows) and ``y`` its RMSNorm: the sequence-parallel norm between two tensor-parallel layers."""
    world = peers.world
    if (
        not supported(x, residual_shard, weight)
        or x.dim() != 2
        or x.shape[0] % world
        or tuple(residual_shard.shape) != (x.shape[0] // world, x.shape[1])
        or (weight is not None and weight.shape != x.shape[-1:])
    ):
        raise ValueError(f"reduce_scatter_add_rmsnorm_all_gather does not take x {tuple(x.shape)} {x.dtype} with this residual shard and weight")
    if config.algo != "two_shot":
        raise ValueError("the sharded norm is a two-shot kernel")
    y, h = out if out is not None else (torch.empty_like(x), torch.empty_like(residual_shard))
    _launch(x, residual_shard, weight, h, y, eps, peers, config, rows=x.shape[0], width=x.shape[1], two_shot=True, sharded=True,
            norm=True, weight_mode=weight_mode, max_spins=max_spins, phase=phase, epoch=epoch)  # fmt: skip
    return y, h
