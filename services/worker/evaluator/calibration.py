"""The reference's own float32 error, measured against a float64 run of a copy of it, and the
tolerance it widens.

The judge's float32 tolerance (1e-4 elementwise, 5e-5 norm-wise: ``compare.py``,
``precision.py``) is tight so that TF32 and bf16 arithmetic fail it. It suits an operator or a
short chain, whose honest fp32 variants stay below 4e-7 of the fp64 truth. A deep network
amplifies every rounding: a ResNet-101-like network in training mode (batch 4, 64x64, on the
CPU) is 1.75e-4 norm-wise from its own float64 run and 1.6 times the elementwise tolerance from
it, and inductor's honest compile of it 3.4e-4 and 3.6 times from the reference: the judge
called it incorrect. So on the first trial the reference rank also runs a float64 copy of the
model on float64 copies of the inputs (before its own call, with the random generators put back
as they were), and the judge widens the float32 tolerance to ``factor`` times what the
reference's own error uses of it, at most ``max_scale`` times. TF32's unit roundoff is 8192 times
float32's, so a network that amplifies float32 rounding to e amplifies TF32 to thousands of e:
still rejected.

Not calibrated (the tolerance stays as it is, and the record says why): a workload of several
ranks (a float64 run that fails on one rank would leave the others in a collective), a model
with parameters or buffers other than float32, outputs other than float32, a copy that cannot be
made or run in float64 (an operator without a float64 kernel, the memory), and a float64 run
that differs beyond any rounding (``max_error``: dropout drawn differently, a model that keeps
state between calls).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch

from . import tensors as T
from .compare import chunks
from .precision import norm_error


@dataclass(frozen=True)
class OwnError:
    """How far the reference's float32 outputs are from its float64 run: ``norm`` (the largest
    ||o32 - o64|| / ||o64|| over the outputs, over elements above the absolute tolerance, as
    ``precision.norm_problem`` measures), ``elementwise`` (the largest |o32 - o64| /
    (atol + rtol |o64|)); ``skipped`` says why it was not measured."""

    norm: float = 0.0
    elementwise: float = 0.0
    outputs: int = 0
    peak_bytes: int = 0
    seconds: float = 0.0
    skipped: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"norm": self.norm, "elementwise": self.elementwise, "outputs": self.outputs, "peak_bytes": self.peak_bytes,
                "seconds": self.seconds, "skipped": self.skipped}

    @classmethod
    def from_dict(cls, data: Any) -> "OwnError":
        if not isinstance(data, dict):
            return cls(skipped="the reference rank sent no calibration")
        return cls(float(data.get("norm", 0.0)), float(data.get("elementwise", 0.0)), int(data.get("outputs", 0)),
                   int(data.get("peak_bytes", 0)), float(data.get("seconds", 0.0)), str(data.get("skipped", "")))


def _float32_only(model: Any) -> str:
    """Why ``model`` cannot be run as a float64 copy ("" when it can)."""
    if not isinstance(model, torch.nn.Module):
        return "the reference is not a torch.nn.Module"
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_floating_point() and t.dtype != torch.float32:
            return f"the model holds {name} as {str(t.dtype).replace('torch.', '')}"
    return ""


def _wide(value: Any) -> Any:
    """``value`` with every float32 tensor copied as float64 (other values as they are)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float64) if value.dtype == torch.float32 else value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_wide(v) for v in value)
    if isinstance(value, dict):
        return {k: _wide(v) for k, v in value.items()}
    return copy.deepcopy(value)


def float64_run(model: Any, inputs: list, device: torch.device) -> tuple[list | None, str, int]:
    """The float64 copy's output leaves on ``inputs`` (None with the reason where it cannot run),
    and the device bytes the run took at its peak. The random generators are as they were after,
    and the model is untouched (a copy runs: a model that keeps state between calls, or caches
    tensors of its input's dtype, is as the float32 call will find it)."""
    why = _float32_only(model)
    if why:
        return None, why, 0
    cpu_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    wide = None
    try:
        wide = copy.deepcopy(model).to(torch.float64)
        with torch.no_grad():
            out = wide(*_wide(list(inputs)))
        leaves, _ = T.flatten(out)
        leaves = [x.detach() if isinstance(x, torch.Tensor) else x for x in leaves]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return leaves, "", int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0
    except torch.OutOfMemoryError:
        return None, "the float64 copy does not fit the device", 0
    except Exception as exc:  # noqa: BLE001  (any failure of the copy only means no calibration)
        return None, f"the float64 copy failed: {type(exc).__name__}: {str(exc)[:200]}", 0
    finally:
        del wide
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)


def own_error(outputs: list, wide: list, tolerance: dict[torch.dtype, tuple[float, float]]) -> OwnError:
    """How far the float32 ``outputs`` are from the float64 run's ``wide`` (same structure)."""
    if len(outputs) != len(wide):
        return OwnError(skipped=f"the float64 copy returned {len(wide)} outputs, not {len(outputs)}")
    atol, rtol = tolerance.get(torch.float32, (1e-4, 1e-4))
    norm = elementwise = 0.0
    measured = 0
    for i, (o, w) in enumerate(zip(outputs, wide)):
        if not isinstance(o, torch.Tensor) or not o.is_floating_point():
            continue
        if o.dtype != torch.float32:
            return OwnError(skipped=f"output {i} is {str(o.dtype).replace('torch.', '')}, not float32")
        if not isinstance(w, torch.Tensor) or w.shape != o.shape or w.dtype != torch.float64:
            return OwnError(skipped=f"the float64 copy's output {i} is not a float64 tensor of the same shape")
        o, w = o.detach(), w.detach().to(o.device)
        for _, got, want in chunks(o, w, torch.float64):
            diff = (got - want).abs()
            if not bool(torch.isfinite(diff).all()):
                return OwnError(skipped=f"the float64 copy's output {i} is not finite where the reference's is")
            elementwise = max(elementwise, float((diff / (atol + rtol * want.abs())).max()) if diff.numel() else 0.0)
        norm = max(norm, norm_error(o, w, atol))
        measured += 1
    if not measured:
        return OwnError(skipped="no float32 output")
    return OwnError(norm=norm, elementwise=elementwise, outputs=measured)


@dataclass(frozen=True)
class Widening:
    """What the judge does with the reference's own error: the float32 tolerance's scale
    (elementwise: atol and rtol; norm-wise: the fp32 bound), and the record's line."""

    elementwise: float = 1.0
    norm: float = 1.0
    note: str = ""


def widening(own: OwnError, norm_bound: float, factor: float, max_scale: float, max_error: float) -> Widening:
    """The scales for a reference whose own float32 error is ``own`` (1.0 where it is within
    the tolerance's reach already, or was not measured, or is beyond ``max_error``)."""
    if own.skipped:
        return Widening(note=f"float32 tolerance not calibrated: {own.skipped}")
    if not math.isfinite(own.norm) or own.norm > max_error:
        return Widening(note=(f"float32 tolerance not calibrated: the float64 copy differs from the reference by {own.norm:.2e} "
                              f"norm-wise, beyond rounding (more than {max_error:.0e})"))
    elementwise = min(max(1.0, factor * own.elementwise), max_scale)
    norm = min(max(1.0, factor * own.norm / norm_bound), max_scale)
    if elementwise == 1.0 and norm == 1.0:
        return Widening(note=f"float32 tolerance as set: the reference is {own.norm:.1e} norm-wise from its float64 run")
    return Widening(elementwise, norm, (
        f"float32 tolerance widened {elementwise:.3g}x elementwise and {norm:.3g}x norm-wise: the reference itself is "
        f"{own.norm:.2e} norm-wise from its float64 run ({own.elementwise:.2f} of the elementwise tolerance), "
        f"and an honest float32 candidate may be as far again"))


class Calibration:
    """The judge's side over an evaluation's trials: the largest own error seen so far and the
    widening it gives. Every correctness trial is calibrated (the float64 run costs the
    reference's call again, or more) while the reference's own error comes within ``headroom``
    of the float32 tolerance: a network's conditioning changes with its inputs (a deep MLP's own
    error varied sixfold between draws), and each trial is judged by the largest seen so far.
    A reference whose first trial is far inside the tolerance is not run in float64 again, nor one
    whose float64 runs took ``budget_s`` in all (cuDNN's float64 convolutions are far slower than
    its float32 ones: each trial's run would lengthen every evaluation of a job)."""

    def __init__(self, norm_bound: float, factor: float, max_scale: float, max_error: float, headroom: float = 3.0, budget_s: float = 10.0):
        self.norm_bound, self.factor, self.max_scale, self.max_error, self.headroom = norm_bound, factor, max_scale, max_error, headroom
        self.budget_s = budget_s  # float64 runs stop once they took this long in all (the first always runs)
        self.own = OwnError()
        self.trials = 0
        self.seconds = 0.0
        self.active = True

    def add(self, own: OwnError) -> Widening:
        """One trial's measurement; the widening for this trial and the ones after it. A trial
        whose float64 run failed or differs beyond rounding ends the calibration: no widening
        from then on (the trials before it stay judged as they were)."""
        self.trials += 1
        self.seconds += own.seconds
        if self.seconds >= self.budget_s:
            self.active = False  # the widening found so far stands; a user waits for every float64 run
        if own.skipped or not math.isfinite(own.norm) or own.norm > self.max_error:
            self.active = False
            self.own = own
            return self.widening()
        self.own = OwnError(max(self.own.norm, own.norm), max(self.own.elementwise, own.elementwise), own.outputs,
                            max(self.own.peak_bytes, own.peak_bytes), max(self.own.seconds, own.seconds))
        if self.headroom * self.factor * max(self.own.elementwise, self.own.norm / self.norm_bound) <= 1.0:
            self.active = False  # far inside the tolerance: no more float64 runs
        return self.widening()

    def widening(self) -> Widening:
        return widening(self.own, self.norm_bound, self.factor, self.max_scale, self.max_error)

    def record(self) -> dict[str, Any]:
        w = self.widening()
        return {**self.own.to_dict(), "trials": self.trials, "total_seconds": self.seconds, "elementwise_scale": w.elementwise,
                "norm_scale": w.norm, "note": w.note}
