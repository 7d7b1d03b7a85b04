"""Runs problem files of kinds kloom was not tuned on through the kernel planner and the candidate
it writes, on the CPU (Triton's interpreter), and compares the candidate with the reference on
fresh inputs at the judge's tolerance.

    PYTHONPATH=. .venv/bin/python tests/agents/triton_kernels/unseen/probe.py [NAME ...]

Each problem is planned twice, every kind forced (so every template has its say, whatever the GPU
benchmark's verdicts): once with all templates (the three-TF32-product and folded kinds claim
what they take first), once without those (the plain GEMM and convolution kinds get it); the
second only where its regions differ. A line a plan: the regions (kind: operators), the operators
left to PyTorch, and the outcome: ok, nothing (no region), refused (``NotReplayable``), or the
planner's or candidate's exception, or a wrong result (the judge's message)."""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from agents.strategist.triton_kernels.emit import NotReplayable, candidate_source
from agents.strategist.triton_kernels.plan import find_matches
from agents.strategist.triton_kernels.templates import TEMPLATES
from kloom.opgraph import VIEW_OPS, OpGraph
from services.worker.evaluator.compare import DEFAULT_TOLERANCE, compare_leaf
from services.worker.evaluator.precision import norm_problem
from services.worker.evaluator.tracing import trace_call

PROBLEMS = Path(__file__).resolve().parent / "problems"
#: Where the candidate files are written (removed when the process ends).
_CANDIDATES = tempfile.TemporaryDirectory(prefix="kl_unseen_")
EVERY_KIND = frozenset(t.kind for t in TEMPLATES.values())
#: Kinds that take a product or convolution before the plain ones when all are offered.
FIRST_TAKERS = frozenset(t.name for t in TEMPLATES.values() if t.kind.endswith("x3") or t.kind in ("conv_depthwise", "gemm_triangular"))
PLANS = {
    "all": None,
    "plain": sorted(t.name for t in TEMPLATES.values() if t.name not in FIRST_TAKERS),
}


def load(path: Path, tag: str = "problem"):
    spec = importlib.util.spec_from_file_location(f"_kl_{tag}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fresh_model(module, cls=None):
    torch.manual_seed(0)
    return (cls or module.Model)(*module.get_init_inputs())


def trace(module) -> OpGraph:
    model = _fresh_model(module)
    torch.manual_seed(1)
    return OpGraph.from_dict(trace_call(model, module.get_inputs())["op_graph"])


def region_ops(graph: OpGraph, match) -> str:
    return ",".join(graph.nodes[i].op.split("::")[1] for i in sorted(match.nodes))


def unmatched(graph: OpGraph, matches) -> list[str]:
    claimed = {i for m in matches for i in m.nodes}
    return [n.op.split("::")[1] for n in graph.nodes if n.index not in claimed and n.op not in VIEW_OPS]


def _leaves(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _leaves(v)]
    return [value]


def judge(got, want) -> str:
    """"" when ``got`` passes the judge's elementwise and fp32 norm-wise checks against ``want``."""
    got, want = _leaves(got), _leaves(want)
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        ok, details = compare_leaf(g, w, DEFAULT_TOLERANCE, f"output {i}")
        if not ok:
            return details.get("message", "mismatch")
        if isinstance(w, torch.Tensor) and w.is_floating_point():
            problem = norm_problem(g, w, "fp32", f"output {i}", atol=DEFAULT_TOLERANCE.get(w.dtype, (0.0, 0.0))[0])
            if problem:
                return problem
    return ""


def candidate_module(path: Path, source: str, tag: str):
    """The candidate file's module, its reference's forward made to fail (the replay must run)."""
    file = Path(_CANDIDATES.name) / f"{path.stem}_{tag}.py"
    file.write_text(source)
    module = load(file, f"cand_{tag}")

    def no_fallback(self, *args):
        raise AssertionError("the candidate fell back to the reference's forward")

    module.Model.forward = no_fallback
    return module


def check_candidate(problem, module, seeds=(2, 3)) -> str:
    """Run the candidate beside the reference on fresh inputs; "" when every output passes."""
    reference = _fresh_model(problem)
    new = _fresh_model(module, module.ModelNew)
    new.load_state_dict(reference.state_dict())
    for seed in seeds:
        torch.manual_seed(seed)
        inputs = problem.get_inputs()
        with torch.no_grad():
            want = reference(*copy.deepcopy(inputs))
            got = new(*copy.deepcopy(inputs))
        wrong = judge(got, want)
        if not wrong:
            wrong = judge(list(new.state_dict().values()), list(reference.state_dict().values()))
            wrong = f"state after the call: {wrong}" if wrong else ""
        if wrong:
            return f"seed {seed}: {wrong}"
    return ""


@dataclass
class Outcome:
    name: str
    plan: str
    regions: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    status: str = "ok"  # ok / nothing (no region) / refused (NotReplayable) / planner / candidate / wrong
    detail: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        kinds = "; ".join(self.regions) or "-"
        return f"{self.name:30} {self.plan:5} {self.status:9} {self.seconds:5.1f}s [{kinds}] left={self.left} {self.detail}"


def probe(path: Path, plan: str = "all", skip: list[str] | None = None) -> Outcome | None:
    """The outcome of one plan of the problem (None when its regions are ``skip``'s)."""
    problem = load(path)
    out = Outcome(path.stem, plan)
    try:
        graph = trace(problem)
        found = find_matches(graph, PLANS[plan], wins={}, force=EVERY_KIND)
        out.regions = [f"{m.kind}:{region_ops(graph, m)}" for m in sorted(found.matches, key=lambda m: min(m.nodes))]
        out.left = unmatched(graph, found.matches)
        if skip is not None and out.regions == skip:
            return None
        if not found.matches:
            out.status = "nothing"
            return out
        source = candidate_source(path.read_text(), graph, found.matches, f"probe {plan}")
    except NotReplayable as exc:
        out.status, out.detail = "refused", str(exc)
        return out
    except Exception as exc:  # noqa: BLE001  (a probe records every failure)
        out.status, out.detail = "planner", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
        return out
    try:
        module = candidate_module(path, source, plan)
        wrong = check_candidate(problem, module)
    except Exception as exc:  # noqa: BLE001
        out.status, out.detail = "candidate", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
        return out
    if wrong:
        out.status, out.detail = "wrong", wrong
    return out


def main(names: list[str]) -> int:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the candidates' kernels import Triton
    paths = [PROBLEMS / f"{n}.py" for n in names] if names else sorted(PROBLEMS.glob("*.py"))
    bad = 0
    for path in paths:
        seen = None
        for plan in PLANS:
            began = time.perf_counter()
            outcome = probe(path, plan, seen)
            if outcome is None:
                continue  # the same regions as the plan before: nothing new to run
            seen = outcome.regions
            outcome.seconds = time.perf_counter() - began
            print(outcome.line(), flush=True)
            bad += outcome.status in ("planner", "candidate", "wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
