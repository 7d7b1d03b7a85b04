"""BatchNorm over ``(N, C, *spatial)``: per-channel statistics as the reference computes them in
training mode (or its running statistics in inference), the affine transform and an elementwise
epilogue fused into one normalising pass.

Training-mode statistics: a channel's ``N * spatial`` elements are split into ranges, one program
per (channel, range) computing a Welford partial (count, mean, sum of squared deviations) in
float32; the partials merge with Chan's formula (a few per channel, in torch). The running
statistics are updated in place as ``torch.batch_norm`` updates them (momentum, unbiased
variance). The normalising pass reads each element once and writes it once.
"""

import math

import torch
import triton
import triton.language as tl

from kernels.elementwise.kernel import KernelUnsupported, ew_bench, ew_epilogue_args
from kernels.elementwise.program import ew_epilogue, ew_stored

BN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Elements of one channel a statistics program reads (a multiple of every chunk size).
BN_RANGE = 1 << 16


def _bn_stats_configs():
    return [triton.Config({"CHUNK": c}, num_warps=w) for c, w in ((2048, 8), (1024, 4), (4096, 8))]


@triton.autotune(configs=_bn_stats_configs(), key=["C", "HW", "TOTAL"], do_bench=ew_bench)
@triton.jit
def _bn_stats_kernel(x_ptr, cnt_ptr, mean_ptr, m2_ptr, C, HW: tl.constexpr, TOTAL: tl.constexpr, PER: tl.constexpr,
                     SPLIT: tl.constexpr, BIG: tl.constexpr, CHUNK: tl.constexpr):  # fmt: skip
    c = tl.program_id(0)
    s = tl.program_id(1)
    if BIG:
        c = c.to(tl.int64)
        s = s.to(tl.int64)
    lane = tl.arange(0, CHUNK)
    count = tl.zeros([CHUNK], tl.float32)
    mean = tl.zeros([CHUNK], tl.float32)
    m2 = tl.zeros([CHUNK], tl.float32)
    for k in range(0, PER // CHUNK):
        e = s * PER + k * CHUNK + lane
        mask = e < TOTAL
        x = tl.load(x_ptr + (e // HW) * C * HW + c * HW + e % HW, mask=mask, other=0.0).to(tl.float32)
        count += mask.to(tl.float32)
        delta = tl.where(mask, x - mean, 0.0)
        # Every lane still reading has read k + 1 values (a lane past the end stays past it and
        # adds nothing): one reciprocal a step, not a division a value.
        mean += delta * (1.0 / (k + 1))
        m2 += delta * tl.where(mask, x - mean, 0.0)
    n = tl.sum(count, axis=0)
    mu = tl.sum(count * mean, axis=0) / tl.maximum(n, 1.0)
    dev = mean - mu
    tl.store(cnt_ptr + c * SPLIT + s, n)
    tl.store(mean_ptr + c * SPLIT + s, mu)
    tl.store(m2_ptr + c * SPLIT + s, tl.sum(m2, axis=0) + tl.sum(count * dev * dev, axis=0))


def bn_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and biased variance of a contiguous ``(N, C, *spatial)`` tensor (float32)."""
    n, channels = x.shape[0], x.shape[1]
    spatial = math.prod(x.shape[2:])
    total = n * spatial
    split = triton.cdiv(total, BN_RANGE)
    parts = [torch.empty((channels, split), dtype=torch.float32, device=x.device) for _ in range(3)]
    _bn_stats_kernel[(channels, split)](
        x, *parts, channels, HW=spatial, TOTAL=total, PER=BN_RANGE, SPLIT=split, BIG=x.numel() >= 2**31 - 2**16
    )
    mean, var = (torch.empty(channels, dtype=torch.float32, device=x.device) for _ in range(2))
    _bn_merge_kernel[(channels,)](*parts, mean, var, SPLIT=split, BLOCK=triton.next_power_of_2(split))
    return mean, var


@triton.jit
def _bn_merge_kernel(cnt_ptr, mean_ptr, m2_ptr, out_mean_ptr, out_var_ptr, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """One channel's ``SPLIT`` partial statistics merged (Chan's formula) into its mean and biased
    variance: one launch where the merge in torch took eight."""
    c = tl.program_id(0)
    s = tl.arange(0, BLOCK)
    mask = s < SPLIT
    count = tl.load(cnt_ptr + c * SPLIT + s, mask=mask, other=0.0)
    means = tl.load(mean_ptr + c * SPLIT + s, mask=mask, other=0.0)
    size = tl.sum(count, axis=0)
    mu = tl.sum(count * means, axis=0) / size
    dev = tl.where(mask, means - mu, 0.0)
    m2 = tl.sum(tl.load(m2_ptr + c * SPLIT + s, mask=mask, other=0.0), axis=0) + tl.sum(count * dev * dev, axis=0)
    tl.store(out_mean_ptr + c, mu)
    tl.store(out_var_ptr + c, m2 / size)


def _bn_apply_configs():
    return [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((2048, 4), (1024, 4), (4096, 8))]


@triton.autotune(configs=_bn_apply_configs(), key=["n"], do_bench=ew_bench)
@triton.jit
def _bn_apply_kernel(
    x_ptr, scale_ptr, shift_ptr, out_ptr, n, C: tl.constexpr, HW: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    BIG: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if BIG:
        pid = pid.to(tl.int64)
    idx = pid * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    channel = (idx // HW) % C
    x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.load(scale_ptr + channel, mask=mask, other=0.0) + tl.load(shift_ptr + channel, mask=mask, other=0.0)
    y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def batch_norm(x, weight, bias, running_mean, running_var, training: bool, momentum: float, eps: float, post=None, dtype=None):
    """``torch.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)``
    (running statistics updated in place in training mode), then the epilogue ``post``."""
    if not isinstance(x, torch.Tensor) or x.dtype not in BN_DTYPES or x.dim() < 2:
        raise KernelUnsupported("batch norm reads an (N, C, ...) float32/float16/bfloat16 tensor")
    dtype = dtype or x.dtype
    if dtype not in BN_DTYPES:
        raise KernelUnsupported(f"batch norm cannot write {dtype}")
    x = x.contiguous()
    channels = x.shape[1]
    for t in (weight, bias, running_mean, running_var):
        if t is not None and (t.numel() != channels or t.device != x.device):
            raise KernelUnsupported("batch norm's per-channel tensors must have C elements on the input's device")
    count = x.numel() // max(channels, 1)
    if training:
        if count <= 1:
            raise KernelUnsupported("batch norm in training needs more than one value per channel")
        mean, var = bn_stats(x)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_((var * (count / (count - 1))).to(running_var.dtype), alpha=momentum)
    else:
        if running_mean is None or running_var is None:
            raise KernelUnsupported("batch norm in inference needs running statistics")
        mean, var = running_mean.float(), running_var.float()
    scale = torch.rsqrt(var + eps)
    if weight is not None:
        scale = scale * weight.float()
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias.float()
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    n = x.numel()
    if n == 0:
        return out
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    _bn_apply_kernel[grid](
        x, scale.contiguous(), shift.contiguous(), out, n, C=channels, HW=count // x.shape[0],
        **ew_epilogue_args(post, tuple(x.shape), out), BIG=n >= 2**31 - 2**16,
    )  # fmt: skip
    return out
