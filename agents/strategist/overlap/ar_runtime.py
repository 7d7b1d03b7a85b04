"""What a candidate of the ``overlap`` strategy runs for an all-reduce, alone or with the residual
add, RMSNorm and weight that follow (``ar_norm.py`` found them): ``kernels/comm/allreduce_norm``,
inlined with ``runtime.py``, whose tuning and fallbacks it shares."""

import torch
import torch.distributed as dist

from kernels.comm import allreduce_norm

from .runtime import _KL_OVERLAP, _eligible, _not_taken, _peers, _run

#: All-reduces larger than this keep NCCL (bandwidth-bound: a ring is as good as a kernel gets, and
#: the symmetric buffers would be large); the catalog offers the strategy on the same cap
#: (``options.ALL_REDUCE_MAX``).
ALL_REDUCE_MAX_BYTES = 16 << 20
AR_CONFIGS = allreduce_norm.TUNING


# All-reduce, alone or with the residual add and RMSNorm that follow -------------------------------
def _ar_eligible(tensor, residual=None) -> bool:
    # Contiguous itself: a strided tensor's reshape is a copy that passes the kernel's check while
    # the kernel reads the strided memory (its ``view(-1)`` then fails and gives up the kernels).
    return (
        _eligible([tensor] + ([residual] if residual is not None else []))
        and tensor.is_contiguous()
        and allreduce_norm.supported(tensor.reshape(-1) if residual is None else tensor, residual)
        and (residual is None or residual.shape == tensor.shape)
    )


def _ar_peers(tensor):
    world = dist.get_world_size()
    rows = -(-tensor.numel() // allreduce_norm.FLAT_ROW) * allreduce_norm.FLAT_ROW
    flags = max(allreduce_norm.flags_needed(world, c) for c in AR_CONFIGS.values())
    return _peers(("allreduce", rows, tensor.dtype), allreduce_norm.buffer_numel(world, rows), flags, tensor.dtype)


class _Pristine:
    """The input an in-place way starts from in each of its timed tuning calls, copied the first
    time tuning asks (a call after the choice, every call but a shape's first, copies nothing)."""

    def __init__(self, tensor):
        self.tensor, self.copy = tensor, None

    def scratch(self):
        if self.copy is None:
            self.copy = self.tensor.clone()
        return self.copy.clone()

    def reset(self, work):
        work.copy_(self.copy)
        return work


def _reference_ar_norm(h, residual, eps):
    dist.all_reduce(h)
    if residual is not None:
        h += residual
    hf = h.float()
    return hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)


def _reference_scaled(h, residual, eps, weight):
    return weight * _reference_ar_norm(h, residual, eps).to(h.dtype)


def _ar_norm(h, residual, eps, weight, scaled: bool):
    """The fused kernel's result, or None where it does not apply or the reference's calls won:
    the float32 norm (``scaled`` False), or ``weight * norm.to(h.dtype)`` in ``h``'s dtype."""
    if not (isinstance(h, torch.Tensor) and _ar_eligible(h, residual) and isinstance(eps, (int, float))):
        return None
    if scaled and not (isinstance(weight, torch.Tensor) and weight.dtype == h.dtype and weight.device == h.device and weight.shape == h.shape[-1:] and weight.is_contiguous()):
        return None
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (h, residual, weight)):
        return None  # the kernel's result has no autograd history: a backward through it needs the eager ops
    peers = _ar_peers(h)
    pristine = _Pristine(h)

    def ours(config, work):
        target = h if work is None else pristine.reset(work)
        y = torch.empty_like(target) if scaled else torch.empty(target.shape, dtype=torch.float32, device=target.device)
        allreduce_norm.all_reduce_add_rmsnorm(target, residual, weight if scaled else None, eps, peers, config, out=(y, target))
        return y

    def reference(work):
        target = h if work is None else pristine.reset(work)
        return _reference_scaled(target, residual, eps, weight) if scaled else _reference_ar_norm(target, residual, eps)

    runners = [("reference", reference)] + [(name, lambda work, c=c: ours(c, work)) for name, c in AR_CONFIGS.items()]
    out = _run(("ar_norm", scaled, tuple(h.shape), residual is not None, h.dtype), runners, pristine.scratch)
    if out is not None:
        _KL_OVERLAP["ar_norm"] += 1
    return out


def _kloom_ar_add_rmsnorm(h, residual, eps):
    """``all_reduce(h); h += residual`` (in place), then the float32 RMSNorm of ``h`` over its last
    dimension, returned: what the rewritten reference computed in these statements."""
    out = _ar_norm(h, residual, eps, None, scaled=False)
    if out is not None:
        return out
    _not_taken(h)
    return _reference_ar_norm(h, residual, eps)


def _kloom_ar_add_rmsnorm_scaled(h, residual, eps, weight):
    """``_kloom_ar_add_rmsnorm`` and then ``weight * norm.to(h.dtype)``, the epilogue the rewrite
    found after it: one kernel writes the result in ``h``'s dtype (rounded, then scaled, as the
    eager ops round) instead of a float32 norm that two more kernels read back."""
    out = _ar_norm(h, residual, eps, weight, scaled=True)
    if out is not None:
        return out
    _not_taken(h)
    return _reference_scaled(h, residual, eps, weight)


def _kloom_comm_all_reduce(tensor, op=None, group=None, async_op=False):
    """``dist.all_reduce`` with the same arguments; a synchronous sum over the default group of a
    contiguous bf16/fp16 CUDA tensor goes through the tuned choice of NCCL and the comm kernel's
    one-shot and two-shot."""
    plain = group is None and not async_op and (op is None or op == dist.ReduceOp.SUM)
    small = isinstance(tensor, torch.Tensor) and tensor.numel() * tensor.element_size() <= ALL_REDUCE_MAX_BYTES
    if plain and small and _ar_eligible(tensor):
        peers = _ar_peers(tensor)
        pristine = _Pristine(tensor)

        def nccl(work):
            dist.all_reduce(tensor if work is None else pristine.reset(work))
            return True

        def ours(config, work):
            flat = (tensor if work is None else pristine.reset(work)).view(-1)
            allreduce_norm.all_reduce(flat, peers, config, out=flat)
            return True

        runners = [("reference", nccl)] + [(name, lambda work, c=c: ours(c, work)) for name, c in AR_CONFIGS.items()]
        if _run(("all_reduce", tensor.numel(), tensor.dtype), runners, pristine.scratch) is not None:
            _KL_OVERLAP["all_reduce"] += 1
            return None
    if plain and small:
        _not_taken(tensor)
    if op is None:
        return dist.all_reduce(tensor, group=group, async_op=async_op)
    return dist.all_reduce(tensor, op=op, group=group, async_op=async_op)

