"""A reference rank: the judge's side of one rank of the workload.

It imports the workload, builds its ``Model``, draws every input (fresh seeds per trial, sent by
the judge process and never shown to the candidate), runs the reference, keeps its outputs for
one trial at a time, and compares the candidate's outputs (sent here by the judge process) with
them. No candidate code is ever imported here.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from typing import Any

import torch

from kloom.workload import SHAPES_ENV, import_file, module_name_for

from . import calibration, precision, staged
from .protocol import Unreadable, snapshot
from . import tensors as T
from .compare import CHUNK, compare_leaf, compare_outputs, resolve_tolerance, tolerance_from_names
from .groups import reused_groups
from .projection import Projector
from .projection_check import Projections
from .rank import RankBase, ResourceLimit, WorkloadProblem, call_seed, model_bytes, seed_everything, seed_for, tensor_bytes

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def finite(leaf: torch.Tensor) -> bool:
    """Whether a floating (fp8 included, upcast) or complex tensor has no NaN or Inf (read in
    chunks: the check's temporaries stay a chunk wide)."""
    fp8 = leaf.element_size() == 1 and not leaf.is_complex()  # isfinite is not implemented for float8 types
    flat = leaf.reshape(-1)
    for start in range(0, flat.numel(), CHUNK):
        piece = flat[start : start + CHUNK]
        if not bool(torch.isfinite(piece.to(torch.float32) if fp8 else piece).all()):
            return False
    return True


def _plain(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, (bool, int, float, complex, str, torch.Tensor, torch.dtype))


def _sendable(inputs: list) -> list | None:
    """Copies of the inputs for the candidate's ranks, taken now (the large ones straight into a
    sealed file that travels as it is: ``protocol.snapshot``), or None where some input is not a
    plain value (a process group, a module): those ranks then draw them from the workload with the
    trial's seed, as this rank did."""
    return snapshot(list(inputs)) if all(_plain(v) for v in inputs) else None


class ReferenceRank(RankBase):
    def __init__(self, *args):
        super().__init__(*args)
        self.workloads: dict[tuple, Any] = {}
        self.workload = None
        self.ref = None
        self.kept: dict | None = None  # the running trial's outputs and mutated inputs

    def handlers(self) -> dict:
        return {
            "ping": lambda: {"pid": os.getpid(), "environment": self.environment()},
            "load": self.cmd_load, "run_trial": self.cmd_run_trial, "compare": self.cmd_compare,
            "timing_inputs": self.cmd_timing_inputs, "time_block": self.cmd_time_block, "time_alone": self.cmd_time_alone,
            "release": self.cmd_release, "analyze": self.cmd_analyze, "reference_io": self.cmd_reference_io,
            "probe_split": self.cmd_probe_split,
            "draw_block": self.cmd_draw_block, "project": self.cmd_project,
        }

    def after(self, op: str, reply: dict) -> None:
        reply["peak_bytes"] = self.peak_bytes()

    # Building ------------------------------------------------------------------------------
    def _load_workload(self, path: str, sha: str, shapes: str):
        key = (path, sha, shapes)
        if key not in self.workloads:
            os.environ[SHAPES_ENV] = shapes
            self.workloads[key] = import_file(path, module_name_for(path, f"workload_{shapes}_{sha[:8]}"))
        return self.workloads[key]

    def _build(self, init_seed: int):
        """The reference model, seeded just before construction (as the candidate's is)."""
        seed_everything(seed_for(init_seed, self.rank))
        with torch.device(self.device), reused_groups():
            init = self.workload.get_init_inputs()
            if not isinstance(init, (list, tuple)):
                raise WorkloadProblem("get_init_inputs() must return a list or tuple")
            seed_everything(seed_for(init_seed, self.rank))
            model = self.workload.Model(*init)
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
        return model, list(init)

    def _inputs(self, seed: int) -> list:
        seed_everything(seed_for(seed, self.rank))
        with torch.device(self.device), reused_groups():
            inputs = self.workload.get_inputs()
        if not isinstance(inputs, (list, tuple)):
            raise WorkloadProblem(f"get_inputs() must return a list or tuple, not {type(inputs).__name__}")
        return list(T.to_device(list(inputs), self.device))

    def _open(self, workload_path: str, workload_sha: str, shapes: str, init_seed: int) -> list:
        self.cmd_release(everything=True, collect=False)
        self.reset_peak()
        try:
            self.workload = self._load_workload(workload_path, workload_sha, shapes)
            self.ref, init = self._build(init_seed)
        except (WorkloadProblem, ResourceLimit, torch.OutOfMemoryError):
            raise
        except BaseException as exc:
            raise WorkloadProblem(f"building the reference failed: {type(exc).__name__}: {exc}") from exc
        self.account(model_bytes(self.ref), "the reference's model")
        return init

    # Commands ------------------------------------------------------------------------------
    def cmd_load(self, workload_path: str, workload_sha: str, shapes: str, init_seed: int, memory_limit: int = 0) -> dict:
        self.set_memory_limit(memory_limit)
        init = self._open(workload_path, workload_sha, shapes, init_seed)
        tolerance = {str(k): v for k, v in dict(getattr(self.workload, "TOLERANCE", None) or {}).items()}
        # Plain values (numbers, strings, tensors, lists of them) travel to the candidate's ranks;
        # anything else (a module given as an argument) they draw from the workload themselves.
        plain = all(_plain(v) for v in init)
        return {"init_args": snapshot(init) if plain else None, "tolerance": tolerance, "model_bytes": model_bytes(self.ref)}

    def cmd_run_trial(self, seed: int, want_roofline: bool = False, send_below: int | None = None, calibrate: dict | None = None,
                      calibrate_max_input_bytes: int = 0) -> dict:
        """Draw this trial's inputs, run the reference on them and keep its outputs until
        ``compare``; the inputs go back (as they were before the call) for the candidate where
        they are under ``send_below`` bytes (None: always), with their fingerprints. What
        timing left (its inputs, a block's kept outputs) goes first: a trial after timing needs
        none of it, and the device is shared with the candidate's side. ``calibrate`` (the
        judge's tolerance, by dtype name): also run a float64 copy of the model first and send
        how far the reference's outputs are from it (``calibration.py``), unless its inputs take
        more than ``calibrate_max_input_bytes`` (0: no bound)."""
        self.kept, self.timed = None, None
        inputs = self._inputs(seed)
        began = time.perf_counter()
        wide, skipped, wide_peak = self._float64_run(inputs, calibrate_max_input_bytes) if calibrate is not None else (None, "", 0)
        wide_s = time.perf_counter() - began
        sent = _sendable(inputs) if send_below is None or tensor_bytes(inputs) < send_below else None
        before = T.fingerprints(inputs)
        roofline = None
        if want_roofline and hasattr(self.workload, "roofline"):
            roofline = {k: float(v) if isinstance(v, (int, float)) else v for k, v in dict(self.workload.roofline(self.world_size, inputs)).items()}
        held = model_bytes(self.ref) + tensor_bytes(inputs)
        self.account(held, "the reference with its inputs")
        started = time.perf_counter()
        with torch.no_grad():
            out = self.ref(*inputs)
        self.sync()
        call_s = time.perf_counter() - started
        leaves, spec = T.flatten(out)
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()) and not finite(leaf):
                raise WorkloadProblem(f"the reference's output {i} has NaN or Inf values")
        after = T.fingerprints(inputs)
        mutated = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
        outputs = [x.detach() if isinstance(x, torch.Tensor) else x for x in leaves]
        self.kept = {"outputs": outputs, "mutated": {i: inputs[i].detach() for i in mutated}, "spec": spec}
        del out, leaves
        self.account(held + tensor_bytes(outputs), "the reference with its inputs and outputs")
        floating = [x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
        own = None
        if calibrate is not None:
            own = calibration.OwnError(skipped=skipped) if wide is None else calibration.own_error(outputs, wide, tolerance_from_names(calibrate))
            own = dataclasses.replace(own, peak_bytes=wide_peak, seconds=wide_s).to_dict()
            del wide
        return {
            "calibration": own,
            "inputs": sent, "input_fingerprints": T.plain_fingerprints(before), "seed": seed, "mutated": mutated, "spec": spec,
            "call_s": call_s, "roofline": roofline,
            "output_bytes": tensor_bytes(outputs) + sum(T.nbytes(list(self.kept["mutated"].values()))),
            "own_bytes": held + tensor_bytes(outputs), "output_sizes": T.nbytes(outputs),
            "output_dtypes": [str(x.dtype) for x in outputs if isinstance(x, torch.Tensor)],
            "low_precision_inputs": any(d in _LOW_PRECISION or d.itemsize == 1 for d in floating),
        }

    def _float64_run(self, inputs: list, max_input_bytes: int) -> tuple[list | None, str, int]:
        """The float64 copy's outputs on ``inputs`` before the reference's own call (None and why
        where it is not run: several ranks, inputs past ``max_input_bytes``, a copy that would
        not fit beside the reference)."""
        if self.world_size != 1:
            return None, "a workload of several ranks (a float64 run failing on one would leave the others in a collective)", 0
        given = tensor_bytes(inputs)
        if max_input_bytes and given > max_input_bytes:
            return None, (f"the inputs take {given / (1 << 20):.0f} MiB, past calibration_max_input_bytes ({max_input_bytes / (1 << 20):.0f} MiB): "
                          "their float64 copies would double the reference's share of the device"), 0
        # The model copied in float32 and cast (three times its bytes at the cast), the inputs cast.
        need = 3 * model_bytes(self.ref) + 2 * given
        if self.device.type == "cuda":
            free = torch.cuda.mem_get_info(self.device)[0]
            if need > free // 2:
                return None, f"a float64 copy of the model and inputs needs about {need / (1 << 20):.0f} MiB, more than half the device's free {free / (1 << 20):.0f} MiB", 0
        elif self.memory_limit and need > self.memory_limit:
            return None, f"a float64 copy needs about {need} bytes, past this rank's share of the memory limit", 0
        return calibration.float64_run(self.ref, inputs, self.device)

    def cmd_compare(self, outputs: list, mutated: dict, spec: str, tolerance: dict, level: str, norm_check: bool, norm_scale: float = 1.0) -> dict:
        """The candidate's outputs (one copy, moved to this device) against the kept ones."""
        kept, self.kept = self.kept, None
        if kept is None:
            raise RuntimeError("compare without a trial")
        totals = {"numel": 0, "mismatched": 0, "max_abs_diff": 0.0, "max_rel_diff": 0.0}
        problems: list[str] = []
        unreadable = [f"output {i}" for i, x in enumerate(outputs) if isinstance(x, Unreadable)]
        unreadable += [f"input {i} after the call" for i, x in mutated.items() if isinstance(x, Unreadable)]
        if spec != kept["spec"]:
            problems.append(f"output structure {spec} != expected {kept['spec']}")
        elif unreadable:
            reason = next(x for x in list(outputs) + list(mutated.values()) if isinstance(x, Unreadable)).reason
            problems.append(f"{', '.join(unreadable)} could not be read from the device memory the candidate handed over ({reason})")
        else:
            got = T.to_device(list(outputs), self.device)
            got_mutated = {int(i): T.to_device(v, self.device) for i, v in mutated.items()}
            held = model_bytes(self.ref) + tensor_bytes(kept["outputs"]) + tensor_bytes(list(kept["mutated"].values()))
            self.account(held + tensor_bytes(got) + tensor_bytes(list(got_mutated.values())), "the comparison")
            table = tolerance_from_names(tolerance)
            totals, problems = compare_outputs(got, got_mutated, kept["outputs"], kept["mutated"], table)
            if not problems and norm_check:
                for i, (g, w) in enumerate(zip(got, kept["outputs"])):
                    if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor):
                        found = precision.norm_problem(g, w, level, f"output {i}", atol=table.get(w.dtype, (0.0, 0.0))[0], widen=norm_scale)
                        if found:
                            problems.append(found)
            del got, got_mutated
        return {"check": {"totals": totals, "problems": problems}}

    def cmd_timing_inputs(self, seed: int, restore: list[int], outputs: list | None = None) -> dict:
        started = time.perf_counter()
        inputs = self._inputs(seed)
        self.sync()
        draw_s = time.perf_counter() - started
        sent = _sendable(inputs)
        self.prepare_timed(self.ref, inputs, restore, draw=self._inputs, outputs=outputs)
        return {"inputs": sent, "seed": seed, "draw_s": draw_s, "input_bytes": tensor_bytes(inputs)}

    def cmd_draw_block(self, seed: int, calls: int) -> dict:
        """A staged block's inputs (``RankBase.run_staged``): ``calls`` sets, each drawn from
        the call's seed as a block with that seed would draw it, copied into one sealed file
        that the judge sends to both sides' blocks of the round (each maps it copy-on-write)."""
        if self.timed is not None:
            self.timed.inputs = None  # the timing inputs' set: a staged round brings its own
        drawn, held = [], model_bytes(self.ref)
        for i in range(int(calls)):
            drawn.append(self._inputs(call_seed(int(seed), i)))
            held += tensor_bytes(drawn[-1])
            self.account(held, "a staged block's inputs")
        if not all(_plain(x) for x in drawn):
            raise WorkloadProblem("get_inputs() gave values that are not plain (tensors, numbers, strings) in a timed block")
        return {"inputs": snapshot(staged.stack(drawn))}

    def cmd_project(self, reference_calls: list, candidate_calls: Any, projection_seed: int, tolerance: dict,
                    draw: dict | None = None) -> dict:
        """After a staged round: the projections (``projection.Projector``) of both sides' calls,
        every call's flattened outputs as each block sent them (the reference's with their
        bounds), and with ``draw`` (``seed``, ``calls``) the next round's inputs
        (``cmd_draw_block``). The candidate's outputs are read here, never in its own process;
        what cannot be projected of them is a ``problem`` in its place (the candidate's fault)."""
        out: dict[str, Any] = {"reference": self._project(reference_calls, projection_seed, tolerance_from_names(tolerance)).reply(bounds=True)}
        try:
            out["candidate"] = self._project(candidate_calls, projection_seed, None).reply(bounds=False)
        except Exception as exc:  # noqa: BLE001 - whatever the candidate's outputs make fail is the candidate's fault
            out["candidate"] = {"problem": f"{type(exc).__name__}: {exc}"[:1000]}
        if draw is not None:
            out.update(self.cmd_draw_block(int(draw["seed"]), int(draw["calls"])))
        return out

    def _project(self, packed: Any, projection_seed: int, table: dict | None) -> Projections:
        calls = staged.unstack(packed)
        for i, leaves in enumerate(calls):
            if any(isinstance(x, Unreadable) for x in leaves):
                raise ValueError(f"call {i}'s outputs could not be read")
        projector = Projector(int(projection_seed), self.device, table, calls=len(calls))
        for leaves in calls:
            projector.add(list(T.to_device(list(leaves), self.device)))
        return projector.finish()

    def keep_outputs(self, leaves: list | None, spec: str) -> None:
        """A timed block's last outputs, kept to judge the candidate's of the same round."""
        self.kept = None if leaves is None else {"outputs": leaves, "mutated": {}, "spec": spec}

    def cmd_time_alone(self, timing: dict, seed: int, restore: list[int]) -> dict:
        """The reference alone, by the in-process protocol (``baseline``)."""
        self.prepare_timed(self.ref, self._inputs(seed), restore)
        timed = self.timed
        times = self.timer(int(timing.get("flush_bytes", 0))).measure(
            timed, restore=timed.restore, warmup=int(timing["warmup_iters"]), min_iters=int(timing["min_iters"]),
            max_iters=int(timing["max_iters"]), budget_s=float(timing["budget_s"]))
        return {"times": times}

    def cmd_release(self, everything: bool = False, collect: bool = True) -> dict:
        self.kept, self.timed = None, None
        if everything:
            self.ref = None
            # The model may sit in a cycle (or in objects an earlier settle set aside): a full
            # collection frees it, after the reply, off the evaluation's path.
            self.collect_later = collect
        if collect and self.device.type == "cuda":  # on the CPU, dropping the references frees
            gc.collect()
            torch.cuda.empty_cache()
        return {}

    # Looking at the reference alone ------------------------------------------------------------
    def cmd_reference_io(self, workload_path: str, workload_sha: str, shapes: str, init_seed: int, seed: int) -> dict:
        """The reference's parameters, inputs and outputs on this rank, for checking a workload."""
        self._open(workload_path, workload_sha, shapes, init_seed)
        inputs = self._inputs(seed)
        before = T.detach_cpu(inputs)
        with torch.no_grad():
            out = self.ref(*inputs)
        self.sync()
        leaves, spec = T.flatten(out)
        state = {k: v.detach().cpu() for k, v in self.ref.state_dict().items()} if isinstance(self.ref, torch.nn.Module) else {}
        return {"inputs": before, "inputs_after": T.detach_cpu(inputs), "outputs": T.detach_cpu(leaves), "spec": spec, "state": state}

    def cmd_analyze(self, workload_path: str, workload_sha: str, shapes: str, init_seed: int, seed: int) -> dict:
        """What the reference does on this rank: operators, collectives, host syncs, data flow."""
        from .tracing import trace_call  # lazy: the tracer and kloom.opgraph add ~60 ms to every reference rank's start

        self._open(workload_path, workload_sha, shapes, init_seed)
        inputs = self._inputs(seed)
        before = T.fingerprints(inputs)
        roofline = dict(self.workload.roofline(self.world_size, inputs)) if hasattr(self.workload, "roofline") else None
        trace = trace_call(self.ref, inputs)
        self.sync()
        after = T.fingerprints(inputs)
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        trace.update(
            input_shapes=[list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs],
            input_dtypes=[str(x.dtype).replace("torch.", "") if isinstance(x, torch.Tensor) else type(x).__name__ for x in inputs],
            input_bytes=sum(x.numel() * x.element_size() for x in tensors),
            param_bytes=model_bytes(self.ref),
            mutated_inputs=[i for i, (a, b) in enumerate(zip(before, after)) if a != b],
            roofline={k: (float(v) if isinstance(v, (int, float)) else v) for k, v in (roofline or {}).items()} or None,
        )
        return {"trace": trace}

    def cmd_probe_split(self, seed: int, chunks: int, tolerance: dict) -> dict:
        """After ``analyze``: whether the reference computes row blocks independently."""
        from .tracing import probe_row_split  # lazy: the tracer and kloom.opgraph add ~60 ms to every reference rank's start

        table = resolve_tolerance(getattr(self.workload, "TOLERANCE", None), {})
        table.update(tolerance_from_names(tolerance))

        def same(got, want) -> bool:
            return got.shape == want.shape and compare_leaf(got, want, table, "output")[0]

        split = probe_row_split(self.ref, lambda: self._inputs(seed), chunks=chunks, compare=same)
        self.sync()
        return {"split": split}
