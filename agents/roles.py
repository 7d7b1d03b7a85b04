"""What the three roles see and return, and the protocols they implement.

Each role is small and testable alone: the planner turns a ``PlanningContext`` into a ``Plan``,
the coder turns a plan into candidate source, the verifier turns source into an evaluation, a
profile and feedback. The offline strategist and the LLM-backed roles implement the same
protocols, so the loop does not know which it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from kloom.evaluation import BaselineResult, EvalResult
from kloom.profile import Profile
from kloom.tuning import TunedConfig

from .analysis import Analysis
from .limits import Budget
from .records import JobSpec, Plan, Step, Usage, best_of


#: A job this similar to the query ran on this very workload (with the same computation).
EXACT_SIMILARITY = 0.999


@dataclass
class KernelHint:
    """A kernel the knowledge base kept, from a workload similar to this one."""

    kernel_id: str
    code: str
    strategy: str
    params: dict[str, Any]
    speedup: float
    workload_name: str
    similarity: float  # 1.0: same structure, shapes and world size
    same_workload: bool = False
    #: From nearly this workload (the same computation on the same hardware, at most 4x apart in
    #: input bytes and 2x in world size: ``kb.advice.CLOSE_SIZE_RATIO``): its speedup there is what
    #: it would measure here.
    close: bool = False
    #: From this very workload: the same computation, sizes, world size and hardware
    #: (similarity at least ``EXACT_SIMILARITY``).
    exact: bool = False


@dataclass
class StrategyHint:
    strategy: str
    description: str
    params: dict[str, Any]
    wins: int
    losses: int
    confidence: float  # derived from the evidence, in [0, 1]
    evidence: str = ""  # profiler and timing evidence, a few lines
    #: What it measured on the similar workloads, wins and losses alike: the geometric mean of its
    #: speedups weighted by each workload's similarity (None: it never ran correctly there), and
    #: the sum of those similarities (how much evidence that is).
    speedup: float | None = None
    weight: float = 0.0
    #: The same over the jobs on nearly this workload (as ``KernelHint.close``).
    close_speedup: float | None = None
    close_weight: float = 0.0
    #: The same over the jobs on this very workload (as ``KernelHint.exact``): what evaluating it
    #: again would most likely measure.
    exact_speedup: float | None = None
    exact_weight: float = 0.0


@dataclass
class FailureHint:
    strategy: str
    params: dict[str, Any]
    reason: str
    count: int = 1


@dataclass
class KBAdvice:
    kernels: list[KernelHint] = field(default_factory=list)
    strategies: list[StrategyHint] = field(default_factory=list)
    failures: list[FailureHint] = field(default_factory=list)
    #: What Triton's autotuner chose in kept kernels of similar workloads on this very hardware, most
    #: similar first (``kloom.tuning``): a kernel candidate starts from them.
    tuned: list[TunedConfig] = field(default_factory=list)


@dataclass
class PlanningContext:
    spec: JobSpec
    workload_source: str
    workload_name: str
    analysis: Analysis | None  # the structure traced in the reference (None before it is known)
    baseline: BaselineResult | None  # the reference timed alone: its time and roofline
    history: list[Step]
    budget: Budget
    kb: KBAdvice = field(default_factory=KBAdvice)

    @property
    def best(self) -> Step | None:
        return best_of(self.history)

    @property
    def last(self) -> Step | None:
        return self.history[-1] if self.history else None


@dataclass
class CoderOutput:
    code: str | None
    usage: Usage = field(default_factory=Usage)
    error: str = ""  # why no code came out (unparseable answer, empty answer, strategy n/a)


@dataclass
class Verdict:
    status: str
    evaluation: EvalResult | None
    profile: Profile | None
    feedback: str


class Planner(Protocol):
    """Every method the loop calls. A planner may subclass this for the defaults: no fallback,
    no reason of its own when it is done."""

    #: Why the last ``plan`` call found nothing to try, when the planner knows better than the loop.
    done_reason: str = ""

    def plan(self, ctx: PlanningContext) -> tuple[Plan | None, Usage]:
        """The next plan, or None when there is nothing left worth trying."""
        ...

    def fallback(self, ctx: PlanningContext) -> Plan | None:
        """A safe plan for one last step when a limit stops a job that has no correct candidate
        (None: none). The loop runs it at most once per job."""
        return None

    def annotate(self, analysis: Analysis, source: str) -> None:
        """Note in the job's analysis what this planner reads in the workload's source, before
        its first plan (the offline strategist: the source rewrites that apply). Nothing by default."""


class Coder(Protocol):
    def write(self, plan: Plan, ctx: PlanningContext) -> CoderOutput: ...


class Evaluator(Protocol):
    """What the loop and the verifier ask of the evaluator (``services.worker.evaluator.Evaluator``),
    which runs workload and candidate code in its rank processes. Results are its typed records
    (``BaselineResult``, ``EvalResult``, the reference's traces)."""

    #: The GPUs its ranks run on (None: the first ``world_size`` visible, or the CPU).
    devices: list[int] | None

    def baseline(self, workload: str, *, world_size: int, deadline_s: float | None = None, more_after: int = 0) -> BaselineResult: ...

    def analyze(self, workload: str, *, world_size: int) -> Any: ...

    def evaluate(self, workload: str, *, candidate_source: str, world_size: int, deadline_s: float | None = None,
                 more_after: int = 0) -> EvalResult: ...
