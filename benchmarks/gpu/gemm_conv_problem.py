"""One KernelBench problem measured in a worker process of ``gemm_conv.py``: traced, its kernel
candidates built, everything compiled outside the GPU lock (autotuners benchmark under it,
``timing_lock.py``), then timed and checked under it.

Variants: eager; ``torch.compile`` default (and max-autotune where asked); kloom's kernel
candidate as the strategist writes it with only the GEMM/convolution templates forced on
(``kloom_gemm_conv``: their regions against cuBLAS/cuDNN and the unfused ops), with every template
forced on (``kloom_all``), and as the strategist offers it now with ``kernels/wins.json``
(``kloom_offered``, left out when it is one of the other two); cuDNN's autotuner and channels-last
(convolution problems), as the ``cudnn_tuning`` strategy writes them. Errors are in units of the
judge's float32 tolerance against eager, and against the float64 result where any variant
differs from eager.

Imports torch, triton, the standard library and kloom's own modules (no service dependencies).
"""

from __future__ import annotations

import math
import os
import statistics
import time
import traceback
from pathlib import Path

#: Where the problems run: "cuda", or "cpu" for a smoke run on small problems under the Triton
#: interpreter (``--device cpu``, with ``TRITON_INTERPRET=1``).
DEVICE = os.environ.get("KLOOM_GEMM_CONV_DEVICE", "cuda")
#: The kernel kinds of the GEMM/convolution templates (``agents/strategist/triton_kernels/t_gemm.py``).
KINDS = ("gemm_triangular", "gemm_fp32", "gemm_lowp", "conv_fp32", "conv_transposed_fp32", "conv_lowp")


def bench_ms(fn) -> float:
    """Median milliseconds of ``fn``: triton's do_bench on a GPU (L2 flushed between calls), the
    wall clock on the CPU (the smoke run)."""
    import torch
    import triton

    if DEVICE == "cuda":
        return float(triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median"))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cpu.synchronize()
    return 1000 * statistics.median(times)


def max_error(got, want) -> float:
    """The largest ``|got - want| / (atol + rtol |want|)`` at the judge's float32 tolerances
    (1e-4, 1e-4) over the outputs: at most 1 passes."""
    pairs = list(zip(got, want)) if isinstance(want, (tuple, list)) else [(got, want)]
    worst = 0.0
    for g, w in pairs:
        if g.shape != w.shape:
            return math.inf
        g, w = g.double(), w.double()
        worst = max(worst, float(((g - w).abs() / (1e-4 + 1e-4 * w.abs())).max()))
    return worst


def build(module, cls, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    with torch.device(DEVICE):
        return cls(*module.get_init_inputs())


def kernel_candidate(path: Path, module, graph, templates, force, tag: str, scratch: Path):
    """The strategist's kernel candidate for the traced graph with ``templates`` (None: all) and
    the kinds in ``force`` used whatever kernels/wins.json says; (model, kinds, rationale, regions)
    or (None, reason)."""
    from agents.strategist.triton_kernels.emit import NotReplayable, candidate_source
    from agents.strategist.triton_kernels.plan import find_matches
    from kloom.workload import import_file

    plan = find_matches(graph, templates, force=frozenset(force))
    if not plan.matches:
        return None, "no template matches"
    try:
        source = candidate_source(path.read_text(), graph, plan.matches, tag)
    except NotReplayable as exc:
        return None, str(exc)
    file = scratch / f"{tag}.py"
    file.write_text(source)
    candidate = import_file(file, tag)
    rationale = "; ".join(m.rationale for m in plan.matches[:3])
    regions = sorted((m.template, sorted(m.nodes)) for m in plan.matches)
    return (build(module, candidate.ModelNew), sorted({m.kind for m in plan.matches}), rationale, regions), ""


def _double(value):
    import torch

    return value.double() if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def run_problem(path: str, modes: list[str], lock, scratch: str) -> dict:
    """One problem: compile first (autotuners time under ``lock``), then time everything under it."""
    import torch

    from agents.strategist.triton_kernels.templates import ordered
    from kloom.opgraph import OpGraph
    from kloom.workload import import_file
    from services.worker.evaluator.tracing import trace_call

    path, scratch = Path(path), Path(scratch)
    tag = f"{path.parent.name}_{path.name.split('_')[0]}"
    result: dict = {"problem": f"{path.parent.name}/{path.name}"}
    started = time.perf_counter()
    try:
        module = import_file(path, f"kb_{tag}")
        model = build(module, module.Model)
        torch.manual_seed(1)
        with torch.device(DEVICE):
            inputs = list(module.get_inputs())
        graph = OpGraph.from_dict(trace_call(model, inputs)["op_graph"])
        ops = {n.op for n in graph.nodes}
        kind = "conv" if "aten::convolution" in ops else "gemm" if ops & {"aten::mm", "aten::bmm", "aten::addmm"} else None
        result["kind"] = kind
        if kind is None:
            return result
        ours = [t.name for t in ordered() if t.kind in KINDS]
        everything = [t.kind for t in ordered()]
        variants, plans = {}, {}
        for name, templates, force in (("kloom_gemm_conv", ours, KINDS), ("kloom_all", None, everything), ("kloom_offered", None, ())):
            built, why = kernel_candidate(path, module, graph, templates, force, f"{name}_{tag}", scratch)
            if built is None:
                result[f"{name}_note"] = why
                continue
            model_new, kinds, rationale, regions = built
            same = next((other for other, seen in plans.items() if seen == regions), None)
            if same:
                result[f"{name}_note"] = f"the same regions as {same}"
                continue
            plans[name] = regions
            variants[name], result[f"{name}_kinds"], result[f"{name}_why"] = model_new, kinds, rationale
        compiled = {}
        for mode in modes:
            torch._dynamo.reset()
            fn = torch.compile(model, mode=mode, dynamic=False)
            start = time.perf_counter()
            with torch.no_grad():
                first = fn(*inputs)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            result[f"compile_{mode}_s"] = round(time.perf_counter() - start, 1)
            compiled[mode] = (fn, first)
        with torch.no_grad():
            for candidate in variants.values():
                candidate(*inputs)  # compiles its kernels; their autotuning times under the lock
        with lock, torch.no_grad():
            want = model(*inputs)
            result["eager_ms"] = bench_ms(lambda: model(*inputs))
            outputs = {}
            for mode, (fn, first) in compiled.items():
                outputs[f"compile_{mode}"] = first
                result[f"compile_{mode}_ms"] = bench_ms(lambda: fn(*inputs))
            for name, candidate in variants.items():
                outputs[name] = candidate(*inputs)
                result[f"{name}_ms"] = bench_ms(lambda: candidate(*inputs))
            if kind == "conv":
                levers, lever_outputs = cudnn_levers(module, inputs, scratch, tag)
                result.update(levers)
                outputs.update(lever_outputs)
            for name, got in outputs.items():
                result[f"{name}_error"] = max_error(got, want)
            if any(result[f"{name}_error"] > 0 for name in outputs):
                result.update(exact_errors(module, inputs, want, outputs))
    except Exception as exc:  # a failing problem is reported; the run goes on
        result["error"] = f"{type(exc).__name__}: {exc}"[:400]
        result["traceback"] = traceback.format_exc()[-2000:]
    finally:
        result["worker_s"] = round(time.perf_counter() - started, 1)
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    return result


def exact_errors(module, inputs, want, outputs: dict) -> dict:
    """Each output's error against the reference run in float64 (who is closer to the truth
    when they differ): ``{name}_vs_exact`` and ``eager_vs_exact``."""
    import torch

    try:
        exact_model = build(module, module.Model).double()
        with torch.no_grad():
            exact = exact_model(*[_double(x) for x in inputs])
    except Exception as exc:  # some references do not run in float64
        return {"exact_note": f"{type(exc).__name__}: {exc}"[:200]}
    found = {"eager_vs_exact": max_error(want, exact)}
    for name, got in outputs.items():
        found[f"{name}_vs_exact"] = max_error(got, exact)
    return found


def cudnn_levers(module, inputs, scratch: Path, tag: str) -> tuple[dict, dict]:
    """The ``cudnn_tuning`` strategy's candidates, as the offline coder writes them: their
    times, and their outputs."""
    from agents.strategist.cudnn_tuning import candidate
    from kloom.workload import import_file

    times, outputs = {}, {}
    reference = Path(module.__file__).read_text()
    for name, params in (("cudnn_benchmark", {"wrapper": "cudnn", "channels_last": False}), ("channels_last", {"wrapper": "cudnn", "channels_last": True})):
        file = scratch / f"{name}_{tag}.py"
        file.write_text(candidate(reference, params, name))
        model = build(module, import_file(file, f"{name}_{tag}").ModelNew)
        outputs[name] = model(*inputs)
        times[f"{name}_ms"] = bench_ms(lambda: model(*inputs))
    return times, outputs
