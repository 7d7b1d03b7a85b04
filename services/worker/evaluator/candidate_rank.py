"""A candidate rank: runs the candidate's ``ModelNew`` on inputs the judge sends it.

It never sees a trial's seed, the reference's model or its outputs: it gets the model's
constructor arguments and the seed its weights are drawn with (so that a ``ModelNew`` can hold the
same parameters as the ``Model``), then each trial's inputs, and hands back its outputs. In timed
blocks it draws each call's inputs from the workload itself, from a seed the judge picks at random
for the block (the reference draws the same ones), sends a random projection of every timed
call's outputs with its times, and hands over the block's last outputs by a separate, untimed
command (``block_outputs``). What it reports about itself (the checks below, its precision flags,
its times) is taken as a filter only: this process is the candidate's, and anything in it can be
patched. The judge decides from what the candidate cannot touch: the outputs (and their
projections), compared with the reference's, and the judge process's own clock.
"""

from __future__ import annotations

import gc
import os
import sys

import torch

from kloom.tuning import parse_tuned
from kloom.workload import SHAPES_ENV, import_file, module_name_for

from . import device_share, integrity, precision
from . import tensors as T
from .groups import reused_groups
from .rank import RankBase, WorkloadProblem, model_bytes, seed_everything, seed_for, tensor_bytes

#: Set by the pool for candidate ranks whose outputs the same GPU's reference ranks map.
SHARE_DEVICE_ENV = "KLOOM_SHARE_DEVICE"


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.numel() > 0
    except RuntimeError:
        return False


class CandidateRank(RankBase):
    def __init__(self, *args):
        super().__init__(*args)
        self.snapshot = integrity.Snapshot()  # before any candidate code is imported
        self.cand = None
        self.cand_module: str | None = None
        self.level = "fp32"  # the workload's declared precision
        self.workload_path = ""  # imported here only for arguments and inputs that cannot travel
        self.workload = None
        self.block_kept: tuple[list, str] | None = None  # a timed block's last outputs, until handed over
        # Outputs go to the reference's rank on this GPU in device memory where the judge says
        # it maps them (KLOOM_SHARE_DEVICE) and the driver can export it; else through host memory.
        self.share_device = (self.device.type == "cuda" and os.environ.get(SHARE_DEVICE_ENV) == "1"
                             and device_share.available(self.device.index))

    def handlers(self) -> dict:
        return {
            "ping": lambda: {"pid": os.getpid(), "environment": self.environment()},
            "load": self.cmd_load, "trial": self.cmd_trial, "timing_inputs": self.cmd_timing_inputs,
            "time_block": self.cmd_time_block, "block_outputs": self.cmd_block_outputs, "release": self.cmd_release,
        }

    def after(self, op: str, reply: dict) -> None:
        # The flags as the candidate left them, before the snapshot's check restores them.
        reply["precision"] = precision.flags()
        if self.level != "fp32":
            # The workload allows lower precision: its flags are the candidate's to set.
            now = integrity.numeric_settings()
            self.snapshot.numerics.update({k: now[k] for k in integrity.PRECISION_SETTINGS})
        # Not after a timed block (the check takes milliseconds the judge's clock would count
        # against the candidate); the trial after timing and the release check again.
        reply["violations"] = self.snapshot.violations() if op not in ("ping", "time_block") else []
        reply["peak_bytes"] = self.peak_bytes()

    def cmd_load(self, path: str, init_seed: int, init_args: list | None, shapes: str, memory_limit: int = 0, level: str = "fp32",
                 workload_path: str = "") -> dict:
        self.cmd_release(collect=False)
        self.level = level
        if workload_path != self.workload_path:
            self.workload_path, self.workload = workload_path, None
        self.set_memory_limit(memory_limit)
        self.reset_peak()
        os.environ[SHAPES_ENV] = shapes
        name = module_name_for(path, "candidate")
        self.cand_module = name
        module = import_file(path, name)
        cls = getattr(module, "ModelNew", None)
        if cls is None:
            raise AttributeError(f"{path} defines no ModelNew")
        seed_everything(seed_for(init_seed, self.rank))
        with torch.device(self.device):
            if init_args is None:
                # Arguments that are not plain values (a module, say): drawn from the workload
                # here, as the reference's rank drew them (its module, never its model instance).
                with reused_groups():
                    init = list(self._workload().get_init_inputs())
                seed_everything(seed_for(init_seed, self.rank))
            else:
                init = list(T.to_device(list(init_args), self.device))
            model = cls(*init)
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
        self.cand = model
        self.account(model_bytes(model), "the candidate's model")
        return {}

    def _workload(self):
        if self.workload is None:
            self.workload = import_file(self.workload_path, module_name_for(self.workload_path, "candidate_init"))
        return self.workload

    def _inputs(self, inputs: list | None, seed: int) -> list:
        """The inputs sent, or (where some are not plain values) drawn from the workload with the
        trial's seed, as the reference's rank drew them."""
        if inputs is not None:
            return list(T.to_device(list(inputs), self.device))
        seed_everything(seed_for(seed, self.rank))
        with torch.device(self.device), reused_groups():
            return list(T.to_device(list(self._workload().get_inputs()), self.device))

    def cmd_trial(self, inputs: list | None, mutated: list[int], output_sizes: list[int], seed: int = 0,
                  input_fingerprints: list | None = None, check_draw: bool = False) -> dict:
        """The candidate on the trial's inputs: those sent, or (large ones, and values that do not
        travel) drawn here from the trial's seed and checked against the reference rank's
        ``input_fingerprints``. With ``check_draw`` (the first trial), inputs that were sent are
        drawn here too and checked likewise: timed blocks draw on both sides."""
        self.timed, self.block_kept = None, None  # what timing left: a trial after it needs none of it
        if input_fingerprints is not None and (inputs is None or check_draw):
            drawn = self._inputs(None, seed)
            if T.plain_fingerprints(T.fingerprints(drawn)) != input_fingerprints:
                raise WorkloadProblem("the workload's get_inputs() drew other inputs in the candidate's process than in the "
                                      f"reference's from the same seed ({seed}): it is not reproducible from torch's, "
                                      "Python's and NumPy's seeds, which the judge relies on to give both sides the same inputs")
            inputs = drawn if inputs is None else inputs
            del drawn
        inputs = self._inputs(inputs, seed)
        held = model_bytes(self.cand) + tensor_bytes(inputs)
        self.account(held, "the candidate with its inputs")
        fps = T.fingerprints(inputs)
        T.scrub(output_sizes, self.device)
        with torch.no_grad():
            out = self.cand(*inputs)
        leaves, spec = T.flatten(out)
        # Copies taken as soon as the call returns: work still pending elsewhere (a side stream
        # never joined) that changes the outputs later means the caller read unfinished results.
        at_return = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]
        self.sync()
        self.account(held + 2 * tensor_bytes(leaves), "the candidate with its inputs and outputs")
        late = [i for i, (a, b) in enumerate(zip(at_return, leaves)) if isinstance(a, torch.Tensor) and not T.bitwise_equal(a, b)]
        after = T.fingerprints(inputs)
        unexpected = [i for i, (a, b) in enumerate(zip(fps, after)) if i not in mutated and a != b]
        aliases = [(o, i) for o, leaf in enumerate(leaves) for i, inp in enumerate(inputs)
                   if isinstance(leaf, torch.Tensor) and isinstance(inp, torch.Tensor) and _shares_storage(leaf, inp)]
        reply = {
            # Device tensors as they are: the reply copies large ones once, into a shared file.
            "spec": spec, "outputs": [x.detach() if isinstance(x, torch.Tensor) else x for x in at_return],
            "mutated": {i: inputs[i].detach() for i in mutated if isinstance(inputs[i], torch.Tensor)},
            "late_writes": late, "unexpected_mutation": unexpected, "aliases": aliases,
        }
        del out, leaves, at_return, inputs
        return reply

    def cmd_timing_inputs(self, inputs: list | None, restore: list[int], seed: int = 0, outputs: list | None = None) -> dict:
        self.prepare_timed(self.cand, self._inputs(inputs, seed), restore, draw=lambda block: self._inputs(None, block),
                           outputs=outputs)
        return {}

    def keep_outputs(self, leaves: list | None, spec: str) -> None:
        self.block_kept = None if leaves is None else (leaves, spec)

    def cmd_block_outputs(self) -> dict:
        """The last timed block's kept outputs, once (as they are: the reply copies large ones
        once, into a shared file, as a trial's); nothing where none were kept."""
        kept, self.block_kept = self.block_kept, None
        if kept is None:
            return {}
        leaves, spec = kept
        return {"outputs": leaves, "spec": spec}

    def cmd_release(self, collect: bool = True) -> dict:
        reply = {"tuned": self._tuned()}
        self.cand, self.timed, self.block_kept = None, None, None
        if self.cand_module:
            for name in [n for n in sys.modules if n == self.cand_module or n.startswith(self.cand_module + ".")]:
                sys.modules.pop(name, None)
            self.cand_module = None
        if collect and self.device.type == "cuda":  # on the CPU, dropping the references frees
            gc.collect()
            torch.cuda.empty_cache()
        return reply

    def _tuned(self) -> list:
        """What Triton's autotuner chose in the candidate's module (``kernels.tuning``), where it
        autotuned with Triton at all; read after timing, so nothing of it is timed. A hint, as
        everything this process says about itself: the judge keeps only well-formed records."""
        module = sys.modules.get(self.cand_module or "")
        if module is None or "triton.runtime.autotuner" not in sys.modules:
            return []
        from kernels.tuning import tuned_choices  # lazy: imports Triton, which this candidate already did

        try:
            # The judge's own filter, here too, so that only plain values travel back (a key of
            # other objects, a tensor say, is no choice to keep); the judge applies it again.
            return [t.to_dict() for t in parse_tuned(tuned_choices(vars(module)))]
        except Exception:  # the candidate's objects may be anything; no choices is the answer then
            return []
