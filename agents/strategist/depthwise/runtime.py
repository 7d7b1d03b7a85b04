"""What a candidate whose depthwise convolutions were rewritten runs
(``_kloom_conv1d``/``_kloom_conv2d``): shifted multiply-adds that inductor can fuse; any other
convolution goes to ``torch.nn.functional``.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

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
