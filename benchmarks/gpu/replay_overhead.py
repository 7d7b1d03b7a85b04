"""What the kernel strategy's replay costs on small networks, on one GPU: each model of
tests/importers/fixtures/whole_models/ traced on the device, then timed in one process, the
variants interleaved call by call (CUDA events around the call and a synchronize, as the judge's
ranks time): eager; the traced graph replayed with no kernel (``torch.ops.aten`` calls only: the
replay's own host cost); the plain replay with kloom's kernels (the strategy's first candidate);
the replay compiled by inductor around them; the replay with the kernels in a CUDA graph; and,
for scale, torch.compile of the module and the module in a CUDA graph.
Prints one line per model and variant (median ms, ratio to eager, ms per replayed call) and
writes them as JSON lines to ``--out``.

    python3 benchmarks/gpu/replay_overhead.py [--out replay.jsonl] [--iters 200]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.strategist.embed import runtime_source  # noqa: E402
from agents.strategist.triton_kernels.emit import GRAPH_RUNTIME, candidate_source  # noqa: E402
from agents.strategist.triton_kernels.plan import find_matches, kernel_candidate  # noqa: E402
from kloom.opgraph import OpGraph  # noqa: E402
from services.worker.evaluator.tracing import trace_call  # noqa: E402

DEVICE = "cuda"
MODELS = ROOT / "tests/importers/fixtures/whole_models"


def _load(path: Path, source: str, name: str):
    """The module of ``source``, from a file of its own (Triton reads a kernel's source from its
    file, as the evaluator's ranks load candidates)."""
    name = f"kloom_replay_{path.stem}_{name}"
    file = Path(tempfile.mkdtemp(prefix="kloom-replay-")) / f"{name}.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the compiled variant registers its regions as operators of this module
    spec.loader.exec_module(module)
    return module


def _time(fn, inputs, iters: int) -> list[float]:
    times = []
    with torch.no_grad():
        for _ in range(iters):
            if DEVICE == "cpu":  # a dry run of the script's logic
                t0 = time.perf_counter()
                fn(*inputs)
                times.append((time.perf_counter() - t0) * 1e3)
                continue
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn(*inputs)
            torch.cuda.synchronize()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return times


def _graph_of(model, inputs):
    """The module captured whole in a CUDA graph (the cuda_graph strategy's runtime), for scale."""
    runtime = _load(MODELS / "graph_runtime.py", runtime_source(GRAPH_RUNTIME), "graph_runtime")
    entry = {}

    def call(*args):
        if "graph" not in entry:
            entry["graph"] = runtime._kloom_capture(model, list(args), 3)
        return runtime._kloom_replay(entry["graph"], list(args), [])

    return call


def variants(path: Path):
    source = path.read_text()
    reference = _load(path, source, "reference")
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = reference.Model(*reference.get_init_inputs()).to(DEVICE)
        inputs = [x.to(DEVICE) if isinstance(x, torch.Tensor) else x for x in reference.get_inputs()]
    trace = trace_call(model, inputs)
    graph = OpGraph.from_dict(trace["op_graph"])
    plan = find_matches(graph)
    state = model.state_dict()

    def built(code: str, label: str):
        module = _load(path, code, label)
        torch.manual_seed(0)
        with torch.device(DEVICE):
            m = module.ModelNew(*reference.get_init_inputs()).to(DEVICE)
        m.load_state_dict(state)
        m.train(model.training)
        return m

    found = {"eager": (model, len(graph.nodes))}
    if DEVICE == "cuda":
        found["compiled_module"] = (torch.compile(model), None)
        found["graph_module"] = (_graph_of(model, inputs), None)
    makers = {
        "replay_only": lambda: candidate_source(source, graph, [], "replay only"),
        "kernels": lambda: kernel_candidate(source, graph, None, "kernels"),
        "kernels_compiled": lambda: kernel_candidate(source, graph, None, "kernels compiled", "default"),
        "kernels_graph": lambda: kernel_candidate(source, graph, None, "kernels graph", graphed=[]),  # these networks mutate no input
    }
    for name, make in makers.items():
        try:
            found[name] = (built(make(), name), len(graph.nodes))
        except Exception as exc:  # noqa: BLE001 - reported, the other variants still run
            print(f"{path.stem} {name}: not built: {type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc(limit=2)
    return found, inputs, trace, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--models", default="residual_cnn,separable_shuffle,transformer_encoder")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run (with TRITON_INTERPRET=1)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    for stem in args.models.split(","):
        path = MODELS / f"{stem}.py"
        found, inputs, trace, plan = variants(path)
        for fn, _ in found.values():  # warm up (compiles)
            _time(fn, inputs, 5)
        samples: dict[str, list[float]] = {name: [] for name in found}
        for i in range(args.iters):
            order = list(found) if i % 2 == 0 else list(reversed(found))
            for name in order:
                samples[name] += _time(found[name][0], inputs, 1)
        eager = statistics.median(samples["eager"])
        for name, times in samples.items():
            median = statistics.median(times)
            calls = found[name][1]
            row = {"model": stem, "variant": name, "median_ms": median, "vs_eager": eager / median, "graph_nodes": len(trace["op_graph"]["nodes"]),
                   "n_kernels": trace["n_kernels"], "regions": len(plan.matches), "templates": plan.templates,
                   "ms_per_call": median / calls if calls else None}
            print(f"{stem:<20} {name:<17} {median:8.4f} ms  {eager / median:6.3f}x eager"
                  + (f"  {1e3 * median / calls:6.1f} us per replayed call" if calls else ""), flush=True)
            if args.out:
                with args.out.open("a") as sink:
                    sink.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
