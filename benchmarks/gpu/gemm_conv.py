"""GEMM and convolution on one GPU, side by side in one run, over the KernelBench development
split's problems whose traced step runs a product or a convolution (found from the trace, never
from a name or id; sizes are the files' own ``get_inputs``/``get_init_inputs``). What each problem
measures is in ``gemm_conv_problem.py``.

Problems a results file of an earlier run already holds (``--known``) are not measured again:
their rows are carried into the report, marked. The others are ordered by their source (those
that build a convolution or a product first) and handed to worker processes that compile in
parallel (one inductor compile thread each, as the evaluator's ranks compile, so the compile
seconds are what a job pays); everything that times the GPU, autotuning included, runs under
one lock (``timing_lock.py``). ``--max-autotune N`` problems (a product with an epilogue and a
convolution, first found) also compile with max-autotune, in a worker of their own with more
compile threads. After ``--budget-s`` the workers are stopped and what was measured is reported;
the tables and verdicts are rewritten after every problem.

Writes ``$OUT/gemm_conv.json``, ``$OUT/gemm_conv.md`` and ``$OUT/wins_gemm_conv.json`` (the
per-kind verdicts, in ``kernels/wins.json``'s format).

    python benchmarks/gpu/gemm_conv.py --kernelbench shared/third_party/kernelbench/KernelBench --out "$OUT" \\
        --known results/gpu/h100-gemm-conv-1/gemm_conv.json --budget-s 170

Imports torch, triton, the standard library and kloom's own modules (no service dependencies).
"""

import argparse
import json
import math
import multiprocessing as mp
import os
import queue
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.gemm_conv_problem import KINDS  # noqa: E402

#: Source text that builds a convolution or a product: those problems are measured first.
CONV_SOURCE = re.compile(r"nn\.Conv|F\.conv|conv\d?d\(")
GEMM_SOURCE = re.compile(r"nn\.Linear|torch\.(matmul|bmm|mm|einsum|addmm)\b|\s@\s|F\.linear")


def discover(kernelbench: Path) -> list[Path]:
    """Level 1 and 2 problem files: the products of level 1 first, then the two levels
    interleaved, those whose source builds a convolution or a product before the others."""
    levels = [sorted((kernelbench / f"level{n}").glob("*.py"), key=lambda p: int(p.name.split("_")[0])) for n in (1, 2)]
    merged = []
    for i in range(max(len(x) for x in levels)):
        merged += [x[i] for x in levels if i < len(x)]
    text = {p: p.read_text() for p in merged}

    def rank(p: Path) -> int:
        if p.parent.name == "level1" and GEMM_SOURCE.search(text[p]) and not CONV_SOURCE.search(text[p]):
            return 0
        return 1 if CONV_SOURCE.search(text[p]) or GEMM_SOURCE.search(text[p]) else 2

    return sorted(merged, key=rank)


def worker(tasks, results, lock, scratch: str, compile_threads: int) -> None:
    """Measure problems from ``tasks`` until its end mark (None), each result onto ``results``."""
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(compile_threads)
    import torch

    from benchmarks.gpu import gemm_conv_problem as problem
    from benchmarks.gpu.timing_lock import GpuLock, time_alone

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = GpuLock(lock)
    hooked = time_alone(gpu) if problem.DEVICE == "cuda" else []
    device = torch.cuda.get_device_name() if problem.DEVICE == "cuda" else "the CPU (Triton interpreter: a smoke run, not a measurement)"
    while (task := tasks.get()) is not None:
        row = problem.run_problem(*task, gpu, scratch)
        row["timed_alone"], row["device"] = hooked, device
        results.put(row)


def representative(paths: list[Path], count: int) -> set[Path]:
    """Up to ``count`` problems for max-autotune: level 2's first product with an epilogue and
    first convolution, alternately."""
    picks, wanted = [], [GEMM_SOURCE, CONV_SOURCE]
    level2 = [p for p in paths if p.parent.name == "level2"]
    while len(picks) < count and wanted:
        pattern = wanted.pop(0)
        found = next((p for p in level2 if p not in picks and pattern.search(p.read_text()) and not (pattern is GEMM_SOURCE and CONV_SOURCE.search(p.read_text()))), None)
        if found is not None:
            picks.append(found)
            wanted.append(pattern)
    return set(picks)


def load_known(path: Path | None) -> dict[str, dict]:
    """Rows of an earlier run that need no new measurement: problems it traced as neither
    product nor convolution, and those it measured without error."""
    if path is None:
        return {}
    known = {}
    for row in json.loads(path.read_text()):
        if "error" not in row and (row.get("kind") is None or row.get("eager_ms")):
            # Rationales of earlier runs may predate what kernels/wins.json now says.
            kept = {k: v for k, v in row.items() if not k.endswith("_why")}
            known[row["problem"]] = {**kept, "run": path.parent.name}
    return known


def same_as(r: dict, key: str) -> str:
    """The variant whose measurement stands for ``key`` (``key`` unless it had the same regions
    as another, which was then measured alone)."""
    note = r.get(f"{key}_note", "")
    return note.removeprefix("the same regions as ") if note.startswith("the same regions as ") else key


def measured(r: dict, key: str, what: str = "ms"):
    """``key``'s milliseconds (or error), through the variant it shares its regions with."""
    return r.get(f"{same_as(r, key)}_{what}")


def ratio(a, b):
    return a / b if a and b else None


def fmt(x, digits=2):
    return "" if x is None else f"{x:.{digits}f}"


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def verdicts(results: list[dict], device: str, command: str) -> dict:
    """Per kernel kind: the geometric mean, over the problems where it matched, of inductor's
    time over the full kernel candidate's (``vs_inductor``) and of eager's over the GEMM/conv-only
    candidate's (``vs_eager``: its regions against cuBLAS/cuDNN and the unfused ops); it wins
    where both exceed 1 and every such candidate was correct."""
    kinds = {}
    for kind in KINDS:
        rows = [r for r in results if kind in (r.get("kloom_gemm_conv_kinds") or [])]
        if not rows:
            continue
        correct = all((measured(r, "kloom_gemm_conv", "error") or 0) <= 1 and (measured(r, "kloom_all", "error") or 0) <= 1 for r in rows)
        vs_inductor = geomean([ratio(r.get("compile_default_ms"), measured(r, "kloom_all")) for r in rows])
        vs_eager = geomean([ratio(r.get("eager_ms"), r.get("kloom_gemm_conv_ms")) for r in rows])
        kinds[kind] = {
            "vs_inductor": round(vs_inductor or 0.0, 4),
            "vs_eager": round(vs_eager or 0.0, 4),
            "cases": len(rows),
            "correct": correct,
            "wins": bool(correct and (vs_inductor or 0) > 1.0 and (vs_eager or 0) > 1.0),
            "measured_on": device,
        }
    return {"measured_on": device, "command": command, "kinds": kinds}


def _cell(r, key):
    ms = r.get(f"{key}_ms")
    if ms is None:
        return r.get(f"{key}_note", "")[:40]
    bad = (r.get(f"{key}_error") or 0) > 1
    exact = r.get(f"{key}_vs_exact")
    closer = f" (exact {exact:.2g} vs eager's {r['eager_vs_exact']:.2g})" if bad and exact is not None and "eager_vs_exact" in r else ""
    return f"{fmt(ratio(r.get('eager_ms'), ms))}x" + (" **wrong**" if bad else "") + closer


def report(results: list[dict], seconds: float, command: str, device: str, pending: list[str]) -> str:
    lines = [
        "# GEMM and convolution on one GPU: eager, cuDNN levers, torch.compile, kloom's kernels",
        "",
        f"Command: `{command}`; {seconds:.0f} s on {device}. Cells are speedups over eager (eager ms / variant ms); "
        "**wrong**: outside the judge's float32 tolerance of eager (with the errors against the float64 result of it and of eager). "
        "`kloom gemm/conv`: the kernel candidate with only the GEMM/conv templates, forced on; `kloom all`: every template, forced on; "
        "`kloom offered`: what the strategist offers now (kernels/wins.json). Compile seconds in parentheses (one compile thread, "
        "as in the evaluator; max-autotune in a worker with more). Rows marked with a run name were measured by that earlier run.",
        "",
        "| problem | kind | eager ms | compile default (s) | max-autotune (s) | cudnn.benchmark | channels-last | kloom gemm/conv | kloom all | kloom offered | kinds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["problem"].split("/")[0], int(r["problem"].split("/")[1].split("_")[0]))):
        if r.get("kind") is None and not r.get("error"):
            continue
        name = r["problem"] + (f" ({r['run']})" if r.get("run") else "")
        if r.get("error"):
            lines.append(f"| {name} | {r.get('kind') or ''} | error: {r['error'][:150]} ||||||||")
            continue
        lines.append(
            f"| {name} | {r['kind']} | {fmt(r.get('eager_ms'), 3)} | {_cell(r, 'compile_default')} ({r.get('compile_default_s', '')}) | "
            f"{_cell(r, 'compile_max-autotune')} ({r.get('compile_max-autotune_s', '')}) | {_cell(r, 'cudnn_benchmark')} | {_cell(r, 'channels_last')} | "
            f"{_cell(r, 'kloom_gemm_conv')} | {_cell(r, 'kloom_all')} | {_cell(r, 'kloom_offered')} | {', '.join(r.get('kloom_gemm_conv_kinds') or [])} |"
        )
    lines += ["", "## Verdicts per kernel kind (for kernels/wins.json)", "", "| kind | problems | vs inductor | vs cuBLAS/cuDNN | correct | wins |", "|---|---|---|---|---|---|"]
    for kind, v in verdicts(results, device, command)["kinds"].items():
        lines.append(f"| {kind} | {v['cases']} | {v['vs_inductor']:.3f}x | {v['vs_eager']:.3f}x | {v['correct']} | {v['wins']} |")
    for key, label in (("compile_default", "compile default"), ("cudnn_benchmark", "cudnn.benchmark"), ("channels_last", "channels-last"), ("kloom_all", "kloom all"), ("kloom_offered", "kloom offered")):
        g = geomean([ratio(r.get("eager_ms"), measured(r, key)) for r in results if (measured(r, key, "error") or 0) <= 1])
        lines.append(f"\nGeomean over eager, {label}: {fmt(g, 3) + 'x' if g else 'none measured'}")
    hooked = sorted({h for r in results for h in r.get("timed_alone", [])})
    lines.append(f"\nAutotuning timed under the GPU lock: {', '.join(hooked) or 'none (the hooks did not apply)'}")
    if pending:
        lines.append("\nNot measured within the budget: " + ", ".join(pending))
    return "\n".join(lines) + "\n"


def write(out: Path, results: list[dict], seconds: float, command: str, device: str, pending: list[str]) -> None:
    """Everything so far (after every problem: a run cut short keeps what it measured)."""
    (out / "gemm_conv.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "gemm_conv.md").write_text(report(results, seconds, command, device, pending))
    (out / "wins_gemm_conv.json").write_text(json.dumps(verdicts(results, device, command), indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", type=Path, required=True, help="the KernelBench folder holding level1/ and level2/")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/kloom-out")))
    parser.add_argument("--known", type=Path, default=None, help="gemm_conv.json of an earlier run: its measured problems are not run again")
    parser.add_argument("--budget-s", type=float, default=170.0, help="stop the workers and report after this many seconds")
    parser.add_argument("--max-autotune", type=int, default=2, help="problems also compiled with max-autotune (a product with an epilogue, a convolution)")
    parser.add_argument("--workers", type=int, default=5)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke run on small problems (TRITON_INTERPRET=1)")
    args = parser.parse_args()
    started = time.perf_counter()
    os.environ["KLOOM_GEMM_CONV_DEVICE"] = args.device  # the spawned workers read it
    command = " ".join(["python", "benchmarks/gpu/gemm_conv.py"] + sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "kloom-gemm-conv"
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(scratch / "inductor"))
    known = load_known(args.known)
    results = list(known.values())
    todo = [p for p in discover(args.kernelbench) if f"{p.parent.name}/{p.name}" not in known]
    tuned = representative(todo, args.max_autotune)
    ctx = mp.get_context("spawn")
    lock = ctx.Lock()
    plain, special, out_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    for p in todo:
        (special if p in tuned else plain).put((str(p), ["default", "max-autotune"] if p in tuned else ["default"]))
    # Workers are plain processes (not a Pool's daemons), so inductor may start compile workers.
    workers = [ctx.Process(target=worker, args=(plain, out_q, lock, str(scratch), 1)) for _ in range(args.workers)]
    if tuned:
        workers.append(ctx.Process(target=worker, args=(special, out_q, lock, str(scratch), 8)))
    for q, n in ((plain, args.workers), (special, 1)):
        for _ in range(n):
            q.put(None)
    for w in workers:
        w.start()
    device = "the CPU" if args.device == "cpu" else "the GPU"
    done: set[str] = set()
    deadline = started + args.budget_s
    while len(done) < len(todo) and time.perf_counter() < deadline and any(w.is_alive() for w in workers):
        try:
            row = out_q.get(timeout=min(5.0, max(0.1, deadline - time.perf_counter())))
        except queue.Empty:
            continue
        done.add(row["problem"])
        results.append(row)
        device = row.get("device", device)
        pending = [f"{p.parent.name}/{p.name}" for p in todo if f"{p.parent.name}/{p.name}" not in done]
        write(args.out, results, time.perf_counter() - started, command, device, pending)
        print(json.dumps({k: v for k, v in row.items() if k != "traceback"}, default=str)[:600], flush=True)
    for w in workers:
        w.kill()  # a worker still compiling past the budget is not waited for
    pending = [f"{p.parent.name}/{p.name}" for p in todo if f"{p.parent.name}/{p.name}" not in done]
    write(args.out, results, time.perf_counter() - started, command, device, pending)
    print((args.out / "gemm_conv.md").read_text(), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
