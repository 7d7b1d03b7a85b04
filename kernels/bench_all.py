"""Every family's benchmark in one run on one GPU, and optionally the kernel strategy end to end on
KernelBench problems: ``python -m kernels.bench_all --out "$OUT" [--kernelbench DIR ...]``.

Part 1 (the families): each case checks kloom's kernel against eager PyTorch and times it beside
eager and ``torch.compile`` of the same torch function (``kernels/benchmark.py``). It writes
``kernels_bench.json``, ``kernels_bench.md`` and ``wins.json`` under ``--out`` (commit
``wins.json`` as ``kernels/wins.json``: the strategist then offers a kind of kernel only where it
beat inductor).

Part 2 (with ``--kernelbench``, directories of KernelBench problem files): each problem is traced
on the GPU at its own sizes, the kernel templates are matched on its op graph (problems no
template matches are listed and skipped), the candidate the strategist would write is built,
checked against the reference on fresh inputs, and timed beside the reference eager and compiled.
It writes ``kernel_candidates.json`` and ``kernel_candidates.md``.
"""

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import torch
import triton

from agents.strategist.triton_kernels.plan import find_matches, kernel_candidate
from kernels.batchnorm import bench_batchnorm
from kernels.benchmark import relative_error, run
from kernels.cross_entropy import bench_cross_entropy
from kernels.elementwise import bench_elementwise
from kernels.layernorm import bench_layernorm
from kernels.reduce import bench_reduce
from kernels.scan import bench_scan
from kernels.softmax import bench_softmax
from kloom.opgraph import OpGraph
from services.worker.evaluator.tracing import trace_call

FAMILIES = {
    "elementwise": bench_elementwise,
    "softmax": bench_softmax,
    "layer_norm": bench_layernorm,
    "batch_norm": bench_batchnorm,
    "cross_entropy": bench_cross_entropy,
    "reduction": bench_reduce,
    "scan": bench_scan,
}


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile finds a compiled function's globals by its module's name
    spec.loader.exec_module(module)
    return module


def _build(module, cls, seed: int):
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = cls(*module.get_init_inputs())
    return model.cuda() if isinstance(model, torch.nn.Module) else model


def _inputs(module, seed: int) -> list:
    torch.manual_seed(seed)
    with torch.device("cuda"):
        return [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]


def _leaves(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _close(got, want) -> tuple[bool, float]:
    worst = 0.0
    for g, w in zip(_leaves(got), _leaves(want)):
        if not isinstance(w, torch.Tensor):
            continue
        if g.shape != w.shape or g.dtype != w.dtype:
            return False, math.inf
        if not w.is_floating_point():
            worst = max(worst, float((g != w).double().mean()))
            continue
        worst = max(worst, relative_error(g, w))
    return worst <= 1e-4, worst


def problem_row(path: Path) -> dict:
    """One KernelBench problem through the kernel strategy on this GPU."""
    started = time.monotonic()
    module = _load(path, f"_kb_{path.stem}")
    reference = _build(module, module.Model, 0)
    inputs = _inputs(module, 1)
    graph = OpGraph.from_dict(trace_call(reference, inputs)["op_graph"])
    plan = find_matches(graph)
    row = {"problem": path.name, "regions": [m.template for m in plan.matches]}
    if not plan.matches:
        row["skipped"] = "no template matches"
        return row
    reference = _build(module, module.Model, 0)
    inputs = _inputs(module, 2)
    with torch.no_grad():
        want = reference(*inputs)
        compiled = torch.compile(reference)
        compiled(*inputs)
        contenders = [("eager", reference), ("inductor", compiled)]
        # The plain replay, and the replay compiled around the kernels' regions (the hybrid).
        for label, mode in (("kernels", None), ("hybrid", "default")):
            try:
                source = kernel_candidate(path.read_text(), graph, None, "bench", mode)
            except ValueError as exc:  # NotReplayable: this form does not apply
                row[f"{label}_skipped"] = str(exc)[:200]
                continue
            candidate_path = Path("/tmp") / f"kloom_candidate_{label}_{path.stem}.py"
            candidate_path.write_text(source)
            candidate = _build(module, _load(candidate_path, f"_kbc_{label}_{path.stem}").ModelNew, 0)
            got = candidate(*inputs)
            row[f"{label}_correct"], row[f"{label}_error"] = _close(got, want)
            contenders.append((label, candidate))
        row["correct"], row["error"] = row.get("kernels_correct", False), row.get("kernels_error", math.inf)
        times = {}
        for label, fn in contenders:
            times[label] = triton.testing.do_bench(lambda fn=fn: fn(*inputs), warmup=10, rep=50)
    row.update({f"{k}_ms": v for k, v in times.items()})
    best = min((k for k in ("kernels", "hybrid") if k in times and row.get(f"{k}_correct")), key=times.get, default=None)
    row["best"] = best
    if best is not None:
        row["vs_eager"] = times["eager"] / times[best]
        row["vs_inductor"] = times["inductor"] / times[best]
    row["seconds"] = time.monotonic() - started
    return row


def run_problems(directories: list[str], out: Path | None, budget_s: float, resume: Path | None = None) -> list[dict]:
    """Every problem in ``directories``; rows already measured in ``resume`` (an earlier call's
    ``kernel_candidates.json``) are kept, not run again."""
    done = [r for r in json.loads(resume.read_text()) if "skipped" not in r or r["skipped"] != "out of time"] if resume and resume.is_file() else []
    rows: list[dict] = list(done)
    seen = {r["problem"] for r in done}
    started = time.monotonic()
    files = sorted(p for d in directories for p in Path(d).glob("*.py"))
    for path in files:
        if path.name in seen:
            continue
        if time.monotonic() - started > budget_s:
            rows.append({"problem": path.name, "skipped": "out of time"})
            continue
        try:
            row = problem_row(path)
        except Exception as exc:  # noqa: BLE001 - one problem's failure must not lose the others
            row = {"problem": path.name, "failure": f"{type(exc).__name__}: {str(exc)[:400]}"}
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out is not None:
            (out / "kernel_candidates.json").write_text(json.dumps(rows, indent=1))
            (out / "kernel_candidates.md").write_text(_problems_markdown(rows))
    return rows


def _problems_markdown(rows: list[dict]) -> str:
    lines = [
        f"# The kernel strategy on KernelBench problems ({torch.cuda.get_device_name()})",
        "",
        "Each candidate checked against eager (relative error <= 1e-4) and timed with `triton.testing.do_bench` in one",
        "process; `best` is the faster correct one of the plain replay (`kernels`) and the replay compiled around the",
        "kernels' regions (`hybrid`).",
        "",
        "| problem | regions | kernels: correct (error) | hybrid: correct (error) | eager ms | inductor ms | kernels ms | hybrid ms | best vs eager | best vs inductor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def verdict(r, label):
        if f"{label}_correct" not in r:
            return r.get(f"{label}_skipped", "")[:60]
        return f"{'yes' if r[f'{label}_correct'] else 'NO'} ({r[f'{label}_error']:.1e})"

    def ms(r, label):
        return f"{r[f'{label}_ms']:.3f}" if f"{label}_ms" in r else ""

    for r in rows:
        if "eager_ms" not in r:
            why = r.get("skipped") or r.get("failure", "")
            lines.append(f"| {r['problem']} | {', '.join(r.get('regions', []))} | {why[:160]} | | | | | | | |")
            continue
        gains = (f"{r['vs_eager']:.2f}x ({r['best']}) | {r['vs_inductor']:.2f}x") if r.get("best") else "no correct candidate | "
        lines.append(
            f"| {r['problem']} | {', '.join(r['regions'])} | {verdict(r, 'kernels')} | {verdict(r, 'hybrid')} | {ms(r, 'eager')} | "
            f"{ms(r, 'inductor')} | {ms(r, 'kernels')} | {ms(r, 'hybrid')} | {gains} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="folder for the tables and wins.json")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated families to run")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the families' cases")
    parser.add_argument("--kernelbench", nargs="*", default=[], help="directories of KernelBench problems to run end to end")
    parser.add_argument("--problems-budget", type=float, default=240.0, help="seconds for the problems")
    parser.add_argument("--resume", default=None, help="an earlier call's kernel_candidates.json: its measured problems are kept")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("kernels.bench_all needs a CUDA GPU")
    out = Path(args.out) if args.out else None
    command = "python -m kernels.bench_all " + " ".join(sys.argv[1:] if argv is None else argv)
    # One case of every family first, then the second ones...: a run cut short by its budget has
    # measured every kind.
    per_family = [FAMILIES[name].cases() for name in args.families.split(",")]
    cases = [family[i] for i in range(max(map(len, per_family))) for family in per_family if i < len(family)]
    run(cases, str(out) if out else None, command, budget_s=args.budget)
    if args.kernelbench:
        run_problems(args.kernelbench, out, args.problems_budget, Path(args.resume) if args.resume else None)


if __name__ == "__main__":
    main()
