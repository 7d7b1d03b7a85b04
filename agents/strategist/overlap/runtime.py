"""What a candidate of the ``overlap`` strategy runs: the helpers its rewritten calls go through
(inlined into the candidate with the comm kernels by ``agents/strategist/embed.py``; torch and the kernels only).

Each helper takes a comm kernel only on CUDA, world size > 1, the default group, bf16/fp16
operands inside the kernel's envelope, and not under ``torch.compile`` or graph capture (a
captured kernel would replay one epoch); anywhere else it runs the reference's own calls. On the
first call of each shape it runs every way it knows, the reference's calls and torch's fused
symmetric-memory op included, a few times on every rank in the same order, and keeps the fastest
on the slowest rank (``_KL_OVERLAP["chosen"]`` says which): so on the target it is never slower
than what the reference did, beyond the noise of that choice. A failure before any kernel call
succeeded warns and switches the process to the reference's calls for good; after one success,
failures propagate.
"""

import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

from kernels.comm import ag_gemm, gemm_ar, gemm_rs
from kernels.comm.peers import symmetric_peers

#: Tests set this to raise when a call on CUDA does not take a comm kernel or a tuned path.
_KL_OVERLAP_STRICT = False
#: Tests set this to a way's name (``AG_CONFIGS``, ``RS_CONFIGS``, ``ar_runtime.AR_CONFIGS``, "reference") to run
#: that way without tuning; a call that does not offer it takes the reference's calls.
_KL_OVERLAP_FORCE = None
#: Calls per helper, calls that ran the reference's calls, why the kernels were given up, and the
#: way chosen for each shape.
_KL_OVERLAP = {"ag_matmul": 0, "matmul_rs": 0, "matmul_ar": 0, "all_reduce": 0, "ar_norm": 0, "ring": 0, "fallback": 0, "ok": False, "broken": None, "chosen": {}}
#: Tuning: calls per way timed (after two warm-up calls that compile it).
TUNE_ITERS = 3
_HALF = (torch.bfloat16, torch.float16)

AG_CONFIGS = ag_gemm.TUNING
RS_CONFIGS = gemm_rs.TUNING
_PLANS = {}  # shape key -> the chosen runner's name
_PEERS = {}  # buffer key -> Peers


def _eligible(tensors) -> bool:
    if _KL_OVERLAP["broken"] is not None or torch.compiler.is_compiling():
        return False
    first = tensors[0]
    if not all(isinstance(t, torch.Tensor) and t.is_cuda and t.device == first.device and t.dtype == first.dtype for t in tensors):
        return False
    if first.dtype not in _HALF or not dist.is_initialized() or dist.get_world_size() < 2:
        return False
    return not torch.cuda.is_current_stream_capturing()


def _not_taken(tensor) -> None:
    _KL_OVERLAP["fallback"] += 1
    if _KL_OVERLAP_STRICT and isinstance(tensor, torch.Tensor) and tensor.is_cuda:
        raise RuntimeError("kloom: the overlap helpers took the reference's calls (" + str(_KL_OVERLAP["broken"]) + ")")


def _peers(key, numel: int, n_flags: int, dtype):
    """This shape's symmetric buffers (collective on first use: every rank reaches it together)."""
    found = _PEERS.get(key)
    if found is None or found.numel < numel or found.n_flags < n_flags or found.data.dtype != dtype:
        found = _PEERS[key] = symmetric_peers(numel, dtype, n_flags)
    return found


def _timed(run) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(TUNE_ITERS):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / TUNE_ITERS


def _run(key, runners, scratch=None):
    """Run this shape's chosen way, choosing it first if this is the shape's first call: every
    rank times every way in the same order, and the fastest on the slowest rank wins. Each runner
    takes one argument: ``scratch()`` while it is timed (in-place ways work on a copy), None for
    the call whose result counts."""
    try:
        name = _PLANS.get(key)
        if _KL_OVERLAP_FORCE is not None:
            if _KL_OVERLAP_FORCE not in dict(runners):
                raise ValueError(f"the forced way {_KL_OVERLAP_FORCE!r} is not one of {[n for n, _ in runners]}")
            name = _KL_OVERLAP_FORCE
        if name is None:
            times = []
            for _, run in runners:
                work = scratch() if scratch is not None else None
                run(work)
                run(work)
                torch.cuda.synchronize()
                dist.barrier()
                times.append(_timed(lambda: run(work)))
            slowest = torch.tensor(times, dtype=torch.float64, device=torch.device("cuda", torch.cuda.current_device()))
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            name = runners[int(torch.argmin(slowest))][0]
            _PLANS[key] = name
            _KL_OVERLAP["chosen"][str(key)] = {"way": name, "ms": {n: round(float(t), 4) for (n, _), t in zip(runners, slowest.tolist())}}
        out = dict(runners)[name](None)
    except Exception as exc:
        if _KL_OVERLAP["ok"]:
            raise
        _KL_OVERLAP["broken"] = f"{type(exc).__name__}: {exc}"
        warnings.warn("kloom: the comm kernels are unavailable here, using the reference's calls: " + _KL_OVERLAP["broken"])
        return None
    _KL_OVERLAP["ok"] = True
    return out


def _torch_fused(op: str) -> bool:
    return hasattr(torch.ops, "symm_mem") and hasattr(torch.ops.symm_mem, op)


# All-gather + matmul -----------------------------------------------------------------------------
def _ag_plain(buf, shard, kind, other, bias):
    dist.all_gather_into_tensor(buf, shard)
    if kind == "mm":
        return buf @ other
    if kind == "linear":
        return F.linear(buf, other, bias)
    if kind == "mm_t":
        return other @ buf.t()
    if kind == "mm_T":
        return other @ buf.T
    return F.linear(other, buf, bias)


def _ag_operands(kind, other):
    """(the right operand of gathered @ B, whether the product is the transpose of the result)."""
    if kind == "mm":
        return other, False
    if kind == "linear":
        return other.t(), False
    return other.reshape(-1, other.shape[-1]).t(), True


def _ag_finish(rows_out, kind, other, bias, world, shard):
    """The reference's result from the gathered product's storage."""
    y = rows_out
    if kind in ("mm_t", "mm_T", "linear_t"):
        y = y.view(*other.shape[:-1], world * shard.shape[0])
    if bias is not None:
        y = y + bias
    return y


def _kloom_ag_matmul(buf, shard, kind, other, bias=None, keep=False):
    """``all_gather_into_tensor(buf, shard)`` then the matmul ``kind`` names (``mm``: buf @ other,
    ``linear``: F.linear(buf, other, bias), ``mm_t``/``mm_T``: other @ buf.t(), ``linear_t``:
    F.linear(other, buf, bias)). Returns the product, or (buf, product) with ``keep``."""
    tensors = [buf, shard, other] + ([bias] if bias is not None else [])
    if _eligible(tensors) and shard.dim() == 2 and shard.is_contiguous():
        world = dist.get_world_size()
        ms, k = shard.shape
        B, transposed = _ag_operands(kind, other)
        if tuple(buf.shape) == (world * ms, k) and ag_gemm.supported(shard, B):
            n = B.shape[1]
            flags = world * max(c.chunks for c in AG_CONFIGS.values())
            peers = _peers(("ag", ms, k, shard.dtype), ag_gemm.buffer_numel(world, ms, k), flags, shard.dtype)

            def ours(config):
                if transposed:
                    y = torch.empty(n, world * ms, dtype=shard.dtype, device=shard.device)
                    ag_gemm.all_gather_matmul(shard, B, peers, config, out=y.t(), gathered_out=buf if keep else None)
                else:
                    y = ag_gemm.all_gather_matmul(shard, B, peers, config, gathered_out=buf if keep else None)
                return _ag_finish(y, kind, other, bias, world, shard)

            def fused():
                gathered, outs = torch.ops.symm_mem.fused_all_gather_matmul(shard, [B], 0, dist.group.WORLD.group_name)
                if keep:
                    buf.copy_(gathered)
                y = outs[0].t().contiguous() if transposed else outs[0]
                return _ag_finish(y, kind, other, bias, world, shard)

            runners = [("reference", lambda _: _ag_plain(buf, shard, kind, other, bias))]
            if _torch_fused("fused_all_gather_matmul"):
                runners.append(("torch_fused", lambda _: fused()))
            runners += [(name, lambda _, c=c: ours(c)) for name, c in AG_CONFIGS.items()]
            y = _run(("ag", kind, ms, k, n, tuple(other.shape), bias is not None, shard.dtype), runners)
            if y is not None:
                _KL_OVERLAP["ag_matmul"] += 1
                return (buf, y) if keep else y
    _not_taken(buf)
    y = _ag_plain(buf, shard, kind, other, bias)
    return (buf, y) if keep else y


# Matmul + reduce-scatter, matmul + all-reduce ---------------------------------------------------------
class _KloomProduct:
    """A matmul (``mm``: a @ b, ``linear``: F.linear(a, b)) whose computation waits for the
    collective that consumes it, so that both can run as one kernel; until then it answers
    questions about the product's shape, dtype and device (from meta tensors, so a mismatch raises
    what the matmul raises, where it would). ``clone()`` is the same pending product."""

    def __init__(self, kind, a, b):
        self.kind, self.a, self.b = kind, a, b
        meta = self._compute(torch.empty_like(a, device="meta"), torch.empty_like(b, device="meta"))
        self.shape, self.dtype, self.ndim, self.device = meta.shape, meta.dtype, meta.ndim, a.device

    def _compute(self, a, b):
        return a @ b if self.kind == "mm" else F.linear(a, b)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return self.ndim

    def clone(self):
        return _KloomProduct(self.kind, self.a, self.b)

    def value(self):
        return self._compute(self.a, self.b)

    def operands(self):
        """(a, b) with the product a @ b, a 2-D."""
        b = self.b if self.kind == "mm" else self.b.t()
        return self.a.reshape(-1, self.a.shape[-1]), b


def _product_eligible(product):
    """(a, b), 2-D, with the product a @ b, when the GEMM + collective kernels take them."""
    if not isinstance(product, _KloomProduct):
        return None
    a, b = product.operands()
    if not _eligible([a, b]) or product.a.dim() < 2 or not gemm_rs.supported(a, b, dist.get_world_size()):
        return None
    return a, b


def _kloom_matmul_rs(out, product, op=None):
    """``reduce_scatter_tensor(out, product.value())`` (a sum over the default group)."""
    if not isinstance(product, _KloomProduct):
        return dist.reduce_scatter_tensor(out, product) if op is None else dist.reduce_scatter_tensor(out, product, op=op)
    ab = _product_eligible(product) if (op is None or op == dist.ReduceOp.SUM) and isinstance(out, torch.Tensor) else None
    world = dist.get_world_size() if ab is not None else 1
    if ab is not None and product.a.dim() == 2 and tuple(out.shape) == (product.shape[0] // world, product.shape[1]) and out.dtype == product.dtype and out.is_contiguous():
        a, b = ab
        m, n = a.shape[0], b.shape[1]
        flags = max(gemm_rs.flags_needed(world, m // world, n, c) for c in RS_CONFIGS.values())
        peers = _peers(("rs", m, n, a.dtype), gemm_rs.buffer_numel(world, m // world, n), flags, a.dtype)

        def reference():
            dist.reduce_scatter_tensor(out, product.value())
            return out

        def fused():
            out.copy_(torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, dist.group.WORLD.group_name))
            return out

        runners = [("reference", lambda _: reference())]
        if _torch_fused("fused_matmul_reduce_scatter"):
            runners.append(("torch_fused", lambda _: fused()))
        runners += [(name, lambda _, c=c: gemm_rs.matmul_reduce_scatter(a, b, peers, c, out=out)) for name, c in RS_CONFIGS.items()]
        if _run(("rs", m, a.shape[1], n, a.dtype), runners) is not None:
            _KL_OVERLAP["matmul_rs"] += 1
            return None
    _not_taken(out)
    value = product.value()
    return dist.reduce_scatter_tensor(out, value) if op is None else dist.reduce_scatter_tensor(out, value, op=op)


def _kloom_matmul_ar(product, op=None):
    """``all_reduce(product.value())`` (a sum over the default group); returns the reduced tensor."""
    if not isinstance(product, _KloomProduct):
        if op is None:
            dist.all_reduce(product)
        else:
            dist.all_reduce(product, op=op)
        return product
    ab = _product_eligible(product) if op is None or op == dist.ReduceOp.SUM else None
    if ab is not None:
        a, b = ab
        world = dist.get_world_size()
        m, n = a.shape[0], b.shape[1]
        flags = max(gemm_ar.flags_needed(world, m // world, n, c) for c in RS_CONFIGS.values())
        peers = _peers(("ar", m, n, a.dtype), gemm_ar.buffer_numel(world, m // world, n), flags, a.dtype)

        def reference():
            y = product.value()
            dist.all_reduce(y)
            return y

        runners = [("reference", lambda _: reference())]
        runners += [(name, lambda _, c=c: gemm_ar.matmul_all_reduce(a, b, peers, c)) for name, c in RS_CONFIGS.items()]
        y = _run(("ar", m, a.shape[1], n, a.dtype), runners)
        if y is not None:
            _KL_OVERLAP["matmul_ar"] += 1
            return y.view(product.shape)
    y = product.value()
    _not_taken(y)
    if op is None:
        dist.all_reduce(y)
    else:
        dist.all_reduce(y, op=op)
    return y
