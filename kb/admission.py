"""What the knowledge base keeps: only what the judge measured.

A kernel enters from a finished job's trajectory, written by the worker's loop right after the
evaluator judged each step (no route or command takes a trajectory from a user). Even so, the
record is checked for what the evaluator always writes, because a kernel kept here is shown to
every key and offered to every later job: the step and its evaluation both say ``correct``, every
correctness trial passed on every rank, the evaluation is of this code (its sha256) on this
workload, the speedup is the one its times give, no flag says a person should look at it (too
fast, faster than the roofline allows), a reference that ran slower beside it than alone is still
beaten when timed alone, and the win clears the noise (``ingest.beat_baseline``). A job whose best step fails these adds no kernel at all.
"""

from __future__ import annotations

import hashlib
import math

from agents.records import Step
from kloom.evaluation import EvalResult

#: Flags of an evaluation that mean a person should look before anyone relies on it.
SUSPICIOUS_FLAGS = ("suspiciously_fast", "faster_than_roofline_floor")
#: A reference that ran slower beside the candidate than alone: the win must hold against the
#: reference timed alone (a candidate that slows the reference down wins nothing by it).
DRIFT_FLAG = "reference_timing_drift"
#: How much faster than the reference timed alone a drifted win must still be.
DRIFT_MIN_GAIN = 0.02
#: The evaluator version of a record written before evaluations carried one.
FIRST_EVALUATOR_VERSION = "1"


def evaluator_version(evaluation: EvalResult | None) -> str:
    """The version of the evaluator that wrote ``evaluation``."""
    return str((evaluation.evaluator_version if evaluation else "") or FIRST_EVALUATOR_VERSION)[:32]


def refusal(step: Step, workload_sha256: str) -> str:
    """Why ``step``'s candidate may not be kept as a judged win on the workload ``workload_sha256``
    ("" when it may), apart from the margin over the noise, which ``ingest.beat_baseline`` decides."""
    evaluation = step.evaluation
    if step.status != "correct" or evaluation is None or evaluation.status != "correct" or not evaluation.correct:
        return f"not judged correct ({step.status})"
    if not step.candidate_code:
        return "no code"
    sha = hashlib.sha256(step.candidate_code.encode("utf-8", "surrogatepass")).hexdigest()
    if evaluation.candidate_sha256 != sha:
        return "the evaluation is not of this code"
    if workload_sha256 and evaluation.workload_sha256 not in (None, "", workload_sha256):
        return "the evaluation is not on this workload"
    trials = evaluation.trials
    if not trials or not all(t.ok and t.ranks and all(r.ok for r in t.ranks) for t in trials):
        return "not every correctness trial passed on every rank"
    flags = [f for f in evaluation.flags if str(f).startswith(SUSPICIOUS_FLAGS)]
    if flags:
        return f"flagged: {flags[0]}"
    timing = evaluation.timing
    if timing is None:
        return "no timing"
    try:  # a time stored as null (an infinity, which JSON cannot hold) is none
        reference_ms, candidate_ms, speedup = float(timing.reference_ms), float(timing.candidate_ms), float(timing.speedup)
    except (TypeError, ValueError):
        return "no timing"
    if not all(math.isfinite(v) and v > 0 for v in (reference_ms, candidate_ms, speedup)):
        return "a time that is not a positive number"
    if not math.isclose(speedup, reference_ms / candidate_ms, rel_tol=1e-6):
        return "the speedup is not the one its timings give"
    alone = timing.reference_alone or []
    if alone and any(str(f).startswith(DRIFT_FLAG) for f in evaluation.flags):
        alone_ms = max(float(t.median_ms) for t in alone)
        if alone_ms / candidate_ms <= 1 + DRIFT_MIN_GAIN:
            return f"the reference ran slower beside it; against the reference alone it is {alone_ms / candidate_ms:.3f}x"
    return ""
