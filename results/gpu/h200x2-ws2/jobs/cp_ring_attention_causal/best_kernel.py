"""Causal ring attention, forward, with the sequence split into contiguous blocks: rank r holds
tokens [r*S/n, (r+1)*S/n). KV blocks travel around the ring; a rank attends to the blocks of
earlier ranks in full, to its own block with the causal mask, and skips later ranks' blocks. The
contiguous split leaves later ranks with more work, which is the load imbalance zig-zag
sharding removes. Output: (batch, heads, seq/n, head_dim)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "context_parallel"
DESCRIPTION = "Causal ring attention forward over contiguous sequence shards (context-parallel LLM training; load-imbalanced baseline)."
SOURCE = "zhuzilin/ring-flash-attention ring_flash_attn_func(causal=True); Megatron-LM context parallelism"
WORLD_SIZES = [2, 4, 8]
# Late tokens average thousands of random values (outputs O(0.01)), early ones few (O(1)):
# atol covers the former, rtol the latter.
TOLERANCE = {torch.bfloat16: (1e-3, 1.6e-2)}

SHAPES = {
    "ci": dict(batch=1, heads=2, seq=64, head_dim=16, dtype=torch.float32),
    "gpu": dict(batch=1, heads=32, seq=16384, head_dim=128, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


def attention_with_lse(q, k, v, causal):
    """Attention of q over one KV block, and the log-sum-exp of its scores, (B, H, Sq) in fp32."""
    # The public SDPA does not return the log-sum-exp; torch's own context parallelism calls
    # these ops for the same reason.
    if not q.is_cuda:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
    if q.dtype in (torch.float16, torch.bfloat16):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)[:2]
    # The flash kernel takes half precision only; the memory-efficient one also takes float32
    # (its lse may be padded along the queries).
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)[:2]
    return out, lse[..., : q.shape[-2]]


def pass_along(k, v):
    """Send this rank's KV block to the next rank of the ring; receive the previous rank's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    ops = [
        dist.P2POp(dist.isend, k, (rank + 1) % world),
        dist.P2POp(dist.isend, v, (rank + 1) % world),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % world),
        dist.P2POp(dist.irecv, v_next, (rank - 1) % world),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return k_next, v_next


class Model(nn.Module):
    def forward(self, q, k, v):
        rank, world = dist.get_rank(), dist.get_world_size()
        out = lse = None
        _kl_prefetch0 = _KloomPrefetch()
        for step in _kl_prefetch0.ahead(range(world)):
            if step:
                k, v = _kl_prefetch0.take(pass_along, k, v)
            if _kl_prefetch0.more and (_kl_prefetch0.upcoming):
                _kl_prefetch0.start(pass_along, k, v)
            source = (rank - step) % world  # the rank whose KV block this is
            if source > rank:
                continue  # entirely in this rank's future
            block_out, block_lse = attention_with_lse(q, k, v, causal=source == rank)
            if out is None:
                out, lse = block_out.float(), block_lse
                continue
            merged = torch.logaddexp(lse, block_lse)
            out = out * torch.exp(lse - merged).unsqueeze(-1) + block_out.float() * torch.exp(block_lse - merged).unsqueeze(-1)
            lse = merged
        return out.to(q.dtype)


def get_init_inputs():
    return []


def get_inputs():
    shape = (P["batch"], P["heads"], P["seq"] // dist.get_world_size(), P["head_dim"])
    return [torch.randn(shape, dtype=P["dtype"]) for _ in range(3)]


def roofline(world_size, inputs):
    q, k, v = inputs
    b, h, s_local, d = q.shape
    rank = dist.get_rank()
    e = q.element_size()
    pairs = rank * s_local * s_local + s_local * (s_local + 1) // 2  # unmasked (query, key) pairs
    return {
        "flops": 4 * b * h * d * pairs,
        # q read and the output written once; the K/V blocks of this rank and earlier ones read once
        "hbm_bytes": e * (2 * q.numel() + (k.numel() + v.numel()) * (rank + 1)),
        # this rank's KV block is needed by the ranks after it only
        "link_bytes": e * (k.numel() + v.numel()) * (world_size - 1 - rank),
        "dtype": "bf16" if q.dtype == torch.bfloat16 else "fp32",
    }

import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree

#: The side stream of each device that prefetched exchanges run on, in the order they are issued.
_kl_prefetch_streams = {}


class _KloomPrefetch:
    """A loop-carried exchange ``state = fn(*state)`` issued one iteration early.

    ``ahead(iterable)`` runs the loop one element ahead: while the body runs, ``more`` says whether
    another iteration follows and ``upcoming`` is its loop value. ``start(fn, *state)`` issues the
    next iteration's exchange (on CUDA on a side stream, else at once); ``take(fn, *state)`` returns
    its result, or runs the exchange in place when none was started (the first exchange)."""

    def __init__(self):
        self.more = False
        self.upcoming = None
        self._pending = None

    def ahead(self, iterable):
        items = iter(iterable)
        for current in items:
            for following in items:
                self.more, self.upcoming = True, following
                break
            else:
                self.more, self.upcoming = False, None
            yield current
            while self.more:
                current = self.upcoming
                for following in items:
                    self.upcoming = following
                    break
                else:
                    self.more, self.upcoming = False, None
                yield current
            return

    def start(self, fn, *args):
        if self._pending is not None:
            raise RuntimeError("kloom prefetch: an exchange was issued twice for one iteration")
        tensors = [t for t in _kl_pytree.tree_leaves(args) if isinstance(t, _kl_torch.Tensor)]
        if not tensors or not all(t.is_cuda for t in tensors) or _kl_torch.compiler.is_compiling():
            # No stream to overlap on: exchange now, synchronously.
            self._pending = (args, fn(*args), None)
            return
        device = tensors[0].device
        side = _kl_prefetch_streams.get(device)
        if side is None:
            side = _kl_prefetch_streams[device] = _kl_torch.cuda.Stream(device=device)
        # Send finished data: the side stream waits for everything the compute stream has queued.
        side.wait_stream(_kl_torch.cuda.current_stream(device))
        with _kl_torch.cuda.stream(side):
            out = fn(*args)
        for t in tensors:
            t.record_stream(side)  # the compute stream may drop them while the side stream sends
        self._pending = (args, out, side)

    def take(self, fn, *args):
        if self._pending is None:
            return fn(*args)
        started, out, side = self._pending
        self._pending = None
        if len(started) != len(args) or any(a is not b for a, b in zip(started, args)):
            raise RuntimeError("kloom prefetch: the state changed after its exchange was issued")
        if side is not None:
            current = _kl_torch.cuda.current_stream(side.device)
            current.wait_stream(side)
            for t in _kl_pytree.tree_leaves(out):
                if isinstance(t, _kl_torch.Tensor) and t.is_cuda:
                    t.record_stream(current)  # allocated on the side stream, used on this one
        return out


# ---- kloom offline strategist: prefetch_exchange ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation, with rewritten calls (prefetch_exchange)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = self._kloom_eager

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
