"""Causal depthwise convolution (Mamba's short conv) of a sequence split across ranks.

Rank ``r`` holds positions ``r*L/W .. (r+1)*L/W - 1`` of ``x`` (batch, channels, length). The
convolution is causal and depthwise with kernel ``K`` (each channel its own filter, ``K-1`` zeros
before the start of the whole sequence), followed by SiLU: each rank receives the last ``K-1``
columns of the previous rank, sends its own to the next, and returns its positions of
``silu(conv1d(x, weight, bias, padding=K-1, groups=C)[..., :L])``. Weights are the same on every
rank.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAMILY = "other"
DESCRIPTION = "Causal depthwise conv1d + SiLU under context parallelism: the last K-1 columns pass to the next rank (Mamba/Mamba-2 short convolution with the sequence split over GPUs)."
SOURCE = "Mamba-2 causal_conv1d (kernel 4) with context parallelism; Mamba-2 2.7B conv width (d_inner 5120 + 2 x 128 state = 5376 channels)"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(batch=2, channels=6, length=32, kernel=4, dtype=torch.float32),
    "gpu": dict(batch=4, channels=5376, length=32768, kernel=4, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, channels, kernel):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, kernel, dtype=P["dtype"]) / kernel**0.5)
        self.bias = nn.Parameter(torch.randn(channels, dtype=P["dtype"]))
        for p in (self.weight, self.bias):
            dist.broadcast(p.data, src=0)

    def forward(self, x):
        rank, world = dist.get_rank(), dist.get_world_size()
        history = self.weight.shape[-1] - 1
        previous = x.new_zeros(x.shape[0], x.shape[1], history)
        ops = []
        if rank > 0:
            ops.append(dist.P2POp(dist.irecv, previous, rank - 1))
        if rank < world - 1:
            ops.append(dist.P2POp(dist.isend, x[..., -history:].contiguous(), rank + 1))
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        y = _kloom_conv1d(torch.cat([previous, x], dim=-1), self.weight, self.bias, groups=x.shape[1])
        return F.silu(y)


def get_init_inputs():
    return [P["channels"], P["kernel"]]


def get_inputs():
    length = P["length"] // dist.get_world_size()
    return [torch.randn(P["batch"], P["channels"], length, dtype=P["dtype"])]


def roofline(world_size, inputs):
    x = inputs[0]
    b, c, _ = x.shape
    k = P["kernel"]
    e = x.element_size()
    return {
        "flops": 2 * x.numel() * k,
        "hbm_bytes": e * (2 * x.numel() + c * (k + 1)),
        "link_bytes": e * b * c * (k - 1),
        "dtype": "bf16" if x.dtype == torch.bfloat16 else "fp32",
    }

import itertools as _kl_itertools
import torch as _kl_torch
import torch.nn.functional as _kl_F


def _kl_ints(value, n):
    """``value`` as ``n`` ints (an int or a sequence of ``n`` ints), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * n
    if isinstance(value, (tuple, list)) and len(value) == n and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    return None


def _kl_depthwise(x, weight, bias, stride, padding, dilation, groups, nd):
    """The ``nd``-dimensional depthwise convolution of ``x`` as a sum of shifted slices times
    per-channel taps, accumulated in float32 and rounded once; None where that does not apply."""
    if not (isinstance(x, _kl_torch.Tensor) and isinstance(weight, _kl_torch.Tensor)):
        return None
    if x.dim() != nd + 2 or weight.dim() != nd + 2 or not x.dtype.is_floating_point:
        return None
    channels = x.shape[1]
    depthwise = isinstance(groups, (int, _kl_torch.SymInt)) and not isinstance(groups, bool) and groups == channels
    if not (depthwise and weight.shape[0] == channels and weight.shape[1] == 1):
        return None
    if _kl_ints(stride, nd) != (1,) * nd or _kl_ints(dilation, nd) != (1,) * nd:
        return None
    pads = (0,) * nd if isinstance(padding, str) and padding == "valid" else _kl_ints(padding, nd)
    if pads is None or min(pads) < 0:
        return None
    if weight.dtype != x.dtype or weight.device != x.device:
        return None
    if bias is not None and not (
        isinstance(bias, _kl_torch.Tensor) and tuple(bias.shape) == (channels,) and bias.dtype == x.dtype and bias.device == x.device
    ):
        return None
    taps = tuple(weight.shape[2:])
    sizes = tuple(x.shape[2 + i] + 2 * pads[i] - taps[i] + 1 for i in range(nd))
    if min(sizes) <= 0:
        return None
    accumulate = _kl_torch.promote_types(x.dtype, _kl_torch.float32)
    padded = _kl_F.pad(x, [p for p in reversed(pads) for _ in range(2)]) if any(pads) else x
    padded = padded.to(accumulate)
    w = weight.to(accumulate)
    per_channel = (1, channels) + (1,) * nd
    out = None
    for offset in _kl_itertools.product(*(range(k) for k in taps)):
        window = padded[(slice(None), slice(None)) + tuple(slice(o, o + n) for o, n in zip(offset, sizes))]
        tap = w[(slice(None), 0) + offset].reshape(per_channel)
        if out is None:
            out = window * tap
        else:
            out.addcmul_(window, tap)
    if bias is not None:
        out.add_(bias.to(accumulate).reshape(per_channel))
    return out.to(x.dtype)


_KL_CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_KL_CONV_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}


def _kl_depthwise_call(args, kwargs, nd):
    """The call's arguments bound as the convolution binds them, then ``_kl_depthwise``; None
    where they do not bind (the original call then raises what it raises)."""
    if len(args) > len(_KL_CONV_PARAMS) or set(kwargs) - set(_KL_CONV_PARAMS[len(args):]):
        return None
    bound = dict(_KL_CONV_DEFAULTS)
    bound.update(zip(_KL_CONV_PARAMS, args))
    bound.update(kwargs)
    if "input" not in bound or "weight" not in bound:
        return None
    return _kl_depthwise(*(bound[name] for name in _KL_CONV_PARAMS), nd)


def _kloom_conv1d(*args, **kwargs):
    """``conv1d(*args, **kwargs)``, as shifted multiply-adds when it is depthwise."""
    out = _kl_depthwise_call(args, kwargs, 1)
    return _kl_F.conv1d(*args, **kwargs) if out is None else out


def _kloom_conv2d(*args, **kwargs):
    """``conv2d(*args, **kwargs)``, as shifted multiply-adds when it is depthwise."""
    out = _kl_depthwise_call(args, kwargs, 2)
    return _kl_F.conv2d(*args, **kwargs) if out is None else out


# ---- kloom offline strategist: depthwise_conv_compiled ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation, compiled with torch.compile (mode default), with rewritten calls (depthwise_conv)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = _kl_torch.compile(self._kloom_eager, dynamic=False, mode='default')

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
