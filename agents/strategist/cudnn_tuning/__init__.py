"""Strategy: convolutions under cuDNN's autotuner (``cudnn.benchmark``), in channels-last layout.

cuDNN picks a convolution algorithm by heuristics unless ``torch.backends.cudnn.benchmark`` is on,
when it times the algorithms for each new shape once and keeps the fastest (FFT, Winograd, implicit
GEMM variants). Inductor leaves convolutions to cuDNN too, so the autotuner helps eager and
compiled steps alike. Channels-last (NHWC) is the layout cuDNN's tensor-core kernels want; for
float32 without TF32 it may or may not pay, so it is its own option.

A candidate turns the autotuner on only around its own forward, with the context manager
``torch.backends.cudnn.flags`` (an assignment to ``torch.backends`` would be a patch the static
checker rejects, and would leak into the reference timed beside it), and passes
``allow_tf32=False`` itself: the flags' default would switch cuDNN's TF32 on, which the judge
rejects on float32 references.

Detection: the traced step runs ``aten::convolution``. Codegen: ``candidate``.
"""

from __future__ import annotations

from agents.analysis import Analysis

from ..dominance import dominance
from ..options import Option

#: The wrapper name plans carry (``offline.offline_candidate`` routes it here).
WRAPPER = "cudnn"

_MODEL_NEW = '''

# ---- kloom offline strategist: {label} ----
import torch as _kl_torch


def _kl_channels_last(t):
    """A 4-D (5-D) tensor in channels-last (channels-last-3d) layout; anything else as it is."""
    if isinstance(t, _kl_torch.Tensor) and t.dim() == 4:
        return t.contiguous(memory_format=_kl_torch.channels_last)
    if isinstance(t, _kl_torch.Tensor) and t.dim() == 5:
        return t.contiguous(memory_format=_kl_torch.channels_last_3d)
    return t


class ModelNew(Model):
    """The reference's computation under cuDNN's autotuner{description}."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_fn = {fn_expr}
{init}
    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
{inputs}        with _kl_torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=False):
            return self._kloom_fn(*args)
'''

_INIT_CHANNELS_LAST = '''        with _kl_torch.no_grad():
            for p in self.parameters():
                if p.dim() in (4, 5):
                    p.data = _kl_channels_last(p.data)
'''
_INPUTS_CHANNELS_LAST = '''        args = [_kl_channels_last(a) for a in args]
'''


def options(a: Analysis) -> list[Option]:
    """The options for a step that runs convolutions on a GPU."""
    convs = sum(1 for op in a.ops if op == "aten::convolution")
    if a.device != "cuda" or not convs:
        return []
    bound = a.dominant == "compute"
    low = any(d in ("bfloat16", "float16") for d in a.dtypes)
    share = dominance(a.op_graph).convolutions
    why = (
        f"the step runs convolutions (~{100 * share:.0f}% of its roofline time), which cuDNN schedules by heuristics; with "
        "its autotuner on it times its algorithms once per shape and keeps the fastest (TF32 stays off)"
    )
    weight = 0.3 * share + (0.1 if bound else 0.0)
    out = [
        Option("cudnn_benchmark", {"wrapper": WRAPPER, "channels_last": False}, 0.35 + weight, why),
        Option(
            "cudnn_channels_last",
            {"wrapper": WRAPPER, "channels_last": True},
            0.25 + (0.25 if low else 0.0) + weight,
            why + ", on channels-last tensors: the layout cuDNN's tensor-core kernels read without transposing"
            + ("" if low else " (for float32 without TF32 it may not pay: measured, not assumed)"),
        ),
    ]
    if a.n_elementwise >= 2:
        out.append(
            Option(
                "cudnn_benchmark_compiled",
                {"wrapper": WRAPPER, "channels_last": False, "inner": "compile"},
                0.4 + weight + 0.02 * min(a.n_elementwise, 10),
                why + f", and the {a.n_elementwise} elementwise/normalisation kernels around them fused by inductor",
            )
        )
    return out


def candidate(source: str, params: dict, label: str) -> str:
    """The reference's source and ``ModelNew`` running its forward under the autotuner
    (``params``: ``channels_last``, ``inner`` = ``"compile"`` for inductor around it)."""
    channels_last = bool(params.get("channels_last"))
    compiled = params.get("inner") == "compile"
    description = (", in channels-last layout" if channels_last else "") + (", compiled by inductor" if compiled else "")
    return source.rstrip() + "\n" + _MODEL_NEW.format(
        label=label,
        description=description,
        fn_expr="_kl_torch.compile(self._kloom_eager, dynamic=False)" if compiled else "self._kloom_eager",
        init=_INIT_CHANNELS_LAST if channels_last else "",
        inputs=_INPUTS_CHANNELS_LAST if channels_last else "",
    )
