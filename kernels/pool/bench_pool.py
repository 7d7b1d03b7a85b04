"""The pooling kernel against PyTorch's pooling (eager) and inductor on one GPU, pattern by
pattern: max and average pooling over 1-3 dimensions, strided, padded and dilated.

    python kernels/pool/bench_pool.py --out "$OUT" [--patterns max avg ...] [--budget-s 100]

``--patterns``: only the patterns whose name contains one of these words. Writes
``bench_pool.json`` and ``bench_pool.md`` under ``--out`` after every pattern and starts no
pattern after ``--budget-s``; ``kernels/verdict.py --kind pool`` reads the rows.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.benchmark import pattern_args, pattern_table, run_patterns  # noqa: E402
from kernels.gemm.bench_gemm import compare, selected  # noqa: E402
from kernels.pool.kernel import pool  # noqa: E402

#: The template kinds these patterns measure.
KINDS = frozenset({"pool"})


def patterns():
    dev = "cuda"
    for label, shape, kind, k, s, p, d in (
        ("max 2-D 2x2 s2 64ch 32x512x512", (32, 64, 512, 512), "max", (2, 2), (2, 2), (0, 0), (1, 1)),
        ("max 2-D 3x3 s2 p1 64ch 32x256x256", (32, 64, 256, 256), "max", (3, 3), (2, 2), (1, 1), (1, 1)),
        ("max 3-D 3x3x3 s2 p1 dilation 2 16x32x64x64x64", (16, 32, 64, 64, 64), "max", (3, 3, 3), (2, 2, 2), (1, 1, 1), (2, 2, 2)),
        ("max 1-D 8 s1 p4 dilation 3 64x128x32768", (64, 128, 32768), "max", (8,), (1,), (4,), (3,)),
        ("avg 2-D 4x4 s4 64ch 32x512x512", (32, 64, 512, 512), "avg", (4, 4), (4, 4), (0, 0), (1, 1)),
        ("avg 3-D 2x2x2 s2 16x32x64x64x64", (16, 32, 64, 64, 64), "avg", (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)),
    ):
        x = torch.rand(*shape, device=dev)
        nd = len(k)
        if kind == "max":
            eager = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
            yield (f"pool {label}", lambda x=x, e=eager, k=k, s=s, p=p, d=d: e(x, k, s, p, d),
                   lambda x=x, k=k, s=s, p=p, d=d: pool(x, "max", k, s, p, d), (1e-6, 1e-6))
        else:
            eager = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
            yield (f"pool {label}", lambda x=x, e=eager, k=k, s=s, p=p: e(x, k, s, p),
                   lambda x=x, k=k, s=s, p=p: pool(x, "avg", k, s, p), (1e-5, 1e-5))


def main() -> None:
    args, command = pattern_args(__doc__, "kernels/pool/bench_pool.py")
    device = torch.cuda.get_device_name()
    run_patterns(selected(patterns(), args.patterns), lambda *pattern: compare(*pattern[:3], ("default",), pattern[3]), args.out, "bench_pool",
                 lambda rows: pattern_table(rows, "Pooling kernel vs PyTorch and inductor", command, [("compile default", "default_ms")], device),
                 args.budget_s)


if __name__ == "__main__":
    main()
