"""What a measured speedup means: its two times, its confidence interval, and its verdict.

A speedup divides the reference's time by the candidate's, both from the same measurement (the
interleaved timing, when the evaluator interleaves). On a shared machine the same kernel can read
1.11x in one run and 0.75x in the next, so a speedup is reported with a 95% interval, and one
whose interval, widened by the noise between evaluations (``noise_floor``), includes 1.0 is "no
measurable change", neither a win nor a loss.

The interval comes from the per-call samples where they exist (``paired_interval``: a bootstrap
of the reported ratio, the slowest rank's median over the slowest rank's median, over the
interleaved pairs, which keeps each pair together so that drift that slowed both weighs on
neither); a record holding summary statistics only gets an interval
from them (``stats_interval``: the medians' standard errors, ranks and pairs unknown, so wider).

Standard library only: it runs in the evaluator's process and in reports alike.
"""

from __future__ import annotations

import math
import operator
import random
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

if TYPE_CHECKING:
    from kloom.evaluation import TimeStats, TimingRecord

Verdict = Literal["faster", "slower", "no measurable change", "unmeasured"]
NO_CHANGE = "no measurable change"
NO_FASTER = "no faster kernel found"
FASTER = "faster kernel found"
#: The strategy that runs the reference itself as a candidate: a correct anchor whose speedup
#: measures timing noise, never an improvement.
REFERENCE_COPY = "reference_copy"
#: z for a two-sided 95% interval.
_Z95 = 1.959964
_RESAMPLES = 400


#: The statistics a timing's speedup may divide (``judged_times``).
Statistic = Literal["median", "mean"]
_STATISTICS = {"median": statistics.median, "mean": statistics.fmean}


def judged_times(reference: Sequence["TimeStats"], candidate: Sequence["TimeStats"], skew_tolerance: float) -> tuple[float, float, Statistic]:
    """The two times a timing's speedup divides, and which statistic they are: each side's
    slowest rank's median, unless the candidate's mean call exceeds its median by more than the
    reference's does (by a factor over (1 + ``skew_tolerance``)), and then each side's slowest
    rank's mean. A median counts how fast most calls were, not the time they took together: a
    candidate that does a block's work in a few of its calls and hands back what they computed
    in the others (``front_loads_block.py``: every output right, every call's time honest) had a
    median of almost nothing and was credited the block's length (295x on the CPU). A mean cannot
    be moved by shifting time between calls; the tolerance lets honest candidates keep the median,
    robust to the machine's noise, where their calls spread as the reference's do (on two CPU
    cores both sides' means run 1.5-2.5x their medians). What shaping its calls can still gain a
    candidate is at most the factor (1 + ``skew_tolerance``)."""
    if excess_skew(reference, candidate) > 1.0 + skew_tolerance:
        return max(t.mean_ms for t in reference), max(t.mean_ms for t in candidate), "mean"
    return max(t.median_ms for t in reference), max(t.median_ms for t in candidate), "median"


def skew(sides: Sequence["TimeStats"]) -> float:
    """The slowest rank's mean call over the slowest rank's median (at least 1 for any sample
    whose median is not above its mean; infinite where the median is 0 and the mean is not)."""
    median, mean = max(t.median_ms for t in sides), max(t.mean_ms for t in sides)
    return mean / median if median > 0 else (math.inf if mean > 0 else 1.0)


def excess_skew(reference: Sequence["TimeStats"], candidate: Sequence["TimeStats"]) -> float:
    """How much more the candidate's calls are skewed than the reference's (``skew`` over ``skew``,
    the reference's taken as at least 1)."""
    return skew(candidate) / max(1.0, skew(reference))


def paired_interval(reference: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]], confidence: float = 0.95, seed: int = 0,
                    statistic: Statistic = "median") -> tuple[float, float]:
    """The interval of the speedup a timing reports, the slowest rank's median (or mean, as
    ``judged_times`` chose) over the slowest rank's (``TimingRecord.reference_ms / candidate_ms``), from interleaved samples given
    per rank (``reference[rank][i]`` was timed beside ``candidate[rank][i]``, and call i of every
    rank is the same call). Calls are resampled together, on every rank and both sides (a seeded
    bootstrap, so the same samples give the same interval). An interval of another statistic (the
    median of each call's slowest rank) put reported speedups outside their own intervals where
    the ranks' noise was not the same: 3.733x (3.46-3.67) on PKB's ring-attention backward."""
    if not reference or not candidate or len(reference) != len(candidate):
        raise ValueError("reference and candidate need samples for the same ranks")
    n = min(min(len(r) for r in reference), min(len(c) for c in candidate))
    if n < 2:
        raise ValueError("an interval needs at least two samples per side")
    rng = random.Random(seed)
    indices = range(n)
    center = _STATISTICS[statistic]
    ratios = []
    for _ in range(_RESAMPLES):
        # One call each to draw and to gather (a loop of randrange and a comprehension per side
        # took the judge ~80 ms per evaluation at 500 samples).
        pick = operator.itemgetter(*rng.choices(indices, k=n))
        c = max(center(pick(side)) for side in candidate)
        ratios.append(max(center(pick(side)) for side in reference) / c if c > 0 else math.inf)
    ratios.sort()
    tail = (1 - confidence) / 2
    return ratios[int(tail * (_RESAMPLES - 1))], ratios[int(math.ceil((1 - tail) * (_RESAMPLES - 1)))]


def stats_interval(reference: Sequence[TimeStats], candidate: Sequence[TimeStats]) -> tuple[float, float] | None:
    """An interval from per-rank summary statistics: the slowest rank's median on each side,
    with the standard error of a median (1.2533 sigma / sqrt(n)), combined on the log scale as if
    the sides were independent. None when the statistics are missing."""
    try:
        ref = max(reference, key=lambda s: s.median_ms)
        cand = max(candidate, key=lambda s: s.median_ms)
        if ref.median_ms <= 0 or cand.median_ms <= 0 or ref.iters < 2 or cand.iters < 2:
            return None
        rel = [1.2533 * s.stdev_ms / math.sqrt(s.iters) / s.median_ms for s in (ref, cand)]
    except (TypeError, ValueError):
        return None
    ratio = ref.median_ms / cand.median_ms
    half = _Z95 * math.hypot(*rel)
    return ratio * math.exp(-half), ratio * math.exp(half)


#: Between evaluations the same code, timed against itself, moves more than one evaluation's
#: samples say: on an H100 the reference's own copy read 0.82-1.15x at ~0.1 ms a call, each time
#: with an interval that excluded 1.0, and 1.000-1.012x at 2.7 ms
#: (results/gpu/h100-judge/self-timing.md). A verdict widens the interval by this floor.
NOISE_FLOOR_REL = 0.01
NOISE_FLOOR_MS = 0.02


def noise_floor(call_ms: float) -> float:
    """The relative change a verdict does not take for one between two evaluations of a call of
    ``call_ms``: 1% plus 20 us over the call's time (21% at 0.1 ms, 1.7% at 2.7 ms)."""
    return NOISE_FLOOR_REL + NOISE_FLOOR_MS / max(call_ms, 1e-3)


def verdict(low: float | None, high: float | None, floor: float = 0.0) -> Verdict:
    """Faster (slower) when the interval, widened by ``floor`` on each side, lies above (below) 1."""
    if low is None or high is None:
        return "unmeasured"
    if low / (1 + floor) > 1.0:
        return "faster"
    if high * (1 + floor) < 1.0:
        return "slower"
    return NO_CHANGE


@dataclass(frozen=True)
class Measured:
    """One speedup as a report shows it."""

    reference_ms: float
    candidate_ms: float
    speedup: float
    low: float | None
    high: float | None
    interval_from: Literal["samples", "statistics", "none"]
    #: The side bias this job measured by timing the reference against its own copy
    #: (``self_timing_bias``); 0 where none was measured.
    bias: float = 0.0

    @property
    def floor(self) -> float:
        """What a verdict does not take for a change: the between-evaluation noise of calls this
        long (``noise_floor``), compounded with the job's measured side bias."""
        return (1 + noise_floor(min(self.reference_ms, self.candidate_ms))) * (1 + self.bias) - 1

    @property
    def verdict(self) -> Verdict:
        return verdict(self.low, self.high, self.floor)

    @property
    def measurable_win(self) -> bool:
        return self.verdict == "faster"

    def text(self) -> str:
        """``1.42x (0.91 / 1.29 ms, 95% CI 1.31-1.55)``, with the verdict when it is not a win."""
        ci = f", 95% CI {self.low:.2f}-{self.high:.2f}" if self.low is not None and self.high is not None else ""
        out = f"{self.speedup:.2f}x ({self.reference_ms:.4g} / {self.candidate_ms:.4g} ms{ci})"
        return out if self.verdict == "faster" else f"{out}: {self.verdict}"


def reported_speedup(speedup: float | None, strategy: str | None) -> float | None:
    """A correct candidate's speedup as every report, job row, KB hint and fast_p counts it: the
    reference's own copy (``REFERENCE_COPY``) is never reported above 1.0x."""
    if speedup is None or strategy != REFERENCE_COPY:
        return speedup
    return min(speedup, 1.0)


def self_timing_bias(self_speedup: float | None) -> float:
    """How far one side of the judge was favoured in a job, from the reference timed against its
    own copy (``REFERENCE_COPY``), which would read 1.0x on an unbiased judge: 0.335 for a copy
    that read 1.335x or 1/1.335x. On 2xH200 such copies read 0.85-1.34x with intervals that
    excluded 1.0 (results/gpu/pkb-ws2), so a candidate of the same job is credited only with a
    change beyond that. 0 when the job timed no copy."""
    if self_speedup is None or not math.isfinite(self_speedup) or self_speedup <= 0:
        return 0.0
    return max(self_speedup, 1 / self_speedup) - 1


def measured(timing: TimingRecord | None, bias: float = 0.0) -> Measured | None:
    """The speedup of an evaluation's timing: its two medians, and the interval the evaluator
    computed from the samples, or one from the statistics; ``bias``: the job's side bias
    (``self_timing_bias``), which widens the verdict's floor."""
    if timing is None or timing.speedup is None or timing.candidate_ms is None:
        return None
    reference_ms = timing.reference_ms
    if reference_ms is None:  # a record without it (stored as null): the time the speedup implies
        reference_ms = timing.speedup * timing.candidate_ms
    low, high = timing.speedup_ci_low, timing.speedup_ci_high
    source: Literal["samples", "statistics", "none"] = "samples"
    if low is None or high is None:
        found = stats_interval(timing.reference or [], timing.candidate or [])
        low, high = found if found else (None, None)
        source = "statistics" if found else "none"
    return Measured(float(reference_ms), float(timing.candidate_ms), float(timing.speedup), low, high, source, bias)
