"""Cross-entropy of ``(N, C)`` logits with class targets, read once.

Each program takes a tile of rows and walks the classes in chunks, keeping an online maximum and
rescaled sum per lane (float32); the row's loss is its log-sum-exp minus the target's logit,
fetched by one gather. Rows whose target is ``ignore_index`` count zero; a target outside
``[0, C)`` gives NaN (the reference raises: the result must not pass for correct). The mean over
counted rows (or the sum) is taken from the per-row losses.
"""

import torch
import triton
import triton.language as tl

from kernels.elementwise.kernel import KernelUnsupported, ew_bench

CE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _ce_configs():
    return [triton.Config({"ROWS": r, "CHUNK": c}, num_warps=w) for r, c, w in ((1, 1024, 4), (1, 2048, 8), (1, 4096, 8), (4, 1024, 8), (4, 2048, 8))]


def _ce_prune(configs, named_args, **kwargs):
    width = triton.next_power_of_2(kwargs["R"])
    fit = [c for c in configs if c.kwargs["CHUNK"] <= max(width, 1024) and c.kwargs["ROWS"] * c.kwargs["CHUNK"] <= 16384]
    return fit or configs[:1]


@triton.autotune(configs=_ce_configs(), key=["rows", "R"], prune_configs_by={"early_config_prune": _ce_prune}, do_bench=ew_bench)
@triton.jit
def _ce_kernel(x_ptr, t_ptr, loss_ptr, rows, R: tl.constexpr, IGNORE: tl.constexpr, BIG: tl.constexpr,
               ROWS: tl.constexpr, CHUNK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = row < rows
    if BIG:
        row = row.to(tl.int64)
    c = tl.arange(0, CHUNK)[None, :]
    m = tl.full([ROWS, CHUNK], -3.0e38, tl.float32)
    s = tl.zeros([ROWS, CHUNK], tl.float32)
    for start in range(0, R, CHUNK):
        mask = live[:, None] & (start + c < R)
        x = tl.load(x_ptr + row[:, None] * R + start + c, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    top = tl.max(m, axis=1)
    lse = top + tl.log(tl.sum(s * tl.exp(m - top[:, None]), axis=1))
    target = tl.load(t_ptr + row, mask=live, other=IGNORE).to(tl.int64)
    valid = (target >= 0) & (target < R)
    picked = tl.load(x_ptr + row * R + tl.where(valid, target, 0), mask=live & valid, other=0.0).to(tl.float32)
    loss = tl.where(target == IGNORE, 0.0, tl.where(valid, lse - picked, float("nan")))
    tl.store(loss_ptr + row, loss, mask=live)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean", ignore_index: int = -100) -> torch.Tensor:
    """``F.cross_entropy(logits, target, reduction=..., ignore_index=...)`` for ``(N, C)`` logits
    and ``(N,)`` integer targets (no class weights, no label smoothing)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.dtype not in CE_DTYPES:
        raise KernelUnsupported("cross-entropy reads (N, C) float32/float16/bfloat16 logits")
    if not isinstance(target, torch.Tensor) or target.shape != logits.shape[:1] or target.dtype not in (torch.int64, torch.int32):
        raise KernelUnsupported("cross-entropy needs (N,) integer class targets")
    if reduction not in ("mean", "sum", "none"):
        raise KernelUnsupported(f"unknown reduction {reduction!r}")
    x = logits.contiguous()
    rows, classes = x.shape
    losses = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows:
        grid = lambda meta: (triton.cdiv(rows, meta["ROWS"]),)
        _ce_kernel[grid](x, target.contiguous(), losses, rows, R=classes, IGNORE=int(ignore_index), BIG=x.numel() >= 2**31 - 2**16)
    if reduction == "none":
        return losses.to(logits.dtype)
    total = losses.sum()
    if reduction == "sum":
        return total.to(logits.dtype)
    return (total / (target != ignore_index).sum()).to(logits.dtype)
