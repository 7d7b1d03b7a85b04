"""The GEMM kernel against cuBLAS (eager) and inductor (``torch.compile`` default and
max-autotune) on one GPU, pattern by pattern, side by side in one run: a product and the
elementwise epilogue after it, in float32 (full precision, no TF32) and bfloat16, a triangle of a
product of triangular factors, a small-K and a tall-skinny product, a batched one.

    python kernels/gemm/bench_gemm.py --out "$OUT" [--patterns tril ...] [--max-autotune tril ...] [--budget-s 40]

``--patterns``: only the patterns whose name contains one of these words (the others' results
are known); ``--max-autotune``: those also compiled with max-autotune (tens of seconds each).
Writes ``bench_gemm.json`` and ``bench_gemm.md`` under ``--out`` after every pattern, and starts
no pattern after ``--budget-s``. Imports torch, triton, the standard library and kernel modules.
"""

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.benchmark import pattern_args, run_patterns  # noqa: E402
from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.gemm.matmul import gemm, gemm_tuned_configs  # noqa: E402


#: The template kinds these patterns measure (float32 and bfloat16 products, the triangle).
KINDS = frozenset({"gemm_fp32", "gemm_fp32x3", "gemm_lowp", "gemm_triangular", "attention_fp32x3"})

def bench_ms(fn) -> float:
    """Median milliseconds (triton's do_bench: L2 flushed between calls)."""
    return float(triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median"))


def max_error(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> float:
    """The largest ``|got - want| / (atol + rtol |want|)``: at most 1 is within the judge's tolerance."""
    got, want = got.double(), want.double()
    return float(((got - want).abs() / (atol + rtol * want.abs())).max())


def compare(name: str, eager, kloom, modes: tuple[str, ...], tolerance: tuple[float, float]) -> dict:
    """One pattern: eager, kloom's kernel and each compile mode timed, each checked against eager
    (errors in units of the tolerance: at most 1 passes)."""
    want = eager()
    row = {"pattern": name, "eager_ms": bench_ms(eager), "kloom_error": max_error(kloom(), want, *tolerance), "tolerance": list(tolerance)}
    row["kloom_ms"] = bench_ms(kloom)
    for mode in modes:
        torch._dynamo.reset()
        fn = torch.compile(eager, mode=mode, dynamic=False)
        start = time.perf_counter()
        row[f"{mode}_error"] = max_error(fn(), want, *tolerance)
        row[f"{mode}_compile_s"] = round(time.perf_counter() - start, 1)
        row[f"{mode}_ms"] = bench_ms(fn)
    return row


def patterns():
    """(name, eager function, kloom function, tolerance) for each pattern."""
    dev = "cuda"
    for dtype, tol in ((torch.float32, (1e-4, 1e-4)), (torch.bfloat16, (1e-2, 1.6e-2))):
        x, w, b = (torch.randn(s, device=dev, dtype=dtype) for s in ((4096, 4096), (4096, 4096), (4096,)))
        post = ([b], *gemm_chain(("add", ("operand", 0)), "gelu"))
        tag = str(dtype).replace("torch.", "")
        yield f"linear 4096^3 {tag}", lambda x=x, w=w: x @ w.t(), lambda x=x, w=w: gemm(x, w.t()), tol
        yield f"linear 4096^3 + bias + gelu {tag}", (lambda x=x, w=w, b=b: F.gelu(F.linear(x, w, b))), (lambda x=x, w=w, post=post: gemm(x, w.t(), post)), tol
    # gemm_fp32x3: float32 as three TF32 products (kernels/gemm/tiles.py: GEMM_PRECISIONS).
    x, w, b = torch.rand(1024, 8192, device=dev), torch.rand(8192, 8192, device=dev) - 0.5, torch.rand(8192, device=dev)
    post = ([b], *gemm_chain(("add", ("operand", 0)), "gelu"))
    yield "tf32x3 linear 1024x8192x8192 + bias + gelu float32", (lambda: F.gelu(F.linear(x, w, b))), (lambda: gemm(x, w.t(), post, precision="tf32x3")), (1e-4, 1e-4)
    a, c = torch.rand(4096, 4096, device=dev), torch.rand(4096, 4096, device=dev)
    yield "tf32x3 square 4096^3 float32", lambda: a @ c, lambda: gemm(a, c, precision="tf32x3"), (1e-4, 1e-4)
    P, Q = torch.rand(128, 512, 1024, device=dev), torch.rand(128, 1024, 2048, device=dev)
    yield "tf32x3 bmm 128x512x1024x2048 float32", lambda: torch.bmm(P, Q), lambda: gemm(P, Q, precision="tf32x3"), (1e-4, 1e-4)
    # attention_fp32x3: the attention template's statement (t_attention.py) against PyTorch's
    # float32 attention (its memory-efficient kernel, on the CUDA cores).
    for shape in ((32, 32, 512, 1024), (16, 16, 1024, 64)):
        qkv = [torch.rand(*shape, device=dev) for _ in range(3)]
        post = ([], *gemm_chain(("mul", shape[-1] ** -0.5)))
        yield (f"tf32x3 attention {'x'.join(map(str, shape))} float32", lambda qkv=qkv: F.scaled_dot_product_attention(*qkv),
               lambda qkv=qkv, post=post: gemm(torch.softmax(gemm(qkv[0], qkv[1].transpose(-2, -1), post, precision="tf32x3"), dim=-1), qkv[2], precision="tf32x3"),
               (1e-4, 1e-4))
    L1, L2 = (torch.rand(4096, 4096, device=dev).tril() for _ in range(2))
    yield "tril(L @ L) 4096 float32", lambda: torch.tril(L1 @ L2), lambda: gemm(L1, L2, tril=0, triangular_inputs=True), (1e-4, 1e-4)
    A, B = torch.rand(16384, 64, device=dev), torch.rand(64, 16384, device=dev)
    yield "small K 16384x64x16384 float32", lambda: A @ B, lambda: gemm(A, B), (1e-4, 1e-4)
    T, S = torch.rand(32768, 32, device=dev), torch.rand(32, 32768, device=dev)
    yield "tall-skinny 32768x32 @ 32x32768 float32", lambda: T @ S, lambda: gemm(T, S), (1e-4, 1e-4)
    P, Q = torch.rand(64, 512, 1024, device=dev), torch.rand(64, 1024, 1024, device=dev)
    yield "bmm 64x512x1024x1024 float32", lambda: torch.bmm(P, Q), lambda: gemm(P, Q), (1e-4, 1e-4)


def selected(found, words: list[str] | None):
    """The patterns whose name contains one of ``words`` (all of them without words)."""
    for item in found:
        if words is None or any(w in item[0] for w in words):
            yield item


def report(rows: list[dict], modes, command: str) -> str:
    head = "| pattern | eager ms | kloom (error/tol) | " + " | ".join(modes) + " |"
    lines = [
        "# GEMM kernel vs cuBLAS and inductor",
        "",
        f"`{command}` on {torch.cuda.get_device_name()}. Speedups over eager; the error against eager in units of the tolerance "
        "(at most 1 passes); **wrong**: outside it; compile seconds in parentheses.",
        "",
        head,
        "|" + "---|" * (3 + len(modes)),
    ]
    for r in rows:
        cells = [f"{r['eager_ms'] / r['kloom_ms']:.2f}x ({r['kloom_error']:.2g})" + (" **wrong**" if r["kloom_error"] > 1 else "")]
        cells += [
            f"{r['eager_ms'] / r[f'{m}_ms']:.2f}x ({r[f'{m}_compile_s']} s)" + (" **wrong**" if r[f"{m}_error"] > 1 else "") if f"{m}_ms" in r else ""
            for m in modes
        ]
        lines.append(f"| {r['pattern']} | {r['eager_ms']:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", "Autotuned configurations:", *[f"- {c}" for c in gemm_tuned_configs()]]) + "\n"


def main() -> None:
    args, command = pattern_args(__doc__, "kernels/gemm/bench_gemm.py", lambda parser: parser.add_argument(
        "--max-autotune", nargs="*", default=[], help="patterns (words of their names) also compiled with max-autotune"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    modes = ("default",) + (("max-autotune",) if args.max_autotune else ())

    def measure(name, eager, kloom, tol) -> dict:
        return compare(name, eager, kloom, ("default",) + (("max-autotune",) if any(w in name for w in args.max_autotune) else ()), tol)

    def table(rows: list[dict]) -> str:
        ok = [r for r in rows if "error" not in r]
        return report(ok, modes, command) + "".join(f"\n- {r['pattern']}: {r['error']}" for r in rows if "error" in r)

    run_patterns(selected(patterns(), args.patterns), measure, args.out, "bench_gemm", table, args.budget_s)

if __name__ == "__main__":
    main()
