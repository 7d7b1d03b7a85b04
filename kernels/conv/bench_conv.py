"""The implicit-GEMM convolution against cuDNN (eager, and with its autotuner) and inductor on
one GPU, pattern by pattern: 2-D 3x3 with bias and ReLU in float32 and bfloat16, a strided
transposed 2-D convolution, a 3-D convolution, a grouped one; the tap-outer kernel
(``tap_gemm.py``, patterns ``taps``) and the folded-window ones for few input channels
(``folded.py``, patterns ``folded tf32x3``; ``folded_transposed.py``, patterns ``folded-transposed``)
in three TF32 products; the depthwise kernel (``depthwise.py``, patterns ``depthwise``).

    python kernels/conv/bench_conv.py --out "$OUT" [--patterns conv3d groups ...] [--budget-s 50]

``--patterns``: only the patterns whose name contains one of these words (the others' results
are known). Writes ``bench_conv.json`` and ``bench_conv.md`` under ``--out`` after every pattern
and starts no pattern after ``--budget-s``. Correctness against the exact result is
``verify_conv.py``'s.
"""

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.conv.depthwise import conv_depthwise  # noqa: E402
from kernels.conv.folded import conv_folded  # noqa: E402
from kernels.conv.folded_transposed import conv_transposed_folded  # noqa: E402
from kernels.conv.implicit_gemm import conv_forward  # noqa: E402
from kernels.conv.tap_gemm import conv_taps  # noqa: E402
from kernels.benchmark import pattern_args, pattern_table, run_patterns  # noqa: E402
from kernels.gemm.bench_gemm import bench_ms, compare, selected  # noqa: E402
from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.verdict import CHANNELS_LAST  # noqa: E402  (the suffix the verdict's --layouts reads)


#: The template kinds these patterns measure (float32 and 16-bit, plain and transposed).
KINDS = frozenset({"conv_fp32", "conv_fp32x3", "conv_folded_fp32x3", "conv_transposed_folded_fp32x3", "conv_depthwise", "conv_lowp",
                   "conv_transposed_fp32", "conv_transposed_fp32x3"})

def patterns():
    dev = "cuda"
    relu = ([], *gemm_chain("relu"))
    for dtype, tol in ((torch.float32, (1e-4, 1e-4)), (torch.bfloat16, (1e-2, 1.6e-2))):
        x, w, b = torch.randn(16, 64, 128, 128, device=dev, dtype=dtype), torch.randn(128, 64, 3, 3, device=dev, dtype=dtype), torch.randn(128, device=dev, dtype=dtype)
        tag = str(dtype).replace("torch.", "")
        yield f"conv2d 3x3 64->128 16x128x128 + relu {tag}", (lambda x=x, w=w, b=b: torch.relu(F.conv2d(x, w, b, 1, 1))), (
            lambda x=x, w=w, b=b: conv_forward(x, w, b, 1, 1, 1, False, 0, 1, relu)), tol
    x, w = torch.randn(8, 64, 64, 64, device=dev), torch.randn(64, 32, 4, 4, device=dev)
    yield "conv_transpose2d 4x4 s2 64->32 8x64x64", lambda: F.conv_transpose2d(x, w, None, 2, 1), lambda: conv_forward(x, w, None, 2, 1, 1, True, 0, 1), (1e-4, 1e-4)
    x, w = torch.randn(4, 32, 16, 64, 64, device=dev), torch.randn(64, 32, 3, 3, 3, device=dev)
    yield "conv3d 3x3x3 32->64 4x16x64x64", lambda: F.conv3d(x, w, None, 1, 1), lambda: conv_forward(x, w, None, 1, 1, 1, False, 0, 1), (1e-4, 1e-4)
    x, w = torch.randn(16, 128, 64, 64, device=dev), torch.randn(128, 16, 3, 3, device=dev)
    yield "conv2d 3x3 groups=8 128->128 16x64x64", lambda: F.conv2d(x, w, None, 1, 1, 1, 8), lambda: conv_forward(x, w, None, 1, 1, 1, False, 0, 8), (1e-4, 1e-4)
    # conv_fp32x3: the tap-outer implicit GEMM (tap_gemm.py), float32 as three TF32 products, with
    # the input as it comes (NCHW) and made channels-last first. Weights at nn.Conv's scale.
    for label, shape, c_out, k, extra in (
        ("conv2d 3x3 64->128 128x128x128 + bias", (128, 64, 128, 128), 128, (3, 3), True),
        ("conv2d 3x3 16->128 16x512x512", (16, 16, 512, 512), 128, (3, 3), False),
        ("conv2d 3x3 8->64 128x128x128 + bias", (128, 8, 128, 128), 64, (3, 3), True),
        ("conv3d 3x3x3 32->64 16x32x64x64", (16, 32, 32, 64, 64), 64, (3, 3, 3), False),
    ):
        x = torch.rand(*shape, device=dev)
        w = (torch.rand(c_out, shape[1], *k, device=dev) - 0.5) / (shape[1] * len(k) ** 2) ** 0.5
        b = torch.rand(c_out, device=dev) if extra else None
        conv = F.conv2d if len(shape) == 4 else F.conv3d
        for cl in (False, True):
            yield (f"taps tf32x3 {label}{' ' + CHANNELS_LAST if cl else ''}", lambda x=x, w=w, b=b, conv=conv: conv(x, w, b),
                   lambda x=x, w=w, b=b, cl=cl: conv_taps(x, w, b, precision="tf32x3", channels_last=cl), (1e-4, 1e-4))
    # conv_folded_fp32x3: few input channels a group (fewer than the tap-outer kernel's 16), the
    # whole window one reduction (folded.py): 2-D and 3-D, 3 and 8 channels, with a bias.
    for label, shape, c_out, k in (
        ("conv2d 3x3 3->16 64x256x256", (64, 3, 256, 256), 16, (3, 3)),
        ("conv2d 3x3 8->64 128x128x128", (128, 8, 128, 128), 64, (3, 3)),
        ("conv2d 3x3 8->32 64x256x256", (64, 8, 256, 256), 32, (3, 3)),
        ("conv3d 3x3x3 3->16 64x16x64x64", (64, 3, 16, 64, 64), 16, (3, 3, 3)),
        ("conv3d 3x3x3 8->32 32x16x64x64", (32, 8, 16, 64, 64), 32, (3, 3, 3)),
    ):
        x = torch.rand(*shape, device=dev)
        w = (torch.rand(c_out, shape[1], *k, device=dev) - 0.5) / (shape[1] * math.prod(k)) ** 0.5
        b = torch.rand(c_out, device=dev)
        conv = F.conv2d if len(shape) == 4 else F.conv3d
        yield (f"folded tf32x3 {label} + bias", lambda x=x, w=w, b=b, conv=conv: conv(x, w, b),
               lambda x=x, w=w, b=b: conv_folded(x, w, b, precision="tf32x3"), (1e-4, 1e-4))
    # conv_transposed_folded_fp32x3: transposed, few input channels a group, each output phase's
    # (channel, tap) pairs one reduction (folded_transposed.py): strided upsampling of 3 and 8
    # channels, 2-D and 3-D, and a grouped, dilated one with phases no tap reaches.
    for label, shape, c_out_g, k, stride, pad, out_pad, dil, groups in (
        ("conv_transpose3d 3x3x3 s2 p1 op1 3->16 64x16x32x32", (64, 3, 16, 32, 32), 16, (3, 3, 3), 2, 1, 1, 1, 1),
        ("conv_transpose2d 3x3 s2 p1 op1 3->32 64x128x128", (64, 3, 128, 128), 32, (3, 3), 2, 1, 1, 1, 1),
        ("conv_transpose2d 4x4 s2 p1 8->64 64x64x64", (64, 8, 64, 64), 64, (4, 4), 2, 1, 0, 1, 1),
        ("conv_transpose2d 3x5 s(2,3) p(1,2) d(2,1) g4 32->64 16x64x128", (16, 32, 64, 128), 16, (3, 5), (2, 3), (1, 2), 0, (2, 1), 4),
    ):
        x = torch.rand(*shape, device=dev)
        w = (torch.rand(shape[1], c_out_g, *k, device=dev) - 0.5) / (shape[1] // groups * math.prod(k)) ** 0.5
        b = torch.rand(c_out_g * groups, device=dev)
        conv_t = F.conv_transpose2d if len(shape) == 4 else F.conv_transpose3d
        yield (f"folded-transposed tf32x3 {label} + bias",
               lambda x=x, w=w, b=b, conv_t=conv_t, st=stride, pd=pad, op=out_pad, g=groups, dl=dil: conv_t(x, w, b, st, pd, op, g, dl),
               lambda x=x, w=w, b=b, st=stride, pd=pad, op=out_pad, g=groups, dl=dil: conv_transposed_folded(x, w, b, st, pd, dl, op, g, precision="tf32x3"),
               (1e-4, 1e-4))
    # conv_depthwise: one input channel a group, float32 (direct multiply-adds, no tensor cores).
    for label, shape, k, stride, pad, mult in (
        ("conv2d 3x3 64ch 32x256x256", (32, 64, 256, 256), (3, 3), 1, 0, 1),
        ("conv2d 3x1 16ch 32x512x512", (32, 16, 512, 512), (3, 1), 1, 0, 1),
        ("conv2d 5x5 s2 p2 96ch 32x128x128 x2", (32, 96, 128, 128), (5, 5), 2, 2, 2),
        ("conv1d 4 p3 1024ch 16x8192", (16, 1024, 8192), (4,), 1, 3, 1),
    ):
        x = torch.rand(*shape, device=dev)
        w = (torch.rand(shape[1] * mult, 1, *k, device=dev) - 0.5) / math.prod(k) ** 0.5
        b = torch.rand(shape[1] * mult, device=dev)
        conv = F.conv2d if len(shape) == 4 else F.conv1d
        yield (f"depthwise {label} + bias", lambda x=x, w=w, b=b, conv=conv, st=stride, pd=pad: conv(x, w, b, st, pd, 1, x.shape[1]),
               lambda x=x, w=w, b=b, st=stride, pd=pad: conv_depthwise(x, w, b, st, pd), (1e-4, 1e-4))
    # Transposed: stride 1 (one phase), and the strided upsampling classes (a phase per output
    # position modulo the stride, each with the taps that reach it).
    for label, shape, c_out, k, stride, pad, out_pad in (
        ("conv_transpose2d 3x3 s1 64->64 8x256x256", (8, 64, 256, 256), 64, (3, 3), 1, 0, 0),
        ("conv_transpose2d 4x4 s2 p1 64->64 32x128x128", (32, 64, 128, 128), 64, (4, 4), 2, 1, 0),
        ("conv_transpose3d 3x3x3 s2 p1 op1 32->64 16x16x64x64", (16, 32, 16, 64, 64), 64, (3, 3, 3), 2, 1, 1),
    ):
        x = torch.rand(*shape, device=dev)
        w = (torch.rand(shape[1], c_out, *k, device=dev) - 0.5) / (shape[1] * len(k) ** 2) ** 0.5
        conv_t = F.conv_transpose2d if len(shape) == 4 else F.conv_transpose3d
        for cl in (False, True):
            yield (f"taps tf32x3 {label}{' ' + CHANNELS_LAST if cl else ''}",
                   lambda x=x, w=w, conv_t=conv_t, st=stride, pd=pad, op=out_pad: conv_t(x, w, None, st, pd, op),
                   lambda x=x, w=w, st=stride, pd=pad, op=out_pad, cl=cl: conv_taps(x, w, None, st, pd, 1, True, op, 1, precision="tf32x3", channels_last=cl),
                   (1e-4, 1e-4))


def measure(name, eager, kloom, tol) -> dict:
    """One pattern beside eager and inductor (``compare``), then beside cuDNN's autotuner."""
    row = compare(name, eager, kloom, ("default",), tol)
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=False):
        eager()
        row["cudnn_benchmark_ms"] = bench_ms(eager)
    return row


def main() -> None:
    args, command = pattern_args(__doc__, "kernels/conv/bench_conv.py")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rivals, device = [("cudnn.benchmark", "cudnn_benchmark_ms"), ("compile default", "default_ms")], torch.cuda.get_device_name()
    run_patterns(selected(patterns(), args.patterns), measure, args.out, "bench_conv",
                 lambda rows: pattern_table(rows, "Convolution kernel vs cuDNN and inductor", command, rivals, device), args.budget_s)


if __name__ == "__main__":
    main()
