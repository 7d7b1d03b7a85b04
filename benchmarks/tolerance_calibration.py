"""The judge's float32 tolerance on a deep network, fixed and calibrated (``calibration.py``).

    .venv/bin/python benchmarks/tolerance_calibration.py [--seeds 1 2]

Judges, on the CPU, two candidates of ``benchmarks/workloads/resnet_deep_train.py`` (a
ResNet-101-shaped network in training mode): the reference compiled by ``torch.compile`` (honest
float32, another summation order) and its convolutions and product on operands rounded to TF32
(a cheat the precision flags do not show), each with the tolerance fixed and calibrated, per
evaluator seed. Prints a markdown table: the verdict, the reference's own error against its
float64 run, the widening, and the first message of a failed trial.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from services.worker.evaluator import EvalSettings, Evaluator

WORKLOAD = Path(__file__).parent / "workloads" / "resnet_deep_train.py"

COMPILED = '''

class ModelNew(Model):
    def __init__(self, *args):
        super().__init__(*args)
        self._compiled = torch.compile(super().forward, dynamic=False)

    def forward(self, x):
        return self._compiled(x)
'''

TF32 = '''

def _tf32(t):
    bits = t.contiguous().view(torch.int32)
    return ((bits + (1 << 12)) & ~((1 << 13) - 1)).view(torch.float32)


class ModelNew(Model):
    def forward(self, x):
        kept = []
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                kept.append((module, module.weight.data, module.register_forward_pre_hook(lambda m, a: tuple(_tf32(v) for v in a))))
                module.weight.data = _tf32(module.weight.data)
        try:
            return super().forward(x)
        finally:
            for module, weight, hook in kept:
                module.weight.data = weight
                hook.remove()
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    source = WORKLOAD.read_text().split("\ndef get_inputs")[0]
    folder = Path(tempfile.mkdtemp(prefix="kloom-calibration-"))
    candidates = {}
    for name, tail in (("torch.compile", COMPILED), ("TF32 operands", TF32)):
        path = folder / f"{name.split()[0].replace('.', '_')}.py"
        path.write_text(source + tail)
        candidates[name] = path
    print(f"```\n$ .venv/bin/python benchmarks/tolerance_calibration.py --seeds {' '.join(map(str, args.seeds))}\n```\n")
    print("| seed | candidate | tolerance | verdict | speedup | reference vs float64 (norm / share of elementwise tol) | widening (elementwise / norm) | first failure |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        for name, path in candidates.items():
            for calibrate in (False, True):
                settings = dataclasses.replace(EvalSettings.for_device("cpu"), seed=seed, calibrate_tolerance=calibrate, timing_budget_s=0.5)
                with Evaluator("cpu", settings) as ev:
                    r = ev.evaluate(WORKLOAD, path, world_size=1)
                cal = r.environment.get("float32_tolerance", {})
                own = f"{cal['norm']:.2e} / {cal['elementwise']:.2f}" if cal and not cal.get("skipped") else "-"
                scale = f"{cal.get('elementwise_scale', 1):.3g}x / {cal.get('norm_scale', 1):.3g}x" if cal else "-"
                failed = next((t.ranks[0].message for t in r.trials if not t.ok and t.ranks), "")
                speedup = f"{r.timing.speedup:.2f}x" if r.timing else "-"
                print(f"| {seed} | {name} | {'calibrated' if calibrate else 'fixed'} | {r.status} | {speedup} | {own} | {scale} | {failed[:150]} |", flush=True)


if __name__ == "__main__":
    main()
