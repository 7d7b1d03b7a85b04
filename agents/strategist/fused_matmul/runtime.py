"""What a candidate whose all-gather + matmul and matmul + reduce-scatter pairs were rewritten runs
(``_kloom_ag_matmul``, ``_KloomProduct``, ``_kloom_matmul_rs``): torch symmetric memory's fused ops
where they apply, the original calls otherwise.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import warnings as _kl_warnings
import torch as _kl_torch
import torch.distributed as _kl_dist
import torch.distributed._symmetric_memory as _kl_symm
import torch.nn.functional as _kl_F

#: Tests set this to raise when a call on CUDA does not take the fused path.
_KL_FUSED_STRICT = False
#: Fused calls made, calls that ran the original collectives, and why the fused ops were given up.
_KL_FUSED = {"ag_matmul": 0, "matmul_rs": 0, "fallback": 0, "ok": False, "broken": None, "group": None}
_KL_FUSED_DTYPES = (_kl_torch.bfloat16, _kl_torch.float16, _kl_torch.float32)


def _kloom_symm_group(tensors):
    """The default group's name when a fused op may run on ``tensors``, else None."""
    if _KL_FUSED["broken"] is not None or _kl_torch.compiler.is_compiling():
        return None
    first = tensors[0]
    if not all(t.is_cuda and t.device == first.device and t.dtype == first.dtype for t in tensors):
        return None
    if first.dtype not in _KL_FUSED_DTYPES or not _kl_dist.is_initialized() or _kl_dist.get_world_size() < 2:
        return None
    if _kl_torch.cuda.is_current_stream_capturing():
        return None
    ops = _kl_torch.ops.symm_mem
    if not (hasattr(ops, "fused_all_gather_matmul") and hasattr(ops, "fused_matmul_reduce_scatter")):
        return None
    return _KL_FUSED["group"] or _kl_dist.group.WORLD.group_name


def _kloom_fused(fn, *args):
    """``fn(*args)``. On the first use a failure (symmetric memory unavailable on this machine)
    is reported as a warning and switches this process to the original collectives for good;
    once a fused call has succeeded, a failure propagates."""
    try:
        if _KL_FUSED["group"] is None:
            name = _kl_dist.group.WORLD.group_name
            if hasattr(_kl_symm, "enable_symm_mem_for_group"):  # needed by older torch, deprecated later
                with _kl_warnings.catch_warnings():
                    _kl_warnings.simplefilter("ignore", FutureWarning)
                    _kl_symm.enable_symm_mem_for_group(name)
            _KL_FUSED["group"] = name
        out = fn(*args)
    except Exception as exc:
        if _KL_FUSED["ok"]:
            raise
        _KL_FUSED["broken"] = f"{type(exc).__name__}: {exc}"
        _kl_warnings.warn("kloom: symmetric-memory fused matmul unavailable, using the original collectives: " + _KL_FUSED["broken"])
        return None
    _KL_FUSED["ok"] = True
    return out


def _kloom_not_fused(tensor):
    _KL_FUSED["fallback"] += 1
    if _KL_FUSED_STRICT and tensor.is_cuda:
        raise RuntimeError("kloom: the fused symmetric-memory path was not taken (" + str(_KL_FUSED["broken"]) + ")")


def _kloom_ag_matmul_fused(shard, kind, other, bias, group):
    world = _kl_dist.get_world_size()
    if kind in ("mm", "linear"):
        B = other if kind == "mm" else other.t()
        if not (shard.dim() >= 2 and B.dim() == 2 and B.shape[0] == shard.shape[-1]):
            return None
        gathered, outs = _kl_torch.ops.symm_mem.fused_all_gather_matmul(shard, [B], 0, group)
        y = outs[0]
    else:
        # other @ gathered.t() == (gathered @ other.t()).t(): the gathered shard is the left operand.
        if not (shard.dim() == 2 and other.dim() >= 2 and other.shape[-1] == shard.shape[1]):
            return None
        B = other.reshape(-1, other.shape[-1]).t()
        gathered, outs = _kl_torch.ops.symm_mem.fused_all_gather_matmul(shard, [B], 0, group)
        y = outs[0].t().contiguous().view(*other.shape[:-1], world * shard.shape[0])
    if bias is not None:
        y = y + bias
    return gathered, y


def _kloom_ag_matmul(buf, shard, kind, other, bias=None, keep=False):
    """``all_gather_into_tensor(buf, shard)`` then the matmul ``kind`` names, as one fused op:
    ``mm``: buf @ other, ``linear``: F.linear(buf, other, bias), ``mm_t``: other @ buf.t(),
    ``mm_T``: other @ buf.T, ``linear_t``: F.linear(other, buf, bias). Returns the product, or
    (the gathered tensor, the product) with ``keep``."""
    tensors = [buf, shard, other] + ([bias] if bias is not None else [])
    if all(isinstance(t, _kl_torch.Tensor) for t in tensors):
        group = _kloom_symm_group(tensors)
        expected = (_kl_dist.get_world_size() * shard.shape[0],) + tuple(shard.shape[1:]) if group else None
        if group and shard.dim() >= 1 and shard.is_contiguous() and tuple(buf.shape) == expected:
            out = _kloom_fused(_kloom_ag_matmul_fused, shard, kind, other, bias, group)
            if out is not None:
                _KL_FUSED["ag_matmul"] += 1
                return out if keep else out[1]
        _kloom_not_fused(buf)
    _kl_dist.all_gather_into_tensor(buf, shard)
    if kind == "mm":
        y = buf @ other
    elif kind == "linear":
        y = _kl_F.linear(buf, other, bias)
    elif kind == "mm_t":
        y = other @ buf.t()
    elif kind == "mm_T":
        y = other @ buf.T
    else:
        y = _kl_F.linear(other, buf, bias)
    return (buf, y) if keep else y


class _KloomProduct:
    """A matmul (``mm``: a @ b, ``linear``: F.linear(a, b)) whose computation waits for the
    reduce-scatter that consumes it, so that both can run as one fused op; until then it answers
    questions about the product's shape, dtype and device (computed on the meta device, so a
    mismatch raises what the matmul raises, where it would)."""

    def __init__(self, kind, a, b):
        self.kind, self.a, self.b = kind, a, b
        self._meta = self._compute(_kl_torch.empty_like(a, device="meta"), _kl_torch.empty_like(b, device="meta"))
        self.shape, self.dtype, self.ndim, self.device = self._meta.shape, self._meta.dtype, self._meta.ndim, a.device

    def _compute(self, a, b):
        return a @ b if self.kind == "mm" else _kl_F.linear(a, b)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return self.ndim

    def value(self):
        return self._compute(self.a, self.b)


def _kloom_matmul_rs(out, product, op=None):
    """``reduce_scatter_tensor(out, product.value())`` (a sum over the default group), through
    ``fused_matmul_reduce_scatter`` where it applies."""
    if not isinstance(product, _KloomProduct):
        return _kl_dist.reduce_scatter_tensor(out, product) if op is None else _kl_dist.reduce_scatter_tensor(out, product, op=op)
    a, b = product.a, product.b if product.kind == "mm" else product.b.t()
    if isinstance(out, _kl_torch.Tensor) and (op is None or op == _kl_dist.ReduceOp.SUM):
        group = _kloom_symm_group([out, a, b])
        world = _kl_dist.get_world_size() if group else 1
        shape = tuple(product.shape)
        fits = (
            group is not None and a.dim() >= 2 and b.dim() == 2 and a.is_contiguous()
            and len(shape) >= 2 and shape[0] % world == 0
            and tuple(out.shape) == (shape[0] // world,) + shape[1:]
        )
        if fits:
            reduced = _kloom_fused(_kl_torch.ops.symm_mem.fused_matmul_reduce_scatter, a, b, "sum", 0, group)
            if reduced is not None:
                out.copy_(reduced)
                _KL_FUSED["matmul_rs"] += 1
                return None
        _kloom_not_fused(out)
    value = product.value()
    if op is None:
        return _kl_dist.reduce_scatter_tensor(out, value)
    return _kl_dist.reduce_scatter_tensor(out, value, op=op)
